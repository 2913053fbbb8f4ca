"""`spotjobs demo` (registered by spotjobs/cli/local.py): the run from starting the stack to printing
the report."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

from devstack.demo import html
from devstack.demo.cost import Prices
from devstack.demo.report import build_report
from devstack.demo.runner import demo_stack_options, play
from devstack.demo.scenarios import build_scenarios
from devstack.demo.view import render_report


def run_demo(args: argparse.Namespace) -> int:
    from devstack.stack import Stack

    started = time.monotonic()
    scenarios = build_scenarios(args.seed)
    prices = Prices.load()
    stack = Stack(demo_stack_options(args.seed))
    _stop_on_sigterm()
    try:
        say("starting the embedded stack (Pub/Sub and GCS emulators, Vertex AI emulator, 4 functions)")
        stack.start()
        say(f"stack ready in {time.monotonic() - started:.1f} s; publishing {len(scenarios)} job requests")
        played = play(stack, scenarios, args.timeout)
        advice = checkpoint_advice(stack, [item.request_id for item in scenarios])
    except KeyboardInterrupt:
        say("interrupted")
        return 130
    finally:
        say("stopping the embedded stack")
        stack.stop()
    report = build_report(
        played.traces,
        seed=args.seed,
        keep_last=stack.settings.keep_last,
        prices=prices,
        alerts=played.alerts,
        wall_seconds=time.monotonic() - started,
    )
    report["notes"] = played.notes
    report["checkpoint_advice"] = advice
    report["scenario_ok"] = report["scenario_ok"] and not played.notes
    target = Path(args.html) if getattr(args, "html", None) else html.default_path(args.seed)
    report["html"] = str(html.write(target, played.traces, played.records, seed=args.seed))
    say(f"HTML report: {report['html']}")
    print(json.dumps(report, indent=2) if args.json else render_report(report), flush=True)
    if not args.json:
        print(f"HTML report: {report['html']}", flush=True)
    return 0 if report["scenario_ok"] else 1


def checkpoint_advice(stack: Any, request_ids: list[str]) -> list[dict[str, Any]]:
    """Per request that ran, the checkpoint interval that loses least to preemptions (spotjobs.reporting.advice),
    from the preemptions and checkpoint times the ledger saw in this run."""
    from shared.clock import utcnow
    from spotjobs.reporting.advice import advise, preemption_rates

    ledger = stack.ledger()
    records = [record for request_id in request_ids if (record := ledger.get(request_id))]
    rates = preemption_rates(records, utcnow())
    advice = [(record.request_id, advise(record, rates)) for record in records]
    return [{"request_id": rid, **item.to_json(), "sentence": item.sentence()} for rid, item in advice if item]


def say(message: str) -> None:
    print(f"[demo] {message}", file=sys.stderr, flush=True)


def _stop_on_sigterm() -> None:
    # SIGTERM unwinds like Ctrl-C, so the `finally` above stops every process the stack started.
    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
