"""The dashboard's Flask app: the Requests, Request, Fleet and Alerts pages (live: server-sent
events, `live`), the Dead letters page, and the cancel behind a confirmation page.

Safe by construction:
- every template is autoescaped (Jinja2), and every text a job wrote goes through `views.shown`;
- the cancel is a POST that must carry the session's token (a random value in a signed, SameSite
  strict cookie whose key is made at start) and, when the browser sends one, an Origin that is this
  app's own; a request another site makes carries neither;
- the host a request names must be one of `trusted_hosts` (loopback names by default, `::1` too), so a page
  that re-points its own name at 127.0.0.1 (DNS rebinding) is refused;
- the headers forbid framing, inline scripts and anything not from this app (Content-Security-Policy).
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from flask import Flask, abort, redirect, render_template, request, session, url_for

from shared.clock import iso, parse_rfc3339, utcnow
from shared.log import Logger
from spotjobs.dashboard.live import SEEN, STREAM_SECONDS, VERSION_PLACEHOLDER, stream, versioned, wants_events
from spotjobs.dashboard.views import (
    alert_row,
    checkpoints,
    cost_so_far,
    log_tail,
    machine_of,
    request_row,
    shown,
    timeline,
)

if TYPE_CHECKING:
    from werkzeug.wrappers import Response

    from spotjobs.dashboard.reading import Deployment

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
REQUESTS_SHOWN = 100  # rows on the Requests page, as `spotjobs status` lists by default
ALERTS_SHOWN = 100  # the newest of the alerts log's last week
LOG_LINES_SHOWN = 200
# The log tail reads from this long before the record's last change on (every refresh of a live
# page reads again, and Cloud Logging's entries.list allows 60 reads a minute per project).
LOG_WINDOW = timedelta(hours=1)
FILTERS = ("status", "label", "since", "machine")  # the Requests page's
TOKEN_FIELD = "token"
CANCEL_RESULTS = ("recorded", "already_cancelled", "finished")  # what `spotjobs.cancel` answers
HEADERS = {
    "Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    # Not no-referrer: under it Chromium sends `Origin: null` with the page's own form, which the
    # cancel's Origin check must refuse; same-origin keeps the URL from every other site.
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}

log = Logger({"component": "dashboard"})


def create_app(
    deployment: Deployment,
    *,
    trusted_hosts: Sequence[str] | None = LOOPBACK_NAMES,
    poll_milliseconds: int = 5000,
    stream_seconds: float = STREAM_SECONDS,
) -> Flask:
    """The app over `deployment`; `trusted_hosts` None accepts any Host (an address the operator
    chose); a live page is rendered again every `poll_milliseconds` and sent to the browser when it
    changed, over an event stream that ends after `stream_seconds` (the browser reconnects)."""
    app = Flask(__name__)
    app.secret_key = secrets.token_bytes(32)  # per start: a token of an earlier run is void
    app.config.update(
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Strict",
    )
    app.jinja_env.autoescape = True  # every template, whatever its name ends with

    @app.before_request
    def trusted_host_only() -> None:
        # Not Flask's TRUSTED_HOSTS: werkzeug cuts a trusted name at its first ':', so `::1` never matches.
        if trusted_hosts is not None and host_name(request.host) not in trusted_hosts:
            abort(400, "this host name is not one the dashboard serves")

    @app.after_request
    def secure_headers(response: Response) -> Response:
        response.headers.update(HEADERS)
        return response

    @app.context_processor
    def session_token() -> dict[str, Any]:
        if TOKEN_FIELD not in session:
            session[TOKEN_FIELD] = secrets.token_urlsafe(32)
        return {
            "token": session[TOKEN_FIELD],
            "bucket": shown(deployment.state_bucket),
            "poll": poll_milliseconds,
            "version": VERSION_PLACEHOLDER,
        }

    def live(render: Callable[[], str]) -> str | Response:
        """The page, or its event stream when the page's script asks for it (`live`)."""
        if poll_milliseconds and wants_events(request.headers.get("Accept")):
            return stream(render, request.args.get(SEEN), poll_milliseconds / 1000, stream_seconds)
        return versioned(render())[0]

    @app.get("/")
    def requests_page() -> str | Response:
        return live(lambda: render_template("requests.html", **requests_context(deployment, request.args, utcnow())))

    @app.get("/fleet")
    def fleet_page() -> str | Response:
        return live(lambda: render_template("fleet.html", **fleet_context(deployment, utcnow())))

    @app.get("/alerts")
    def alerts_page() -> str | Response:
        return live(lambda: render_template("alerts.html", **alerts_context(deployment, utcnow())))

    @app.get("/dead-letters")
    def dead_letters_page() -> str:
        return render_template("dead_letters.html", **dead_letters_context(deployment))

    @app.get("/requests/<request_id>")
    def request_page(request_id: str) -> str | Response:
        def render() -> str:
            record = deployment.ledger.get(request_id)
            if record is None:
                abort(404)
            return render_template("request.html", **request_context(deployment, record, utcnow()))

        return live(render)

    @app.get("/requests/<request_id>/cancel")
    def confirm_cancel(request_id: str) -> str:
        record = deployment.ledger.get(request_id)
        if record is None:
            abort(404)
        return render_template("cancel.html", request_id=request_id, shown_id=shown(record.request_id))

    @app.post("/requests/<request_id>/cancel")
    def cancel(request_id: str) -> Response:
        check_same_origin()
        reason = (request.form.get("reason") or "").strip()[:500] or None
        outcome = deployment.cancel(request_id, reason, deployment.operator)
        log.info("cancel from the dashboard", request_id=request_id, result=outcome.result, by=deployment.operator)
        if outcome.result == "unknown":
            abort(404)
        return redirect(url_for("request_page", request_id=request_id, cancel=outcome.result), code=303)

    return app


