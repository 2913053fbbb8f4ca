"""spotjobs' runtime logic (what the functions' zip ships): pure, typed, clients passed in.

Rooms (docs/ARCHITECTURE.md, "Layout and what each folder may import"; tests/unit/test_layering.py
enforces the table):

- foundation, the modules at the top that every room may import: `settings` (the one frozen
  settings object), `errors` (the hierarchy and `is_retryable`), `log`, `clock`, `topology`,
  `alerts` (the ops alert message). They import only each other.
- `requests/`: what a request may be, read and validated. `ledger/`: the state bucket's records
  and the moves on them. `adapters/`: Vertex AI and the Google clients. `deciding/`: what an
  observation means and what to send. `pruning/`, `triggers/`: their own flows.
- `wiring` (the composition root, `Ports`) and `delivery` (a Pub/Sub push in, ack or redeliver out).
- the shells, one per function flow: `submit`, `observe` (on_job_event), `reconcile`,
  `redeliveries` (what submit does with a delivery it has seen before). A shell may import every
  room; nothing in a room imports a shell.

Nothing here imports `spotjobs` (the publisher API and the operator's tools) or `devstack`.
"""
