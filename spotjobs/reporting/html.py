"""One self-contained HTML page about requests: a timeline per request and totals.

The data it shows (views of ledger records, trainer runs and checkpoints, and the totals) is
spotjobs/reporting/views.py's. No dependencies, no network: CSS and SVG are inline and there is no
script, so the page renders the same offline, from a file.

Per request, the timeline draws:
- on a time axis, each attempt (claimed to ended; Spot or on-demand) and its outcome;
- on a step axis, each run of the attempt's job between restarts, a preemption where a run was
  cut short, every checkpoint committed and whether pruning has since deleted it;
- preemptions the ledger counted but no run data places are drawn on the attempt's bar (their
  times are not recorded);
- for a request with a deadline, below: its committed progress (each attempt's last checkpoint)
  against Uniform Progress's line to the deadline, the deadline, and each switch between Spot and
  on-demand (docs/deadlines.md).
Every mark carries `data-mark` (attempt, run, preemption, checkpoint, pruning, outcome, deadline,
deadline-line, deadline-progress, deadline-switch) so tests and scripts can read the page.

Totals (spotjobs/reporting/views.py: `totals`) are tiles and tables above the requests.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from shared.clock import parse_iso, utcnow
from spotjobs.reporting.bill import TEAM_LABEL, bill, render_bill
from spotjobs.reporting.prices import table_info
from spotjobs.reporting.views import RequestView, build_views, human_duration, human_fields, human_time, totals

SVG_WIDTH = 960
LABEL_WIDTH = 150
LANE_HEIGHT = 26

CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#1f2328;background:#fff}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 4px}
.sub{color:#59636e}.facts{color:#59636e;margin:2px 0 8px}
table{border-collapse:collapse;margin:8px 0}td,th{border-bottom:1px solid #d1d9e0;padding:3px 10px 3px 0;text-align:left;vertical-align:top}
th{font-weight:600}.num{text-align:right}
.status{font-size:12px;padding:1px 7px;border-radius:9px;background:#eef1f4;margin-left:6px}
.s-succeeded{background:#dafbe1}.s-failed,.s-gave_up{background:#ffebe9}.s-requeued,.s-running,.s-submitted,.s-claimed{background:#fff8c5}
.tiles{display:flex;flex-wrap:wrap;gap:12px;margin:12px 0}.tile{border:1px solid #d1d9e0;border-radius:6px;padding:8px 12px;min-width:130px}
.tile b{display:block;font-size:20px}
svg{display:block;margin:6px 0;max-width:100%}svg text{font:11px system-ui,sans-serif;fill:#1f2328}
.legend span{display:inline-block;margin-right:14px}.sw{display:inline-block;width:11px;height:11px;margin-right:4px;vertical-align:-1px}
.note{color:#59636e;font-size:12px}
"""
COLORS = {
    "SPOT": "#54aeff",
    "STANDARD": "#8250df",
    "FLEX_START": "#bf8700",
    "run": "#4ac26b",
    "run-failed": "#ff8182",
    "preemption": "#cf222e",
    "checkpoint": "#1f2328",
    "pruned": "#afb8c1",
    "succeeded": "#1a7f37",
    "failed": "#cf222e",
    "requeued": "#bf8700",
    "gave_up": "#cf222e",
    "cancelled": "#59636e",
}


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def render_report(
    records: Iterable[Mapping[str, Any]],
    *,
    runs: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
    checkpoints: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
    title: str = "spotjobs report",
    subtitle: str = "",
    seconds_per_step: float | None = None,
    notes: Sequence[str] = (),
    now: datetime | None = None,
    team_label: str = TEAM_LABEL,
) -> str:
    """The whole page, as text; the bill totals per value of the job label `team_label`."""
    now = now or utcnow()
    records = list(records)
    views = build_views(records, runs=runs, checkpoints=checkpoints)
    summary = totals(views, seconds_per_step=seconds_per_step, now=now)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{_e(title)}</h1>",
        f'<p class="sub">{_e(subtitle) + " · " if subtitle else ""}generated {_e(now.isoformat(timespec="seconds"))}'
        f" · {len(views)} request(s)</p>",
        _render_totals(summary),
        render_bill(bill(records, now, team_label)),
        _legend(),
    ]
    parts += [_render_request(view, now) for view in views]
    if not views:
        parts.append('<p data-mark="empty">No requests.</p>')
    for note in notes:
        parts.append(f'<p class="note">{_e(note)}</p>')
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _tile(key: str, label: str, value: Any) -> str:
    return f'<div class="tile" data-total="{_e(key)}"><b>{_e(value)}</b>{_e(label)}</div>'