def host_name(host: str) -> str:
    """The name of a Host header without its port: `[::1]:8765` -> `::1`, `localhost:8765` -> `localhost`."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:].partition("]")[0]
    return host.partition(":")[0]


def check_same_origin() -> None:
    """Refuse (403) a POST without this session's token, or from another origin."""
    sent = request.form.get(TOKEN_FIELD, "")
    expected = session.get(TOKEN_FIELD, "")
    if not expected or not hmac.compare_digest(str(sent), str(expected)):
        abort(403, "the form's token is missing or not this session's: reload the page")
    origin = request.headers.get("Origin")
    if origin is not None and origin.rstrip("/") != request.host_url.rstrip("/"):
        abort(403, "a request from another origin")
    if request.headers.get("Sec-Fetch-Site") not in (None, "same-origin", "none"):
        abort(403, "a request from another site")


def requests_context(deployment: Deployment, args: Any, now: datetime) -> dict[str, Any]:
    """The Requests page: the filters of `spotjobs status` (status, label, since) and a machine."""
    import argparse

    from spotjobs.cli.find import ACTIVE, Query, find_records, label_filter, since_filter, status_filter, statuses

    errors: list[str] = []

    def parsed(name: str, parse: Any) -> list[Any]:
        values = []
        for text in args.getlist(name):
            if not text.strip():
                continue
            try:
                values.append(parse(text))
            except argparse.ArgumentTypeError as error:
                errors.append(shown(error))
        return values

    chosen_statuses = parsed("status", status_filter)
    labels = parsed("label", label_filter)
    since = parsed("since", since_filter)
    machine = (args.get("machine") or "").strip()
    asked = any((args.get(name) or "").strip() for name in (*FILTERS, "all"))
    # No filter asked for: the active index, not a listing of every request (100,000 finished
    # ones take seconds to list, on every poll); `?all=1` lists them.
    default_active = not asked and not errors
    if default_active:
        chosen_statuses = [ACTIVE]
    query = Query(frozenset(chosen_statuses), dict(labels), since[0] if since else None)
    found = find_records(deployment.ledger, query, REQUESTS_SHOWN)
    records = [r for r in found.records if not machine or machine_of(r)[0] == machine]
    return {
        "rows": [request_row(record, now) for record in records],
        "counts": [(status, found.counts[status]) for status in statuses() if found.counts[status]],
        "total": sum(found.counts.values()),
        "statuses": ["ACTIVE", *statuses()],
        "chosen": set(chosen_statuses),
        "labels": [shown(f"{k}={v}") for k, v in labels],
        "since": shown(args.get("since", ""), 60),
        "machine": shown(machine, 80),
        "errors": errors,
        "default_active": default_active,
    }


def request_context(deployment: Deployment, record: Any, now: datetime) -> dict[str, Any]:
    """A Request page: its attempts as bars, its decisions, its cost, its trainer's last lines."""
    from shared.settings import Settings
    from spotjobs.cli.status import deadline_view
    from spotjobs.trainer_logs import LogsUnavailable, request_lines

    lines, logs_error = [], ""
    if deployment.logs is not None:
        try:
            lines = list(request_lines(lambda: record, deployment.logs, since=log_window_start(record)))
        except LogsUnavailable as error:
            logs_error = shown(error)
    else:
        logs_error = "no log source for this deployment"
    cost = cost_so_far(record, now)
    requeue = record.requeue
    cancel = record.cancel
    return {
        "record_id": record.request_id,
        "row": request_row(record, now),
        "bars": timeline(record, now),
        "checkpoints": checkpoints(record),
        "cost": cost,
        "requeue": None
        if requeue is None
        else shown(f"attempt {requeue.attempt} in {requeue.location} ({requeue.strategy}) because {requeue.reason}"),
        "cancelled": None if cancel is None else shown(f"by {cancel.by} at {cancel.at}: {cancel.reason or '-'}"),
        "can_cancel": not record.is_terminal and cancel is None,
        "lines": log_tail(lines, LOG_LINES_SHOWN),
        "logs_error": logs_error,
        # Only the results a cancel has: a link may not put its own words on the page.
        "cancel_result": request.args.get("cancel") if request.args.get("cancel") in CANCEL_RESULTS else "",
        "deadline": deadline_lines(deadline_view(record, deployment.settings or Settings(), now)),
    }


