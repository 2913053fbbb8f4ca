"""`spotjobs dashboard [--port N] [--host 127.0.0.1]`: a local web app over the deployment the CLI
reaches (spotjobs/dashboard/): the requests with their attempts, cost and trainer log, live, and a
cancel behind a confirmation. Flask is imported only when this command runs.
"""

from __future__ import annotations

import argparse
import sys

from spotjobs.cli.common import EXIT_OK, command

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = command(
        subparsers,
        "dashboard",
        help="a local web page: requests, their attempts, cost and log, live; cancel from it",
        description="Serves the dashboard on http://HOST:PORT/ over the deployment the CLI reaches "
        "(the settings' state bucket through Application Default Credentials, or the local stack's "
        "emulators when its environment is exported). It binds loopback by default: anyone who can "
        "reach the address may read every request and cancel one, so another address is warned about.",
        examples=["spotjobs dashboard", "spotjobs dashboard --port 8765"],
    )
    parser.add_argument("--port", type=int, default=8765, help="the port (default 8765)")
    parser.add_argument("--host", default="127.0.0.1", help="the address to bind (default 127.0.0.1, loopback)")
    parser.add_argument("--project", help="Google Cloud project (default: GOOGLE_CLOUD_PROJECT)")
    parser.set_defaults(run=run_dashboard)


def run_dashboard(args: argparse.Namespace) -> int:
    from shared.settings import get_settings
    from spotjobs.dashboard.app import create_app
    from spotjobs.dashboard.reading import deployment_of

    loopback = args.host in LOOPBACK
    if not loopback:
        print(
            f"warning: binding {args.host}, not loopback: anyone who reaches it can read every request "
            "and cancel any; nothing authenticates them",
            file=sys.stderr,
        )
    app = create_app(deployment_of(get_settings(), args.project), trusted_hosts=LOOPBACK if loopback else None)
    print(f"spotjobs dashboard on {served_url(args.host, args.port)} (Ctrl-C to stop)", file=sys.stderr)
    app.run(host=args.host, port=args.port, debug=False, use_reloader=False)
    return EXIT_OK


def served_url(host: str, port: int) -> str:
    """The URL a browser opens: an IPv6 address goes in brackets (RFC 3986), `http://[::1]:8765/`."""
    return f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"