def _render_totals(summary: Mapping[str, Any]) -> str:
    goodput = summary["goodput"]
    tiles = [
        _tile("requests", "requests", summary["requests"]),
        _tile("attempts", "attempts", summary["attempts"]),
        _tile("preemptions", "preemptions", summary["preemptions"]),
        _tile("requeues", "re-queues", summary["requeues"]),
        _tile("goodput", "goodput (useful / computed steps)", f"{goodput:.3f}" if goodput is not None else "n/a"),
        _tile("cost_spot_usd", "estimated cost as run (Spot)", f"${summary['cost_spot_usd']:,.2f}"),
        _tile("cost_on_demand_usd", "the same work on demand", f"${summary['cost_on_demand_usd']:,.2f}"),
    ]
    outcome_rows = "".join(f'<tr><td>{_e(k)}</td><td class="num">{v}</td></tr>' for k, v in summary["outcomes"].items())
    machine_rows = "".join(
        f'<tr data-mark="machine-preemptions"><td>{_e(r["machine_type"])}</td><td>{_e(r["location"])}</td>'
        f'<td class="num">{r["preemptions"]}</td></tr>'
        for r in summary["preemptions_by_machine"]
    )
    info = table_info()
    steps = ""
    if summary["steps_computed"] is not None:
        steps = (
            f"<p>Training steps: {summary['steps_useful']} useful of {summary['steps_computed']} computed, "
            f"{summary['steps_lost']} lost to preemption.</p>"
        )
    savings = f" ({summary['savings_pct']}% less on Spot)" if summary["savings_pct"] is not None else ""
    unpriced = f" Not priced (not in the table): {_e(', '.join(summary['unpriced']))}." if summary["unpriced"] else ""
    return (
        '<section id="totals"><h2>Totals</h2><div class="tiles">'
        + "".join(tiles)
        + "</div>"
        + steps
        + f"<p>Estimated cost{savings}: {_e(summary['cost_basis'])}; Spot attempts at the Spot price, "
        f"others at the on-demand price. Prices as of {_e(info['as_of'])} ({_e(info['name'])}).{unpriced}</p>"
        + f'<p class="note">{_e(info.get("caveat", ""))}</p>'
        + '<div style="display:flex;gap:40px;flex-wrap:wrap">'
        + f"<table><tr><th>outcome</th><th>requests</th></tr>{outcome_rows}</table>"
        + f"<table><tr><th>machine type</th><th>location</th><th>preemptions</th></tr>{machine_rows}</table>"
        + "</div></section>"
    )


def _legend() -> str:
    items = [
        ("SPOT", "Spot attempt"),
        ("STANDARD", "on-demand attempt"),
        ("run", "run between restarts"),
        ("preemption", "preemption"),
        ("checkpoint", "checkpoint committed"),
        ("pruned", "checkpoint pruned"),
    ]
    return (
        '<p class="legend">'
        + "".join(
            f'<span><i class="sw" style="background:{COLORS[key]}"></i>{_e(label)}</span>' for key, label in items
        )
        + "</p>"
    )


def _render_request(view: RequestView, now: datetime) -> str:
    machine_type, replicas = view.machine
    status = view.status.lower()
    raw = view.raw
    locations = (raw.get("request") or {}).get("locations") or [(raw.get("request") or {}).get("location")]
    facts = (
        f"{machine_type} × {replicas} · {', '.join(str(x) for x in locations if x) or '-'} · "
        f"created {raw.get('created_at', '-')} · finished {raw.get('finished_at') or '-'}"
    )
    head = (
        f'<section class="request" data-request-id="{_e(view.request_id)}" data-status="{_e(status)}">'
        f'<h2>{_e(view.request_id)}<span class="status s-{_e(status)}">{_e(status)}</span></h2>'
        f'<p class="facts">{_e(facts)}</p>'
    )
    return head + _timeline(view, now) + _deadline_chart(view, now) + _attempt_table(view) + "</section>"


