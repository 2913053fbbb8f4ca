"""The Cloud Monitoring dashboard (terraform/monitoring.tf): every chart's metric exists, either
among the log-based metrics Terraform defines or as a built-in metric, and the alert policies and
the dashboard link to each other."""

from __future__ import annotations

import re
from typing import Any

from tests.support.terraform import module_config

# Built-in metrics the dashboard may chart, with the aligners valid for their kind, from Google's
# metrics list (https://cloud.google.com/monitoring/api/metrics_gcp_p_z): Cloud Run, which runs
# Cloud Functions gen2, and Pub/Sub.
BUILTIN_METRICS = {
    # DELTA INT64, labels response_code, response_code_class, route: requests reaching the revision.
    "run.googleapis.com/request_count": {"kind": "counter", "resource": "cloud_run_revision"},
    # DELTA DISTRIBUTION, ms: request latency reaching the revision.
    "run.googleapis.com/request_latencies": {"kind": "distribution", "resource": "cloud_run_revision"},
    # GAUGE INT64: messages not acknowledged by subscribers (the backlog).
    "pubsub.googleapis.com/subscription/num_undelivered_messages": {"kind": "gauge", "resource": "pubsub_subscription"},
}
ALIGNERS = {
    "counter": {"ALIGN_SUM", "ALIGN_RATE", "ALIGN_DELTA"},
    "distribution": {"ALIGN_PERCENTILE_50", "ALIGN_PERCENTILE_95", "ALIGN_PERCENTILE_99", "ALIGN_MEAN", "ALIGN_DELTA"},
    "gauge": {"ALIGN_MAX", "ALIGN_MEAN", "ALIGN_MIN", "ALIGN_NEXT_OLDER"},
}
USER_METRIC = re.compile(r'^logging\.googleapis\.com/user/\$\{google_logging_metric\.(\w+)(?:\["(\w+)"\])?\.name\}$')


def charts() -> list[dict[str, Any]]:
    return module_config().locals["dashboard_charts"]


def unescape(text: str) -> str:
    return text.replace('\\"', '"')


def metric_of(chart: dict[str, Any]) -> str:
    found = re.findall(r'metric\.type="((?:\$\{[^}]*\}|[^"$])+)"', unescape(chart["filter"]))
    assert len(found) == 1, chart["filter"]
    return found[0]


def log_based_metrics() -> dict[str, str]:
    """Every log-based metric Terraform defines, by its reference, with its value type."""
    config = module_config()
    defined: dict[str, str] = {}
    for name, body in config.of_type("google_logging_metric").items():
        value_type = body["metric_descriptor"][0]["value_type"]
        kind = "distribution" if value_type == "DISTRIBUTION" else "counter"
        if "for_each" in body:
            for key in config.locals["log_metrics"]:
                defined[f"{name}[{key}]"] = kind
        else:
            defined[name] = kind
    return defined


def test_every_chart_charts_a_defined_log_based_metric_or_a_builtin_one() -> None:
    defined = log_based_metrics()
    for chart in charts():
        metric = metric_of(chart)
        user = USER_METRIC.match(metric)
        if user:
            reference = f"{user.group(1)}[{user.group(2)}]" if user.group(2) else user.group(1)
            assert reference in defined, f"{chart['title']}: {metric} is not a log-based metric terraform defines"
            kind = defined[reference]
            assert 'resource.type="cloud_run_revision"' in unescape(chart["filter"])
        else:
            assert metric in BUILTIN_METRICS, f"{chart['title']}: {metric} is neither log-based nor a known built-in"
            kind = BUILTIN_METRICS[metric]["kind"]
            assert f'resource.type="{BUILTIN_METRICS[metric]["resource"]}"' in unescape(chart["filter"])
        assert chart["aligner"] in ALIGNERS[kind], f"{chart['title']}: {chart['aligner']} on a {kind}"


def test_the_dashboard_shows_what_the_ops_rotation_watches() -> None:
    metrics = [metric_of(chart) for chart in charts()]
    text = " ".join(metrics)
    for key in module_config().locals["log_metrics"]:  # preemptions, requeues, attempts exhausted, invalid
        assert f'google_logging_metric.events["{key}"]' in text, key
    assert "google_logging_metric.active_requests" in text
    assert "pubsub.googleapis.com/subscription/num_undelivered_messages" in metrics  # dead-letter backlog
    assert "run.googleapis.com/request_latencies" in metrics
    errors = next(c for c in charts() if metric_of(c) == "run.googleapis.com/request_count")
    assert 'metric.labels.response_code_class!="2xx"' in unescape(errors["filter"])
    backlog = next(c for c in charts() if "num_undelivered" in metric_of(c))
    assert "local.dead_letter_subscription_filter" in backlog["filter"]


def test_the_dashboard_json_is_built_from_the_charts() -> None:
    config = module_config()
    dashboard = config.resource("google_monitoring_dashboard", "ops")["dashboard_json"]
    assert dashboard.startswith("${jsonencode(")
    for field in ("chart.filter", "chart.aligner", "chart.reducer", "chart.group_by", "chart.plot", "chart.title"):
        assert field in dashboard
    assert "for index, chart in local.dashboard_charts" in dashboard
    assert "mosaicLayout" in dashboard and "timeSeriesFilter" in dashboard


def test_active_requests_is_extracted_from_the_reconcile_summary() -> None:
    metric = module_config().resource("google_logging_metric", "active_requests")
    assert metric["value_extractor"] == "EXTRACT(jsonPayload.active)"
    assert 'jsonPayload.event="reconcile_summary"' in metric["filter"]
    from shared.reconcile import ReconcileSummary

    assert "active" in ReconcileSummary().to_json()


def test_alert_policies_and_the_dashboard_link_to_each_other() -> None:
    config = module_config()
    assert "google_monitoring_dashboard.ops.id" in config.locals["dashboard_url"]
    assert config.locals["dashboard_url"].startswith("https://console.cloud.google.com/monitoring/dashboards/")
    for name, policy in config.of_type("google_monitoring_alert_policy").items():
        content = policy["documentation"][0]["content"]
        assert "Dashboard: ${local.dashboard_url}" in content, name
    dashboard = config.resource("google_monitoring_dashboard", "ops")["dashboard_json"]
    assert "https://console.cloud.google.com/monitoring/alerting/policies?project=${var.project_id}" in dashboard
