"""`spotjobs triggers`: retraining triggers, stored where every on_trigger instance reads them.

    spotjobs triggers apply FILE            validate, then store (exit 2 naming every violation; nothing stored)
    spotjobs triggers list [--json]         the stored triggers and their last window
    spotjobs triggers test NAME [--object gs://B/O ...] [--file FILE] [--json]
                                            offline: the request a window would publish
    spotjobs triggers delete NAME

FILE holds one definition (a JSON object) or several (a JSON list). Definitions are stored at
`gs://<state bucket>/triggers/_definitions/<name>.json`, the format Terraform's
`retraining_triggers` writes; instances re-read them every SPOTJOBS_TRIGGER_CACHE_SECONDS.
Works against real GCS, or the emulator when STORAGE_EMULATOR_HOST is set.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from spotjobs.cli.common import command


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = command(
        subparsers,
        "triggers",
        help="retraining triggers: apply, list, test, delete",
        description=__doc__.split("\n\n", 2)[2],
        examples=[
            "spotjobs triggers apply daily-data.json",
            "spotjobs triggers test daily-data --object gs://my-data/incoming/part-0001.parquet",
        ],
    )
    commands = parser.add_subparsers(dest="triggers_command", required=True, metavar="SUBCOMMAND")
    apply = command(
        commands,
        "apply",
        help="validate and store trigger definitions",
        examples=["spotjobs triggers apply daily-data.json", "cat triggers.json | spotjobs triggers apply -"],
    )
    apply.add_argument("file", help="a JSON definition, or a JSON list of them ('-' for stdin)")
    apply.set_defaults(run=run_apply)
    listing = command(
        commands,
        "list",
        help="the stored triggers",
        examples=["spotjobs triggers list", "spotjobs triggers list --json"],
    )
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(run=run_list)
    test = command(
        commands,
        "test",
        help="offline: the request a window would publish",
        examples=[
            "spotjobs triggers test daily-data --object gs://my-data/incoming/a.parquet",
            "spotjobs triggers test daily-data --file daily-data.json --json",
        ],
    )
    test.add_argument("name")
    test.add_argument(
        "--object", action="append", default=[], metavar="GS_URI", help="a new object of the window (repeatable)"
    )
    test.add_argument("--file", help="read the definition from this file instead of the state bucket")
    test.add_argument("--json", action="store_true")
    test.set_defaults(run=run_test)
    delete = command(
        commands,
        "delete",
        help="remove a stored trigger (its windows stay)",
        examples=["spotjobs triggers delete daily-data"],
    )
    delete.add_argument("name")
    delete.set_defaults(run=run_delete)


def _load(path: str) -> Any:
    text = sys.stdin.read() if path == "-" else open(path, encoding="utf-8").read()
    return json.loads(text)


def check_documents(documents: list[Any]) -> tuple[list[Any], list[str]]:
    """Every violation of every definition (with the settings of this environment's policy)."""
    from shared.clock import utcnow
    from shared.errors import Violation
    from shared.settings import get_settings
    from shared.triggers.definition import read_definition
    from shared.triggers.render import check_request_template

    problems: list[str] = []
    definitions = []
    names: set[str] = set()
    for index, document in enumerate(documents):
        label = (
            document.get("name")
            if isinstance(document, dict) and isinstance(document.get("name"), str)
            else f"[{index}]"
        )
        definition, violations = read_definition(document)
        if definition is not None:
            violations = check_request_template(definition, get_settings(), utcnow())
            if definition.name in names:
                violations.append(Violation("name", "appears twice in the file"))
            names.add(definition.name)
        problems.extend(f"{label}: {v}" for v in violations)
        definitions.append(definition)
    return definitions, problems


def run_apply(args: argparse.Namespace) -> int:
    try:
        loaded = _load(args.file)
    except (OSError, ValueError) as exc:
        print(f"spotjobs triggers apply: {args.file}: {exc}", file=sys.stderr)
        return 2
    documents = loaded if isinstance(loaded, list) else [loaded]
    _, problems = check_documents(documents)
    if problems:
        print(f"spotjobs triggers apply: {len(problems)} violation(s); nothing stored", file=sys.stderr)
        for line in problems:
            print(f"  {line}", file=sys.stderr)
        return 2
    store = _store()
    for document in documents:
        store.put_definition(document)
        print(f"stored trigger {document['name']}")
    return 0


def run_list(args: argparse.Namespace) -> int:
    from shared.triggers import store as paths
    from shared.triggers.definition import read_definition

    store = _store()
    rows = []
    for document in store.list_definitions():
        definition, violations = read_definition(document)
        state = store.read(paths.state_path(document.get("name", "")))[0] or {}
        open_windows = store.list_names(paths.open_prefix(document.get("name", ""))) if definition else []
        rows.append(
            {
                "name": document.get("name"),
                "source": document.get("source"),
                "coalesce_seconds": definition.coalesce_seconds if definition else None,
                "min_objects": definition.min_objects if definition else None,
                "cooldown_seconds": definition.cooldown_seconds if definition else None,
                "valid": definition is not None,
                "violations": [str(v) for v in violations],
                "open_windows": open_windows,
                "carried_windows": state.get("carry", []),
                "last_fired_window": state.get("last_fired_window"),
                "last_fired_at": state.get("last_fired_at"),
            }
        )
    if args.json:
        json.dump(rows, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    if not rows:
        print("no triggers")
    for row in rows:
        kind, body = next(iter((row["source"] or {"?": {}}).items()))
        where = {
            "gcs": lambda b: f"gs://{b.get('bucket')}/{b.get('prefix', '')}",
            "pubsub": lambda b: f"topic {b.get('topic')} {b.get('attributes') or ''}".strip(),
            "schedule": lambda b: f"cron '{b.get('cron')}' {b.get('time_zone', 'Etc/UTC')}",
        }.get(kind, lambda b: "?")(body)
        print(
            f"{row['name']:<24} {kind:<8} {where:<40} window {row['coalesce_seconds']}s  "
            f"open {len(row['open_windows'])}  last fired {row['last_fired_window'] or '-'}"
            + ("" if row["valid"] else "  INVALID: " + "; ".join(row["violations"]))
        )
    return 0


def run_test(args: argparse.Namespace) -> int:
    from shared.clock import utcnow
    from shared.settings import get_settings
    from shared.triggers.definition import read_definition
    from shared.triggers.render import Window, check_rendered, manifest_uri_for, render

    document = _load(args.file) if args.file else _store().get_definition(args.name)
    if isinstance(document, list):
        document = next((d for d in document if isinstance(d, dict) and d.get("name") == args.name), None)
    if document is None:
        print(f"spotjobs triggers test: no trigger named {args.name}", file=sys.stderr)
        return 1
    definition, violations = read_definition(document)
    if definition is None:
        for v in violations:
            print(f"  {v}", file=sys.stderr)
        return 2
    objects, ignored = [], []
    for uri in args.object:
        bucket, _, name = uri.removeprefix("gs://").partition("/")
        (objects if definition.matches_object(bucket, name) else ignored).append(uri)
    settings = get_settings()
    window = Window.containing(utcnow(), definition.coalesce_seconds)
    manifest_uri = manifest_uri_for(settings, definition.name, window.id)
    envelope = render(
        definition.request, trigger=definition.name, window=window, manifest_uri=manifest_uri, object_count=len(objects)
    )
    problems = [str(v) for v in check_rendered(envelope, settings)]
    would_fire = definition.source_kind == "schedule" or len(objects) >= max(definition.min_objects, 1)
    result = {
        "trigger": definition.name,
        "window_id": window.id,
        "manifest_uri": manifest_uri,
        "objects": objects,
        "ignored_objects": ignored,
        "would_publish": would_fire and not problems,
        "violations": problems,
        "request": envelope,
    }
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        for uri in ignored:
            print(f"ignored (not watched by {definition.name}): {uri}")
        if not would_fire:
            print(f"no request: {len(objects)} object(s), min_objects={definition.min_objects}")
        for line in problems:
            print(f"violation: {line}")
        print(json.dumps(envelope, indent=2))
    return 2 if problems else 0


def run_delete(args: argparse.Namespace) -> int:
    if _store().delete_definition(args.name):
        print(f"deleted trigger {args.name}")
        return 0
    print(f"spotjobs triggers delete: no trigger named {args.name}", file=sys.stderr)
    return 1


def _store() -> Any:
    from shared.adapters import clients
    from shared.settings import get_settings
    from shared.triggers.store import TriggerStore

    return TriggerStore(clients.storage_client().bucket(get_settings().state_bucket))
