"""The demo's HTML page: spotjobs/reporting/html.py fed with the ledger records the demo read at the end
and what the traces add (each run of each job, every checkpoint committed and whether pruning
deleted it, and for a job of several replicas each replica's reclaims and runs, as notes)."""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from devstack.demo.cost import SECONDS_PER_STEP_PRICED
from devstack.demo.report import replica_rows
from devstack.demo.traces import RequestTrace
from devstack.demo.view import replica_text
from spotjobs.reporting.html import render_report


def default_path(seed: int) -> Path:
    return Path(tempfile.gettempdir()) / f"spotjobs-demo-seed{seed}.html"


def page(traces: Sequence[RequestTrace], records: Sequence[Mapping[str, Any]], *, seed: int) -> str:
    by_id = {str(record.get("request_id")): record for record in records}
    ordered: list[Mapping[str, Any]] = []
    runs: dict[str, list[dict[str, Any]]] = {}
    checkpoints: dict[str, list[dict[str, Any]]] = {}
    replica_notes: list[str] = []
    for trace in traces:
        request_id = trace.scenario.request_id
        # A rejected request never gets a ledger record; it still has its place on the page.
        ordered.append(
            by_id.get(request_id)
            or {"request_id": request_id, "status": trace.outcome.upper(), "attempts": [], "request": {}}
        )
        for attempt in trace.attempts:
            # The page's timeline draws the primary's runs; the other replicas are told in words.
            if rows := replica_rows(attempt, trace.scenario.replica_roles):
                replica_notes.append(
                    f"{request_id} #{attempt.n} replicas: " + "; ".join(replica_text(row) for row in rows)
                )
            if attempt.job:
                runs[attempt.job] = [
                    {
                        "run": run.run,
                        "start_step": run.start_step,
                        "end_step": run.end_step,
                        "finished": run.finished,
                        "failed": run.failed,
                        "checkpoints": [
                            {"checkpoint": name, "step": step} for name, (step, _) in run.checkpoints.items()
                        ],
                    }
                    for run in attempt.runs
                ]
        present = set(trace.checkpoints_present)
        checkpoints[request_id] = [
            {"checkpoint": name, "step": step, "state": "kept" if name in present else "pruned"}
            for name, (step, _) in sorted(trace.checkpoints_written.items(), key=lambda item: item[1][0])
        ]
    return render_report(
        ordered,
        runs=runs,
        checkpoints=checkpoints,
        seconds_per_step=SECONDS_PER_STEP_PRICED,
        title=f"spotjobs demo (seed {seed})",
        subtitle="the demo's scenarios played through the real functions on the embedded stack",
        notes=[
            f"Each demo training step is priced as {SECONDS_PER_STEP_PRICED:.0f} s of machine time, on every replica.",
            *replica_notes,
        ],
    )


def write(path: Path, traces: Sequence[RequestTrace], records: Sequence[Mapping[str, Any]], *, seed: int) -> Path:
    path.write_text(page(traces, records, seed=seed), encoding="utf-8")
    return path.resolve()
