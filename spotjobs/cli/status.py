"""`spotjobs status`: requests and their attempts from the ledger; `--watch` follows them.

    spotjobs status [REQUEST_ID] [--json] [--watch]
    spotjobs status [--status S]... [--label K=V]... [--since T] [--limit N]

One line per request, or one request with every attempt, its re-queue and the checkpoint-interval
advice (spotjobs/reporting/advice.py). Preemptions read as a count, or "≥1" when an attempt ended by
preemption and nothing said how often.

Finding requests (the filters, the counts on top, what they read): spotjobs/cli/find.py.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from shared.deciding.continuations import continuations_text
from shared.deciding.preemptions import preemptions_text, total_preemptions_text
from spotjobs.cli.common import EXIT_FAILED, EXIT_INVALID, EXIT_OK, command, terminal_text
from spotjobs.cli.find import Query, find_records, format_counts, label_filter, since_filter, status_filter, statuses

if TYPE_CHECKING:
    from shared.ledger.records import RequestRecord
    from shared.settings import Settings


def register(subparsers: argparse._SubParsersAction) -> None:
    status = command(
        subparsers,
        "status",
        help="requests and their attempts, from the ledger",
        description="Reads the ledger: one line per request (the filters' matches, newest first, under a "
        "count per status), or one request with every attempt. Exits 1 when the request is not in the "
        "ledger, 2 on a filter it cannot read.",
        examples=[
            "spotjobs status",
            "spotjobs status resnet-nightly-001 --json",
            "spotjobs status resnet-nightly-001 --watch",
            "spotjobs status --status active --label team=vision",
            "spotjobs status --status failed --since 24h",
        ],
    )
    status.add_argument("request_id", nargs="?", help="one request (default: all, newest first)")
    status.add_argument(
        "--status",
        dest="statuses",
        action="append",
        type=status_filter,
        metavar="STATUS",
        help="only requests with this status (repeatable): active (not finished), "
        + ", ".join(s.lower() for s in statuses()),
    )
    status.add_argument(
        "--label",
        dest="labels",
        action="append",
        type=label_filter,
        metavar="KEY=VALUE",
        help="only requests whose CustomJob carries this label (repeatable: all of them)",
    )
    status.add_argument(
        "--since",
        type=since_filter,
        metavar="TIME",
        help="only requests changed (created, moved on or finished) since TIME: an RFC 3339 time or "
        "date (2026-11-30T08:00:00Z, 2026-11-30) or a duration back from now (90m, 24h, 7d)",
    )
    status.add_argument("--json", action="store_true", help="print the ledger records as JSON")
    status.add_argument("--limit", type=int, default=100, help="at most this many requests (default 100)")
    status.add_argument("--project", help="Google Cloud project (default: GOOGLE_CLOUD_PROJECT)")
    status.add_argument(
        "--watch",
        action="store_true",
        help="print again whenever it changes, until the request ends (or Ctrl-C); with --json, "
        "one JSON document per line",
    )
    status.add_argument(
        "--interval", type=float, default=2.0, metavar="SECONDS", help="--watch polls this often (default 2)"
    )
    status.add_argument("--timeout", type=float, default=None, metavar="SECONDS", help="--watch stops after this long")
    status.set_defaults(run=run_status)


def run_status(args: argparse.Namespace) -> int:
    if args.request_id and (args.statuses or args.labels or args.since):
        print("--status, --label and --since find requests; give them without a REQUEST_ID", file=sys.stderr)
        return EXIT_INVALID
    from shared.ledger.store import LedgerStore
    from shared.settings import get_settings

    settings = get_settings()
    from google.cloud import storage

    client = storage.Client(project=args.project or settings.project)
    ledger = LedgerStore(client.bucket(settings.state_bucket))
    if getattr(args, "watch", False):
        return _watch_status(args, ledger, settings)
    if args.request_id:
        record = ledger.get(args.request_id)
        if record is None:
            print(f"no request {args.request_id} in gs://{settings.state_bucket}", file=sys.stderr)
            return EXIT_FAILED
        records = [record]
    else:
        found = find_records(ledger, query_of(args), args.limit)
        records = found.records
    if args.json:
        payload: Any = records[0].to_json() if args.request_id else [r.to_json() for r in records]
        if args.request_id:
            advice = _advice(ledger, records[0])
            payload["advice"] = advice.to_json() if advice else None
            payload["deadline_view"] = deadline_view(records[0], settings)
            payload["cost"] = cost_view(records[0])
        json.dump(payload, sys.stdout, indent=2)
        sys.stdout.write("\n")
    elif args.request_id:
        sys.stdout.write(format_request(records[0], settings))
        advice = _advice(ledger, records[0])
        if advice is not None:
            sys.stdout.write(advice.sentence() + "\n")
    else:
        sys.stdout.write(format_counts(found) + format_requests(records))
    return EXIT_OK


# Requests whose attempts the preemption rate is measured over.
ADVICE_SAMPLE = 200


def _advice(ledger: Any, record: RequestRecord) -> Any:
    """Checkpoint-interval advice for `record`, from the preemptions of recent requests."""
    from shared.clock import utcnow
    from spotjobs.reporting.advice import advise, preemption_rates

    sample = recent_records(ledger, ADVICE_SAMPLE)
    return advise(record, preemption_rates(sample, utcnow()))


def _watch_status(args: argparse.Namespace, ledger: Any, settings: Settings) -> int:
    """Print the status whenever it changes; end when the request (every request listed) has
    ended, on Ctrl-C/SIGTERM (exit 0) or after --timeout (exit 1 if still active)."""
    import signal
    import time

    stopping = {"now": False}

    def stop(signum: int, frame: object) -> None:
        stopping["now"] = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    deadline = time.monotonic() + args.timeout if args.timeout else None
    shown: str | None = None
    while not stopping["now"]:
        if args.request_id:
            record = ledger.get(args.request_id)
            records = [record] if record else []
        else:
            found = find_records(ledger, query_of(args), args.limit)
            records = found.records
        if args.json:
            payload: Any = (
                (records[0].to_json() if records else None) if args.request_id else [r.to_json() for r in records]
            )
            text = json.dumps(payload, separators=(",", ":")) + "\n"
        elif args.request_id:
            text = format_request(records[0], settings) if records else f"{args.request_id}: not in the ledger yet\n"
        else:
            text = format_counts(found) + format_requests(records)
        if text != shown:
            if shown is not None and not args.json:
                sys.stdout.write("\n")
            sys.stdout.write(text)
            sys.stdout.flush()
            shown = text
        if records and all(r.is_terminal for r in records) and args.request_id:
            return EXIT_OK
        if deadline is not None and time.monotonic() >= deadline:
            return EXIT_FAILED if args.request_id else EXIT_OK
        time.sleep(max(0.1, args.interval))
    return EXIT_OK


def recent_records(ledger: Any, limit: int) -> list[RequestRecord]:
    """The `limit` most recently created requests, newest first (`find_records` with no filter)."""
    return find_records(ledger, Query(), limit).records


def query_of(args: argparse.Namespace) -> Query:
    return Query(frozenset(args.statuses or ()), dict(args.labels or ()), args.since)


def format_requests(records: Sequence[RequestRecord]) -> str:
    """One line per request: where its latest attempt stands."""
    header = (
        "REQUEST_ID",
        "STATUS",
        "ATTEMPT",
        "LOCATION",
        "STRATEGY",
        "STATE",
        "PREEMPTIONS",
        "JOB",
        "UPDATED",
    )
    rows = []
    for record in records:
        latest = record.latest
        max_attempts = record.request.get("max_attempts", "?")
        rows.append(
            (
                record.request_id,
                record.status,
                f"{latest.n}/{max_attempts}" if latest else f"-/{max_attempts}",
                latest.location if latest else "-",
                latest.strategy if latest else "-",
                _short_state(latest.state) if latest else "-",
                total_preemptions_text(record.attempts),
                (latest.job_id or "-") if latest else "-",
                record.updated_at,
            )
        )
    return _table(header, rows) if rows else "no requests\n"


def deadline_view(record: RequestRecord, settings: Settings, now: datetime | None = None) -> dict[str, Any] | None:
    """The deadline, the progress, the projected finish where the job runs now and the slack (what
    on_job_event and reconcile decide on: shared/deciding/deadline_watch.py); None without one."""
    from shared.clock import iso, utcnow
    from shared.deciding.deadline import Action, decide_deadline
    from shared.deciding.deadline_watch import deadline_situation, projected_finish
    from shared.deciding.decision_policy import DecisionPolicy
    from shared.requests.attempts import ON_DEMAND, SPOT

    if not record.request.get("deadline"):
        return None
    view: dict[str, Any] = {"deadline": record.request["deadline"]}
    situation = deadline_situation(
        record,
        now or utcnow(),
        prior_seconds=settings.changeover_prior_seconds,
        review_seconds=settings.reconcile_interval_seconds,
        checkpoint_prior_seconds=settings.checkpoint_prior_seconds,
    )
    if situation is None:
        return {**view, "known": False}  # the work or its rate not known yet (no kit line so far)
    decision = decide_deadline(situation)
    latest = record.latest
    if decision.action is Action.SWITCH_TO_ON_DEMAND and latest is not None and latest.strategy == SPOT:
        refused = DecisionPolicy.from_settings(settings).refuses(ON_DEMAND, record, latest.n + 1)
        view["refused"] = str(refused) if refused else None  # the request stays on Spot
    return {
        **view,
        "known": True,
        "committed_steps": situation.work.committed_steps,
        "total_steps": situation.work.total_steps,
        "placement": situation.placement.value,
        "projected_finish": iso(projected_finish(situation), timespec="seconds"),
        "slack_seconds": round(decision.slack_seconds),
        "changeover_seconds": round(situation.changeover_seconds),
        "next": decision.action.value,
        "reason": decision.reason,
    }


def _deadline_lines(view: dict[str, Any] | None) -> list[str]:
    if view is None:
        return []
    if not view["known"]:
        return [f"deadline    {view['deadline']}   progress unknown until the kit reports total_steps and a rate"]
    done, total = view["committed_steps"], view["total_steps"]
    return [
        f"deadline    {view['deadline']}   progress {done}/{total} steps committed ({done / total:.0%})   "
        f"{view['placement'].replace('_', ' ')}",
        f"            projected finish {view['projected_finish']} on the current plan   slack {view['slack_seconds']} s "
        f"(one changeover {view['changeover_seconds']} s)   next: {view['next'].replace('_', ' ')}"
        + (f", refused by the policy ({view['refused']}): stays on Spot" if view.get("refused") else ""),
    ]


def format_request(record: RequestRecord, settings: Settings | None = None, now: datetime | None = None) -> str:
    """A request and every attempt (where it ran and why there), re-queue and outcome, and its
    deadline's slack if it has one."""
    from shared.settings import Settings

    lines = [
        f"request     {record.request_id}",
        f"status      {record.status}",
        f"output dir  {record.output_dir}",
        f"created     {record.created_at}   updated {record.updated_at}   finished {record.finished_at or '-'}",
        f"max attempts {record.request.get('max_attempts', '?')}   locations {', '.join(record.request.get('locations') or []) or record.request.get('location', '-')}",
    ]
    lines.extend(_deadline_lines(deadline_view(record, settings or Settings(), now)))
    lines.append(cost_line(record, now))
    continued = continuations_text(record, (settings or Settings()).max_runtime_seconds)
    if continued:  # runs past the job timeout (shared/deciding/continuations.py)
        lines.append(f"runtime     {continued}")
    if record.cancel:
        cancel = record.cancel
        ending = "" if record.is_terminal else "; its job is being cancelled"
        lines.append(f"cancelled   by {cancel.by} at {cancel.at}: {cancel.reason or 'no reason given'}{ending}")
    if record.requeue:
        requeue = record.requeue
        lines.append(
            f"re-queue    attempt {requeue.attempt} in {requeue.location} ({requeue.strategy}) because {requeue.reason}; "
            f"decided {requeue.decided_at}, published {'yes' if requeue.message_id else 'not yet'}"
        )
    header = (
        "N",
        "LOCATION",
        "STRATEGY",
        "STATE",
        "PREEMPTIONS",
        "JOB",
        "CLAIMED",
        "CREATED",
        "ENDED",
        "OUTCOME",
        "ERROR",
    )
    rows = [
        (
            str(a.n),
            a.location,
            a.strategy,
            _short_state(a.state),
            preemptions_text(a),
            a.job or "-",
            a.claimed_at,
            a.created_at or "-",
            a.ended_at or "-",
            a.outcome or "-",
            (a.error or {}).get("message", "-") if a.error else "-",
        )
        for a in record.attempts
    ]
    # Where each attempt runs and why there (shared/fleet/placing.py), under the table.
    placed = "".join(
        terminal_text(f"placed      attempt {a.n} in {a.location}{f' on {a.machine}' if a.machine else ''}: {a.placed}")
        + "\n"
        for a in record.attempts
        if a.placed
    )
    return "\n".join(terminal_text(line) for line in lines) + "\n\n" + _table(header, rows) + placed


