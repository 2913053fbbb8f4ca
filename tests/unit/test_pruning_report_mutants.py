"""The prune report lists 50 requests at most, of each kind (docs/operations.md, `prune_report`:
"50 requests a report: the rest in the passes after"), pinned by number: the only test of the cut
passed its own `limit`, so `REPORT_LIMIT` (shared/pruning/report.py) was never judged (the mutation
pass found it)."""

from __future__ import annotations

import pytest
from google.api_core.exceptions import ServiceUnavailable

from shared.pruning.journal import LeftBehind
from shared.pruning.report import PruneResult, RequestReport, report_alert

DOCUMENTED_LIMIT = 50


def failed(request_id: str) -> RequestReport:
    report = RequestReport(request_id, dry_run=False)
    report.record_error("planning", ServiceUnavailable("try later"))
    return report


@pytest.mark.parametrize(("requests", "truncated"), [(DOCUMENTED_LIMIT, False), (DOCUMENTED_LIMIT + 1, True)])
def test_a_report_lists_fifty_requests_and_says_when_it_cut_more(requests: int, truncated: bool) -> None:
    result = PruneResult([failed(f"r{i:03d}") for i in range(requests)], False, 0.5, {})
    earlier = [
        LeftBehind(f"j/e{i}.json", f"e{i:03d}", ("step-000100/",), "2026-11-01T11:00:00Z") for i in range(requests)
    ]
    alert = report_alert(result, earlier=earlier)
    assert alert is not None
    assert len(alert.details["requests"]) == DOCUMENTED_LIMIT
    assert alert.details["requests_truncated"] is truncated
    assert len(alert.details["unreported_earlier"]) == DOCUMENTED_LIMIT
