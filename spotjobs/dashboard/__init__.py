"""`spotjobs dashboard`: a local web app over the deployment the CLI reaches (issue 47).

- `reading`: where the pages read from (the ledger, the trainer logs) and how a cancel is made, the
  same read paths `spotjobs status`, `logs` and `cancel` use;
- `views`: what a page shows, as data (rows, attempt bars, cost so far against on demand);
- `app`: the Flask app (pages, the cancel action, the per-session token, the headers).

Nothing here is imported by the CLI's other commands: `spotjobs/cli/dashboard.py` imports it inside
the function that runs the command, so Flask is loaded only for the dashboard.
"""