DEADLINE_HEIGHT = 90


def _deadline_chart(view: RequestView, now: datetime) -> str:
    """A request with a deadline: its committed progress (each attempt's last checkpoint) against
    Uniform Progress's line to the deadline (docs/deadlines.md), the deadline, and each switch."""
    request = view.raw.get("request") or {}
    total = request.get("total_steps") or max((int(a.get("total_steps") or 0) for a in view.attempts), default=0)
    if not request.get("deadline") or not total:
        return ""
    t0, deadline = parse_iso(view.raw["created_at"]), parse_iso(request["deadline"])
    points = [(t0, 0.0)]
    for attempt in view.attempts:
        last, at = attempt.get("last_checkpoint"), attempt.get("last_checkpoint_at")
        if last and at:
            points.append((parse_iso(at), min(1.0, last[1] / total)))
    points.sort()
    t1 = max([deadline, now if not view.raw.get("finished_at") else parse_iso(view.raw["finished_at"])])
    span = max((t1 - t0).total_seconds(), 1.0)
    inner, top, bottom = SVG_WIDTH - LABEL_WIDTH - 20, 14, DEADLINE_HEIGHT - 18

    def x(moment: datetime) -> float:
        return LABEL_WIDTH + inner * max(0.0, (moment - t0).total_seconds()) / span

    def y(share: float) -> float:
        return bottom - (bottom - top) * share

    progress = " ".join(f"{x(moment):.1f},{y(share):.1f}" for moment, share in points)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{SVG_WIDTH}" height="{DEADLINE_HEIGHT}" '
        f'viewBox="0 0 {SVG_WIDTH} {DEADLINE_HEIGHT}" role="img" aria-label="progress of {_e(view.request_id)} '
        f'against its deadline">',
        f'<text x="4" y="{top + 12}">progress (deadline)</text>',
        f'<line data-mark="deadline-line" x1="{x(t0):.1f}" y1="{y(0):.1f}" x2="{x(deadline):.1f}" y2="{y(1):.1f}" '
        f'stroke="#59636e" stroke-dasharray="4 3"><title>uniform progress to the deadline</title></line>',
        f'<line data-mark="deadline" x1="{x(deadline):.1f}" x2="{x(deadline):.1f}" y1="{top}" y2="{bottom}" '
        f'stroke="#cf222e" stroke-width="2"><title>deadline {_e(request["deadline"])}</title></line>',
        f'<polyline data-mark="deadline-progress" points="{progress}" fill="none" stroke="#1a7f37" '
        f'stroke-width="2"><title>committed steps of {total}</title></polyline>',
    ]
    for attempt in view.attempts:
        outcome = str(attempt.get("outcome") or "")
        if outcome.startswith("switched_to_") and attempt.get("cancel_decided_at"):
            sx = x(parse_iso(attempt.get("cancel_decided_at")))
            out.append(
                f'<line data-mark="deadline-switch" data-attempt="{attempt.n}" data-outcome="{_e(outcome)}" '
                f'x1="{sx:.1f}" x2="{sx:.1f}" y1="{top}" y2="{bottom}" stroke="{COLORS["STANDARD"]}" '
                f'stroke-width="2"><title>attempt {attempt.n}: {_e(outcome.replace("_", " "))}</title></line>'
            )
    out.append(f'<text x="{LABEL_WIDTH}" y="{DEADLINE_HEIGHT - 4}">{_e(t0.isoformat(timespec="seconds"))}</text>')
    out.append(
        f'<text x="{SVG_WIDTH - 20}" y="{DEADLINE_HEIGHT - 4}" text-anchor="end">deadline '
        f"{_e(request['deadline'])}</text></svg>"
    )
    return "".join(out)


