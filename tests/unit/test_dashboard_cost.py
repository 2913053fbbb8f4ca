"""The dashboard's cost is the request's bill as `spotjobs status` tells it (shared/fleet/spend.py),
and a machine the price table does not price shows as unknown, never as $0."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from shared.clock import iso
from shared.fleet.spend import request_spend
from shared.jobs import JobState
from shared.ledger.records import Attempt
from shared.ledger.states import RequestStatus
from spotjobs.dashboard.views import cost_so_far, request_row
from tests.conftest import load_event
from tests.support.decide import JOB1, NOW, make_record

JOB: dict[str, Any] = json.loads(load_event("requests/bare_docs.json"))  # a2-highgpu-1g


def running_for(hours: float) -> Attempt:
    started = iso(NOW - timedelta(hours=hours))
    return Attempt(1, "us-central1", "SPOT", claimed_at=started, job=JOB1, state=JobState.RUNNING, started_at=started)


def test_the_pages_cost_is_the_requests_bill() -> None:
    record = make_record(status=RequestStatus.RUNNING, request={"custom_job": JOB}, attempts=[running_for(2)])
    spend = request_spend(record, NOW)
    cost = cost_so_far(record, NOW)
    assert spend.usd and cost.so_far == spend.usd and cost.on_demand == spend.on_demand_usd
    assert request_row(record, NOW).cost == f"${spend.usd:,.2f}"


def test_an_unpriced_machine_costs_unknown_not_zero() -> None:
    unpriced = json.loads(json.dumps(JOB).replace("a2-highgpu-1g", "zz-unpriced-8g"))
    record = make_record(status=RequestStatus.RUNNING, request={"custom_job": unpriced}, attempts=[running_for(2)])
    cost = cost_so_far(record, NOW)
    assert cost.so_far is None and cost.text == "unknown" and cost.on_demand_text == "unknown"
