"""How the demo shows itself: a live table while it runs, and the final report as text.

On a terminal the table is redrawn in place with ANSI cursor movement (no curses). When the
stream is not a terminal (CI logs, a pipe) each change of a request's state is one plain line, so
the log reads as a history instead of a wall of redraws.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from devstack.demo.traces import RequestTrace

COLUMNS = ("REQUEST", "STATUS", "ATTEMPT", "JOB STATE", "PREEMPTIONS", "STEPS", "CHECKPOINTS")
_CURSOR_UP = "\x1b[{n}F"  # to the start of the line n lines up
_CLEAR_LINE = "\x1b[2K"


def live_rows(traces: Sequence[RequestTrace]) -> list[dict[str, str]]:
    """One row per request: what a person watching wants to see at a glance."""
    rows = []
    for trace in traces:
        latest = trace.attempts[-1] if trace.attempts else None
        steps = max((run.end_step or 0 for run in trace.runs), default=0)
        rows.append(
            {
                "REQUEST": trace.scenario.key,
                "STATUS": (trace.status or ("REJECTED" if trace.outcome == "rejected" else "published")),
                "ATTEMPT": f"{latest.n} {latest.strategy}" if latest else "-",
                "JOB STATE": (latest.state or "-").removeprefix("JOB_STATE_") if latest else "-",
                "PREEMPTIONS": "+".join(a.preemptions_text for a in trace.attempts) or "-",
                "STEPS": str(steps) if trace.attempts else "-",
                "CHECKPOINTS": str(len(trace.checkpoints_present)) if trace.attempts else "-",
            }
        )
    return rows


def format_table(columns: Sequence[str], rows: Sequence[Mapping[str, str]]) -> list[str]:
    widths = [max([len(c)] + [len(str(row.get(c, ""))) for row in rows]) for c in columns]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths)).rstrip()]
    for row in rows:
        lines.append("  ".join(str(row.get(c, "")).ljust(w) for c, w in zip(columns, widths)).rstrip())
    return lines


class LiveView:
    """The live table on `stream`: redrawn in place on a terminal, change lines otherwise."""

    def __init__(self, stream: IO[str], *, total_steps: int, interactive: bool | None = None) -> None:
        self._stream = stream
        self._total_steps = total_steps
        self._interactive = stream.isatty() if interactive is None else interactive
        self._drawn = 0  # lines of the table currently on screen
        self._last: dict[str, tuple[str, ...]] = {}

    def __enter__(self) -> LiveView:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stream.flush()

    def update(self, rows: Sequence[Mapping[str, str]]) -> None:
        rows = [{**row, "STEPS": self._steps(row["STEPS"])} for row in rows]
        if self._interactive:
            self._redraw(format_table(COLUMNS, rows))
        else:
            self._print_changes(rows)

    def note(self, message: str) -> None:
        self._stream.write(f"[demo] {message}\n")
        self._drawn = 0  # the table is drawn again below the note
        self._stream.flush()

    def _steps(self, done: str) -> str:
        return f"{done}/{self._total_steps}" if done != "-" else done

    def _redraw(self, lines: list[str]) -> None:
        out = [_CURSOR_UP.format(n=self._drawn)] if self._drawn else []
        out += [f"{_CLEAR_LINE}{line}\n" for line in lines]
        self._stream.write("".join(out))
        self._stream.flush()
        self._drawn = len(lines)

    def _print_changes(self, rows: Sequence[Mapping[str, str]]) -> None:
        for row in rows:
            # Steps and checkpoints move all the time; a line is printed when anything else changes.
            key = tuple(row[c] for c in COLUMNS if c not in ("STEPS", "CHECKPOINTS"))
            if self._last.get(row["REQUEST"]) != key:
                self._last[row["REQUEST"]] = key
                self._stream.write("[demo] " + "  ".join(f"{c.lower()}={row[c]}" for c in COLUMNS) + "\n")
        self._stream.flush()


# The final report as text.


def render_report(report: Mapping[str, Any]) -> str:
    totals, pricing = report["totals"], report["pricing"]
    requests = report["requests"]
    ok = sum(1 for r in requests if r["ok"])
    verdict = (
        f"all {len(requests)} scenarios ended as designed"
        if report["scenario_ok"]
        else f"{ok} of {len(requests)} scenarios ended as designed"
    )
    lines = [f"spotjobs demo (seed {report['seed']}): {verdict}, in {report['wall_seconds']:.0f} s", ""]
    lines += format_table(
        ("REQUEST", "OUTCOME", "ATTEMPTS", "PREEMPTIONS", "STEPS LOST", "CHECKPOINTS KEPT/PRUNED", "FREED", "OK"),
        [_summary_row(r) for r in requests],
    )
    lines += ["", "Attempts (start step = where the attempt's first run resumed):"]
    for request in requests:
        lines += _attempt_lines(request)
    triggered = [r for r in requests if r.get("trigger")]
    if triggered:
        lines += ["", "Retraining triggers (new data -> one request per window):"]
        for request in triggered:
            t = request["trigger"]
            lines.append(
                f"  trigger {t['name']}: window {t['window_start']} .. {t['window_end']} ({t['window_id']}), "
                f"manifest {t['manifest_objects']} objects, {human_bytes(t['manifest_bytes'])} -> {request['request_id']}"
            )
    lines += ["", *_totals_lines(totals, pricing)]
    advice = [item for item in report.get("checkpoint_advice", []) if item.get("mtbf_seconds")]
    if advice:
        lines += ["", "Checkpoint interval (where preemptions were seen):"]
        lines += [f"  {item['request_id']}: {item['sentence']}" for item in advice]
    differences = [(r["request_id"], d) for r in requests for d in r["differences"]]
    if differences or report.get("notes"):
        lines += ["", "What differed from the design:"]
        lines += [f"  {request_id}: {difference}" for request_id, difference in differences]
        lines += [f"  {note}" for note in report.get("notes", [])]
    return "\n".join(lines)


def _summary_row(request: Mapping[str, Any]) -> dict[str, str]:
    return {
        "REQUEST": request["request_id"],
        "OUTCOME": request["outcome"],
        "ATTEMPTS": str(len(request["attempts"])),
        "PREEMPTIONS": "+".join(a["preemptions_text"] for a in request["attempts"]) or "-",
        "STEPS LOST": str(request["steps_lost"]),
        "CHECKPOINTS KEPT/PRUNED": f"{request['checkpoints_kept']}/{request['checkpoints_pruned']}",
        "FREED": human_bytes(request["bytes_freed"]),
        "OK": "yes" if request["ok"] else "NO",
    }


def _attempt_lines(request: Mapping[str, Any]) -> list[str]:
    if not request["attempts"]:
        kinds = ", ".join(f"{k} x{n}" for k, n in request["alerts"].items()) or "none"
        return [f"  {request['request_id']}: no job ({request['outcome']}); alerts: {kinds}"]
    lines = []
    for attempt in request["attempts"]:
        lines.append(
            f"  {request['request_id']} #{attempt['n']}: {attempt['strategy']} in {attempt['location']}, "
            f"{(attempt['state'] or '?').removeprefix('JOB_STATE_')}, "
            f"{attempt['preemptions_text']} preemption(s), {len(attempt['runs'])} run(s), "
            f"start step {attempt['start_step']} -> {attempt['outcome'] or 'running'}"
        )
        lines += [f"    {replica_text(row)}" for row in attempt.get("replicas", [])]
    return lines


def replica_text(row: Mapping[str, Any]) -> str:
    """One replica of a multi-replica attempt: `workerpool0-0 (role): 0 reclaimed, 2 run(s) from step 0, 52`."""
    role = f" ({row['role']})" if row.get("role") else ""
    starts = row.get("run_start_steps") or []
    resumed = f" from step {', '.join(str(step) for step in starts)}" if starts else ""
    return f"{row['replica']}{role}: {row['preemptions']} reclaimed, {row['runs']} run(s){resumed}"


def _totals_lines(totals: Mapping[str, Any], pricing: Mapping[str, Any]) -> list[str]:
    kinds = ", ".join(f"{k} {n}" for k, n in totals["alerts_by_kind"].items()) or "none"
    return [
        f"Totals: {totals['jobs']} Vertex jobs, {totals['preemptions']} preemptions counted, "
        f"{totals['requeues']} re-queue(s), {totals['duplicates_suppressed']} duplicate(s) suppressed, "
        f"{totals['invalid_rejected']} invalid request(s) rejected, {totals['alerts']} alerts ({kinds})",
        f"Goodput: {totals['steps_useful']} useful / {totals['steps_computed']} computed training steps "
        f"= {totals['goodput']:.3f} ({totals['steps_lost']} lost to preemption)",
        f"Checkpoints: {totals['checkpoints_pruned']} pruned, {human_bytes(totals['bytes_freed'])} freed",
        f"Estimated cost: ${totals['cost_spot_usd']:.2f} as run on Spot vs ${totals['cost_on_demand_usd']:.2f} "
        f"on demand ({totals['savings_pct']:.0f}% less).",
        f"  Scale: {pricing['scale']}.",
        f"  Prices: {pricing['machine_type']} in {pricing['location']}, ${pricing['spot_per_hour']:.2f}/h Spot, "
        f"${pricing['on_demand_per_hour']:.2f}/h on demand, list prices as of {pricing['as_of']}; prices change.",
        f"  Source: {pricing['source']}. {pricing['caveat']}",
    ]


def human_bytes(count: int) -> str:
    size = float(count)
    for unit in ("B", "KiB", "MiB"):
        if size < 1024:
            return f"{count} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"