def _timeline(view: RequestView, now: datetime) -> str:
    """The SVG: a time lane of attempts, then a step lane per attempt that has runs or checkpoints."""
    starts = [a.start for a in view.attempts if a.start]
    if not view.attempts:
        return f'<p class="note" data-mark="outcome" data-outcome="{_e(view.status.lower())}">No attempt was made.</p>'
    t0 = min(starts) if starts else now
    t1 = max([a.end or now for a in view.attempts] + [t0])
    span = max((t1 - t0).total_seconds(), 1.0)
    inner = SVG_WIDTH - LABEL_WIDTH - 20

    def tx(moment: datetime | None) -> float:
        moment = moment or t1
        return LABEL_WIDTH + inner * max(0.0, (moment - t0).total_seconds()) / span

    step_rows = [a for a in view.attempts if a.runs] or []
    has_steps = bool(step_rows) or bool(view.checkpoints)
    max_step = max([run.end_step or 0 for run in view.runs] + [int(c.get("step") or 0) for c in view.checkpoints] + [1])

    def sx(step: int | None) -> float:
        return LABEL_WIDTH + inner * max(0, step or 0) / max_step

    lanes = 1 + (len(step_rows) if step_rows else (1 if view.checkpoints else 0))
    height = 24 + lanes * LANE_HEIGHT + (18 if has_steps else 0) + 8
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{SVG_WIDTH}" height="{height}" '
        f'viewBox="0 0 {SVG_WIDTH} {height}" role="img" aria-label="timeline of {_e(view.request_id)}">'
    ]
    out.append(f'<text x="{LABEL_WIDTH}" y="12">{_e(t0.isoformat(timespec="seconds"))}</text>')
    out.append(
        f'<text x="{SVG_WIDTH - 20}" y="12" text-anchor="end">{_e(t1.isoformat(timespec="seconds"))} '
        f"({span:,.0f} s)</text>"
    )
    y = 20
    out.append(f'<text x="4" y="{y + 15}">attempts (time)</text>')
    for attempt in view.attempts:
        x0, x1 = tx(attempt.start), tx(attempt.end or now)
        color = COLORS.get(attempt.strategy, COLORS["STANDARD"])
        outcome = str(attempt.get("outcome") or "running")
        tip = (
            f"attempt {attempt.n}: {attempt.strategy} in {attempt.get('location')}, "
            f"{attempt.preemptions} preemption(s), {outcome}"
        )
        out.append(
            f'<rect data-mark="attempt" data-attempt="{attempt.n}" data-strategy="{_e(attempt.strategy)}" '
            f'data-outcome="{_e(outcome)}" x="{x0:.1f}" y="{y + 3}" width="{max(x1 - x0, 3):.1f}" height="18" '
            f'rx="3" fill="{color}"><title>{_e(tip)}</title></rect>'
        )
        out.append(f'<text x="{x0 + 4:.1f}" y="{y + 16}">#{attempt.n} {_e(attempt.strategy)}</text>')
        if not attempt.runs and attempt.preemptions:  # times unknown: spread over the bar
            for i in range(attempt.preemptions):
                px = x0 + (x1 - x0) * (i + 1) / (attempt.preemptions + 1)
                out.append(
                    f'<line data-mark="preemption" data-attempt="{attempt.n}" x1="{px:.1f}" x2="{px:.1f}" '
                    f'y1="{y + 1}" y2="{y + 23}" stroke="{COLORS["preemption"]}" stroke-width="2">'
                    f"<title>preemption {i + 1} of attempt {attempt.n} (time not recorded)</title></line>"
                )
        if attempt.get("outcome"):
            out.append(_outcome_mark(x1, y + 12, str(attempt.get("outcome")), attempt.n))
    y += LANE_HEIGHT
    if step_rows:
        for attempt in step_rows:
            out.append(f'<text x="4" y="{y + 15}">attempt {attempt.n} (steps)</text>')
            for index, run in enumerate(attempt.runs):
                x0, x1 = sx(run.start_step), sx(run.end_step)
                color = COLORS["run-failed"] if run.failed else COLORS["run"]
                out.append(
                    f'<rect data-mark="run" data-attempt="{attempt.n}" data-run="{run.run}" x="{x0:.1f}" '
                    f'y="{y + 5}" width="{max(x1 - x0, 2):.1f}" height="14" fill="{color}" opacity="0.8">'
                    f"<title>run {run.run}: steps {run.start_step}–{run.end_step}</title></rect>"
                )
                if index < attempt.preemptions:
                    out.append(
                        f'<line data-mark="preemption" data-attempt="{attempt.n}" x1="{x1:.1f}" x2="{x1:.1f}" '
                        f'y1="{y + 1}" y2="{y + 23}" stroke="{COLORS["preemption"]}" stroke-width="2">'
                        f"<title>preempted at step {run.end_step}</title></line>"
                    )
                for name, step in run.checkpoints:
                    out.append(_checkpoint_mark(sx(step), y, name, step, _checkpoint_state(view, name), attempt.n))
            y += LANE_HEIGHT
    elif view.checkpoints:
        out.append(f'<text x="4" y="{y + 15}">checkpoints (steps)</text>')
        for checkpoint in view.checkpoints:
            name, step = str(checkpoint.get("checkpoint")), int(checkpoint.get("step") or 0)
            out.append(_checkpoint_mark(sx(step), y, name, step, str(checkpoint.get("state") or "kept"), None))
        y += LANE_HEIGHT
    pruned = [c for c in view.checkpoints if c.get("state") == "pruned"]
    if has_steps:
        out.append(f'<text x="{LABEL_WIDTH}" y="{y + 12}">step 0</text>')
        out.append(f'<text x="{SVG_WIDTH - 20}" y="{y + 12}" text-anchor="end">step {max_step}</text>')
    out.append("</svg>")
    if pruned:
        out.append(
            f'<p class="note" data-mark="pruning" data-pruned="{len(pruned)}">Pruning deleted '
            f"{len(pruned)} checkpoint(s); {len(view.checkpoints) - len(pruned)} kept.</p>"
        )
    return "".join(out)