def fleet_context(deployment: Deployment, now: datetime) -> dict[str, Any]:
    """The Fleet page: `spotjobs fleet`'s table, and the preemptions per location of the window."""
    from collections import Counter

    from shared.fleet.observations import Kind
    from shared.requests.pricing import hourly
    from spotjobs.cli.fleet import FLEET_HEADER, fleet_rows, observed_fleet, row_cells

    observed = observed_fleet(deployment.bucket, now)
    preemptions = Counter(fact.location for facts in observed.values() for fact in facts if fact.kind is Kind.PREEMPT)
    most = max(preemptions.values(), default=0) or 1
    return {
        "header": FLEET_HEADER,
        "rows": [tuple(shown(cell, 80) for cell in row_cells(row)) for row in fleet_rows(observed, now, hourly)],
        "preemptions": [
            (shown(location, 60), count, round(count / most * 100, 1)) for location, count in preemptions.most_common()
        ],
    }


def deadline_lines(view: dict[str, Any] | None) -> list[str]:
    """The deadline, its progress, the projected finish, the slack and the next move with its
    reason, as `spotjobs status ID` prints them (`deadline_view`)."""
    if view is None:
        return []
    if not view["known"]:
        return [shown(f"deadline {view['deadline']}: progress unknown until the kit reports total_steps and a rate")]
    lines = [
        f"deadline {view['deadline']}: {view['committed_steps']}/{view['total_steps']} steps committed, "
        f"{view['placement'].replace('_', ' ')}",
        f"projected finish {view['projected_finish']}, slack {view['slack_seconds']} s "
        f"(one changeover {view['changeover_seconds']} s)",
        f"next: {view['next'].replace('_', ' ')} because {view['reason']}",
    ]
    if view.get("refused"):
        lines.append(f"refused by the policy ({view['refused']}): stays on Spot")
    return [shown(line) for line in lines]


def log_window_start(record: Any) -> str | None:
    """Where the log tail starts: `LOG_WINDOW` before the record last changed (None: from its start)."""
    changed = parse_rfc3339(record.updated_at or "")
    return iso(changed - LOG_WINDOW, timespec="microseconds") if changed else None


def alerts_context(deployment: Deployment, now: datetime) -> dict[str, Any]:
    """The Alerts page: the newest of the last week's ops alerts from the alerts log the outbox
    writes as it publishes (shared/deciding/alert_log.py), newest first."""
    from shared.deciding.alert_log import recent_alerts

    if deployment.bucket is None:
        return {"alerts": [], "unreadable": "no state bucket for this deployment"}
    try:
        alerts = recent_alerts(deployment.bucket, now, limit=ALERTS_SHOWN)
    except Exception as error:  # noqa: BLE001 - the page says why, and the next refresh tries again
        log.warning("alerts log unreadable", error=type(error).__name__)
        return {"alerts": [], "unreadable": shown(f"the alerts log could not be read: {error}")}
    return {"alerts": [alert_row(alert) for alert in alerts], "unreadable": ""}


def dead_letters_context(deployment: Deployment) -> dict[str, Any]:
    """The Dead letters page, read when opened (never polled: each read leases every message):
    `spotjobs dead-letters`' table and the command that redrives each."""
    if deployment.dead_letters is None:
        return {"letters": [], "unreachable": "no dead-letter subscription for this deployment"}
    try:
        letters = deployment.dead_letters()
    except Exception as error:  # noqa: BLE001 - the page says why, as the CLI would
        log.warning("dead letters unreadable", error=type(error).__name__)
        return {"letters": [], "unreachable": shown(f"the dead-letter subscription could not be read: {error}")}
    rows = [
        {
            "id": shown(letter.id, 80),
            "source": shown(letter.source_subscription or "?", 80),
            "deliveries": shown(letter.delivery_count if letter.delivery_count is not None else "?", 24),
            "published": shown(letter.original_publish_time or "-", 40),
            "message": shown(letter.summary()),
            "redrive": shown(f"spotjobs dead-letters redrive --id {letter.id}", 120),
        }
        for letter in letters
    ]
    return {"letters": rows, "unreachable": ""}
