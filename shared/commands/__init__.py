"""CLI subcommands. Each module exposes `register(subparsers)`; it imports heavy libraries only
inside the function that runs the command, so `spotjobs --help` stays instant."""