def _checkpoint_state(view: RequestView, name: str) -> str:
    for checkpoint in view.checkpoints:
        if str(checkpoint.get("checkpoint")) == name:
            return str(checkpoint.get("state") or "kept")
    return "committed"


def _checkpoint_mark(x: float, y: float, name: str, step: int, state: str, attempt: int | None) -> str:
    color = COLORS["pruned"] if state == "pruned" else COLORS["checkpoint"]
    attempt_attr = f' data-attempt="{attempt}"' if attempt is not None else ""
    return (
        f'<path data-mark="checkpoint" data-state="{_e(state)}"{attempt_attr} '
        f'd="M{x:.1f} {y + 20} l-4 5 h8 z" fill="{color}"><title>checkpoint {_e(name)} at step {step} '
        f"({_e(state)})</title></path>"
    )


def _outcome_mark(x: float, y: float, outcome: str, attempt: int) -> str:
    color = COLORS.get(outcome, "#59636e")
    return (
        f'<circle data-mark="outcome" data-attempt="{attempt}" data-outcome="{_e(outcome)}" cx="{x:.1f}" '
        f'cy="{y}" r="5" fill="{color}" stroke="#fff"><title>attempt {attempt}: {_e(outcome)}</title></circle>'
    )


def _attempt_table(view: RequestView) -> str:
    rows = []
    for attempt in view.attempts:
        error = attempt.get("error") or {}
        duration = attempt.duration_seconds
        cells = [
            attempt.n,
            attempt.get("location", "-"),
            attempt.strategy,
            str(attempt.get("state") or "-").removeprefix("JOB_STATE_"),
            attempt.preemptions,
            len(attempt.runs) if attempt.runs else "-",
            human_time(attempt.get("claimed_at") or "-"),
            human_time(attempt.get("ended_at") or "-"),
            human_duration(duration) if duration is not None else "-",
            attempt.get("outcome") or "-",
            (error.get("message") if isinstance(error, Mapping) else error) or "-",
            human_fields(attempt.extra) or "-",
        ]
        rows.append("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in cells) + "</tr>")
    if not rows:
        return ""
    head = (
        "N",
        "location",
        "strategy",
        "state",
        "preemptions",
        "runs",
        "claimed",
        "ended",
        "took",
        "outcome",
        "error",
        "details",
    )
    return "<table><tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr>" + "".join(rows) + "</table>"