def cost_view(record: RequestRecord, now: datetime | None = None) -> dict[str, Any]:
    """What the request spent (shared/fleet/spend.py: Vertex's run times x the price table), its
    budget and whether it is held (False: the spend is unknown, and the budget stops the request),
    and the price table's date; `spent_usd` None when unknown, never 0."""
    from shared.clock import utcnow
    from shared.fleet.spend import max_cost, request_spend
    from shared.requests.pricing import table

    spend = request_spend(record, now or utcnow())
    limit = max_cost(record.request)
    return {
        **spend.to_json(),
        "max_cost_usd": limit,
        "budget_held": None if limit is None else spend.known,  # False: the budget stops it (budget_unpriced)
        "prices_as_of": table()["as_of"],
    }


def cost_line(record: RequestRecord, now: datetime | None = None) -> str:
    """ "cost        $1.23 (on demand $4.00, saved $2.77; ...) of max_cost_usd $10.00, prices as of ..."."""
    from shared.clock import utcnow
    from shared.fleet.spend import max_cost, request_spend
    from shared.requests.pricing import table

    limit = max_cost(record.request)
    spend = request_spend(record, now or utcnow())
    budget = f" of max_cost_usd ${limit:.2f}" if limit is not None else ""
    if limit is not None and not spend.known:  # a table redeployed without its row (shared/deciding/budget_watch.py)
        budget += ", not held: the spend is unknown, so the budget stops the request"
    return f"cost        {spend.shown()}{budget}; prices as of {table()['as_of']}"


def _short_state(state: str | None) -> str:
    return state.removeprefix("JOB_STATE_") if state else "-"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    shown = [[terminal_text(cell) for cell in row] for row in rows]  # a record quotes its writers
    widths = [max(len(row[i]) for row in (header, *shown)) for i in range(len(header))]
    return "".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() + "\n"
        for row in (header, *shown)
    )
