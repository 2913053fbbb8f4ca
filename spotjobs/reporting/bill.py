"""The bill in `spotjobs report`: per request and per team label, what it spent (Vertex's own
start and end of each attempt's job x every replica's price on the machine it ran on, a capacity
alternative's included: shared/fleet/spend.py, as `spotjobs status` bills it), the same run
time on demand, and the saving. A request whose machine type or region the price table lacks is
"unknown", counted apart and never as zero; Vertex's training fee is not in any figure (the table
marks it unknown). A request's strays (jobs with its labels the ledger did not record, cancelled by
the sweep) are on its bill as far as a read saw them run: such a row is a floor (`floor_of` names
them)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from html import escape
from typing import Any

from shared.fleet.spend import attempts_spend, max_cost
from shared.ledger.records import Attempt, Stray

TEAM_LABEL = "team"
NO_TEAM = "(no team label)"


def bill(records: Iterable[Mapping[str, Any]], now: datetime, team_label: str = TEAM_LABEL) -> dict[str, Any]:
    """Rows per request (newest first, as given) and totals per value of the job's `team_label`."""
    rows: list[dict[str, Any]] = []
    teams: dict[str, dict[str, Any]] = {}
    for data in records:
        request = data.get("request") or {}
        spend = attempts_spend(
            request,
            [_attempt(a) for a in data.get("attempts") or [] if isinstance(a, Mapping)],
            now,
            strays=[_stray(s) for s in data.get("strays") or [] if isinstance(s, Mapping)],
        )
        labels = (request.get("custom_job") or {}).get("labels") or {}
        team = str(labels.get(team_label, NO_TEAM)) if isinstance(labels, Mapping) else NO_TEAM
        rows.append(
            {
                "request_id": str(data.get("request_id")),
                "team": team,
                "max_cost_usd": max_cost(request),
                **spend.to_json(),
            }
        )
        total = teams.setdefault(
            team, {"team": team, "requests": 0, "spent_usd": 0.0, "on_demand_usd": 0.0, "unknown": 0}
        )
        total["requests"] += 1
        if spend.usd is None or spend.on_demand_usd is None:
            total["unknown"] += 1  # not added as zero: said apart
            continue
        total["spent_usd"] += spend.usd
        total["on_demand_usd"] += spend.on_demand_usd
    for total in teams.values():
        total["saving_usd"] = round(total["on_demand_usd"] - total["spent_usd"], 2)
        total["spent_usd"], total["on_demand_usd"] = round(total["spent_usd"], 2), round(total["on_demand_usd"], 2)
    return {"team_label": team_label, "requests": rows, "teams": sorted(teams.values(), key=lambda t: t["team"])}


def _attempt(data: Mapping[str, Any]) -> Attempt:
    """What the spend reads of an attempt as the ledger shows it (any record a report is given,
    older layouts and the demo's included)."""
    # The times, its waits after a run, and the capacity alternative it ran on (None: the request's own machine).
    read = {
        key: str(data[key]) if data.get(key) else None
        for key in (
            "started_at",
            "ended_at",
            "state",
            "state_changed_at",
            "rewait_since",
            "rewait_seen_until",
            "machine",
        )
    }
    rewaited = data.get("rewaited_seconds")
    return Attempt(
        int(data.get("n") or 0),
        str(data.get("location") or "?"),
        str(data.get("strategy") or "SPOT"),
        claimed_at=str(data.get("claimed_at") or ""),
        rewaited_seconds=float(rewaited)
        if isinstance(rewaited, (int, float)) and not isinstance(rewaited, bool)
        else 0.0,
        **read,
    )


def _stray(data: Mapping[str, Any]) -> Stray:
    """What the spend reads of a stray as the ledger shows it (a record before 2026-12-07 has none)."""
    n = data.get("attempt")
    pools = data.get("pools")
    return Stray(
        job=str(data.get("job") or "?"),
        attempt=n if isinstance(n, int) and not isinstance(n, bool) else None,
        location=str(data.get("location") or "?"),
        strategy=str(data.get("strategy") or ""),
        pools=[p for p in pools if isinstance(p, Mapping)] if isinstance(pools, list) else [],
        seen_until=str(data.get("seen_until") or ""),
        started_at=str(data["started_at"]) if data.get("started_at") and data.get("seen_until") else None,
    )


def render_bill(summary: Mapping[str, Any]) -> str:
    """The bill as an HTML section: the teams' totals, then each request."""

    def usd(value: float | None) -> str:
        return "unknown" if value is None else f"${value:,.2f}"

    team_rows = "".join(
        f"<tr><td>{escape(t['team'])}</td><td>{t['requests']}</td><td>{usd(t['spent_usd'])}</td>"
        f"<td>{usd(t['on_demand_usd'])}</td><td>{usd(t['saving_usd'])}</td><td>{t['unknown'] or ''}</td></tr>"
        for t in summary["teams"]
    )

    def floor(row: Mapping[str, Any]) -> str:
        """A bill with strays in it is a floor: their ends were never read."""
        return "at least " if row.get("floor_of") and row["spent_usd"] is not None else ""

    def strays(row: Mapping[str, Any]) -> str:
        named = ", ".join(row.get("floor_of") or [])
        return f"; stray job {named} billed to the last read that saw it" if named else ""

    request_rows = "".join(
        f"<tr><td>{escape(r['request_id'])}</td><td>{escape(r['team'])}</td><td>{floor(r)}{usd(r['spent_usd'])}</td>"
        f"<td>{usd(r['on_demand_usd'])}</td><td>{usd(r['saving_usd'])}</td><td>{usd(r['max_cost_usd']) if r['max_cost_usd'] else '-'}</td>"
        f"<td>{escape(', '.join(r['unpriced']) + strays(r))}</td></tr>"
        for r in summary["requests"]
    )
    label = escape(summary["team_label"])
    return (
        '<section data-mark="bill"><h2>Bill</h2>'
        f"<p>Per request and per job label <code>{label}</code>: Vertex's run time of each attempt x the price of every "
        "replica (the price table), against the same time on demand. Unknown where the table has no price (never counted "
        "as zero); Vertex's training fee is not included (unknown).</p>"
        f"<table><tr><th>{label}</th><th>requests</th><th>spent</th><th>on demand</th><th>saved</th><th>unknown</th></tr>"
        f"{team_rows}</table>"
        "<table><tr><th>request</th><th>team</th><th>spent</th><th>on demand</th><th>saved</th><th>max_cost_usd</th>"
        f"<th>not priced, or a floor</th></tr>{request_rows}</table></section>"
    )
