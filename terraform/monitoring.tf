# Counts of the functions' structured decisions. shared/log.py writes one JSON object per line;
# Cloud Run puts every key except severity/message in jsonPayload, so `event` is jsonPayload.event.

locals {
  function_service_filter = join(" OR ", [for name in values(local.function_names) : "\"${name}\""])

  log_metrics = {
    preemptions = {
      event       = "preemption"
      description = "Spot preemptions of spotjobs Vertex AI jobs, as logged by on_job_event/reconcile."
    }
    requeues = {
      event       = "requeue"
      description = "Requests re-queued as a new attempt after preemption or stockout."
    }
    attempts_exhausted = {
      event       = "attempts_exhausted"
      description = "Requests given up after their last allowed attempt."
    }
    invalid_requests = {
      event       = "invalid_request"
      description = "Job requests rejected by validation or policy (acknowledged, never retried)."
    }
  }
}

resource "google_logging_metric" "events" {
  for_each = local.log_metrics

  project     = var.project_id
  name        = "${var.name_prefix}/${each.key}"
  description = each.value.description
  filter      = <<-EOT
    resource.type="cloud_run_revision"
    resource.labels.service_name=(${local.function_service_filter})
    jsonPayload.event="${each.value.event}"
  EOT

  metric_descriptor {
    metric_kind  = "DELTA"
    value_type   = "INT64"
    unit         = "1"
    display_name = "spotjobs ${replace(each.key, "_", " ")}"
  }

  depends_on = [google_project_service.apis]
}

# A log-based metric is not at once known to Cloud Monitoring: creating an alert policy on it in the
# same apply fails with 404 "Cannot find metric(s) that match type = logging.googleapis.com/user/...
# If a metric was created recently, it could take up to 10 minutes to become available"
# (https://github.com/hashicorp/terraform-provider-google/issues/11102, open, still reported on 7.x).
# The policies wait here after the metrics are created; a new or changed metric (triggers) waits
# again, an unchanged one never does.
resource "time_sleep" "log_metrics_visible_to_monitoring" {
  create_duration = "${var.log_metric_propagation_seconds}s"

  triggers = {
    metrics = join(",", sort([for metric in google_logging_metric.events : metric.id]))
  }
}

resource "google_monitoring_alert_policy" "events" {
  for_each = { for key, metric in local.log_metrics : key => var.alert_policies[key] if var.alert_policies[key].enabled }

  project               = var.project_id
  display_name          = "spotjobs (${var.name_prefix}): ${replace(each.key, "_", " ")}"
  combiner              = "OR"
  notification_channels = var.notification_channels
  user_labels           = { app = "spotjobs" }

  conditions {
    display_name = "${replace(each.key, "_", " ")} > ${each.value.threshold} in ${each.value.window_seconds}s"

    condition_threshold {
      filter          = "resource.type = \"cloud_run_revision\" AND metric.type = \"logging.googleapis.com/user/${google_logging_metric.events[each.key].name}\""
      comparison      = "COMPARISON_GT"
      threshold_value = each.value.threshold
      duration        = "0s"

      aggregations {
        alignment_period     = "${each.value.window_seconds}s"
        per_series_aligner   = "ALIGN_SUM"
        cross_series_reducer = "REDUCE_SUM"
      }

      trigger {
        count = 1
      }
    }
  }

  alert_strategy {
    auto_close = "86400s"
  }

  documentation {
    mime_type = "text/markdown"
    content   = <<-EOT
      spotjobs logged `event=${local.log_metrics[each.key].event}` more than ${each.value.threshold} time(s) in ${each.value.window_seconds}s.
      Logs: `resource.type="cloud_run_revision" jsonPayload.event="${local.log_metrics[each.key].event}"`; each line names the request_id.
      Alerts with details are also on the ops-alerts topic: `spotjobs alerts --request-id ID`.
      Dashboard: ${local.dashboard_url}
    EOT
  }

  depends_on = [time_sleep.log_metrics_visible_to_monitoring]
}

# Anything on the dead-letter topic is a message a function failed on max_delivery_attempts times.
resource "google_monitoring_alert_policy" "dead_letters" {
  for_each = var.alert_policies.dead_letters.enabled ? toset(local.dead_letter_readers) : toset([])

  project               = var.project_id
  display_name          = "spotjobs (${var.name_prefix}): dead-lettered messages in ${each.key}"
  combiner              = "OR"
  notification_channels = var.notification_channels
  user_labels           = { app = "spotjobs" }

  conditions {
    display_name = "undelivered messages in ${each.key} > ${var.alert_policies.dead_letters.threshold}"

    condition_threshold {
      filter          = "resource.type = \"pubsub_subscription\" AND resource.labels.subscription_id = \"${google_pubsub_subscription.readers[each.key].name}\" AND metric.type = \"pubsub.googleapis.com/subscription/num_undelivered_messages\""
      comparison      = "COMPARISON_GT"
      threshold_value = var.alert_policies.dead_letters.threshold
      duration        = "0s"

      aggregations {
        alignment_period   = "${var.alert_policies.dead_letters.window_seconds}s"
        per_series_aligner = "ALIGN_MAX"
      }

      trigger {
        count = 1
      }
    }
  }

  alert_strategy {
    auto_close = "86400s"
  }

  documentation {
    mime_type = "text/markdown"
    content   = <<-EOT
      A spotjobs function failed a message ${local.trigger.max_delivery_attempts} times and Pub/Sub dead-lettered it.
      `spotjobs dead-letters` lists them with the trigger (attribute CloudPubSubDeadLetterSourceSubscription) and why they failed;
      fix the cause, then `spotjobs dead-letters redrive --id ID` (or `--all`) sends each back to its source topic once.
      Dashboard: ${local.dashboard_url}
    EOT
  }
}

# The number of requests reconcile found active on its last run (its `reconcile_summary` line's
# `active`): a distribution, so the dashboard can chart the value rather than count lines.
resource "google_logging_metric" "active_requests" {
  project     = var.project_id
  name        = "${var.name_prefix}/active_requests"
  description = "Requests not yet ended (or with messages pending), as reconcile counted them on each run."
  filter      = <<-EOT
    resource.type="cloud_run_revision"
    resource.labels.service_name=(${local.function_service_filter})
    jsonPayload.event="reconcile_summary"
  EOT

  value_extractor = "EXTRACT(jsonPayload.active)"

  metric_descriptor {
    metric_kind  = "DELTA"
    value_type   = "DISTRIBUTION"
    unit         = "1"
    display_name = "spotjobs active requests"
  }

  bucket_options {
    exponential_buckets {
      num_finite_buckets = 32
      growth_factor      = 2
      scale              = 1
    }
  }

  depends_on = [google_project_service.apis]
}

# The ops dashboard. Every chart is a log-based metric defined above or a built-in metric of
# Cloud Run (what Cloud Functions gen2 run on) or Pub/Sub, as listed in
# https://cloud.google.com/monitoring/api/metrics_gcp_p_z (run.googleapis.com/request_count with its
# response_code_class label, run.googleapis.com/request_latencies in ms,
# pubsub.googleapis.com/subscription/num_undelivered_messages). tests/unit/test_terraform_dashboard.py
# checks each chart's metric against that.
locals {
  dead_letter_subscription_filter = join(",", [for name in local.dead_letter_readers : "\"${google_pubsub_subscription.readers[name].name}\""])
  function_service_filter_list    = join(",", [for name in values(local.function_names) : "\"${name}\""])

  dashboard_charts = [
    {
      title   = "Spot preemptions (per 5 min)"
      filter  = "metric.type=\"logging.googleapis.com/user/${google_logging_metric.events["preemptions"].name}\" resource.type=\"cloud_run_revision\""
      aligner = "ALIGN_SUM", reducer = "REDUCE_SUM", group_by = [], plot = "STACKED_BARS"
    },
    {
      title   = "Re-queues (per 5 min)"
      filter  = "metric.type=\"logging.googleapis.com/user/${google_logging_metric.events["requeues"].name}\" resource.type=\"cloud_run_revision\""
      aligner = "ALIGN_SUM", reducer = "REDUCE_SUM", group_by = [], plot = "STACKED_BARS"
    },
    {
      title   = "Attempts exhausted (per 5 min)"
      filter  = "metric.type=\"logging.googleapis.com/user/${google_logging_metric.events["attempts_exhausted"].name}\" resource.type=\"cloud_run_revision\""
      aligner = "ALIGN_SUM", reducer = "REDUCE_SUM", group_by = [], plot = "STACKED_BARS"
    },
    {
      title   = "Invalid requests (per 5 min)"
      filter  = "metric.type=\"logging.googleapis.com/user/${google_logging_metric.events["invalid_requests"].name}\" resource.type=\"cloud_run_revision\""
      aligner = "ALIGN_SUM", reducer = "REDUCE_SUM", group_by = [], plot = "STACKED_BARS"
    },
    {
      title   = "Dead-letter backlog (messages)"
      filter  = "metric.type=\"pubsub.googleapis.com/subscription/num_undelivered_messages\" resource.type=\"pubsub_subscription\" resource.labels.subscription_id=one_of(${local.dead_letter_subscription_filter})"
      aligner = "ALIGN_MAX", reducer = "REDUCE_SUM", group_by = [], plot = "LINE"
    },
    {
      title   = "Function errors (non-2xx responses per 5 min)"
      filter  = "metric.type=\"run.googleapis.com/request_count\" resource.type=\"cloud_run_revision\" resource.labels.service_name=one_of(${local.function_service_filter_list}) metric.labels.response_code_class!=\"2xx\""
      aligner = "ALIGN_SUM", reducer = "REDUCE_SUM", group_by = ["resource.labels.service_name"], plot = "STACKED_BARS"
    },
    {
      title   = "Function latency, p95 (ms)"
      filter  = "metric.type=\"run.googleapis.com/request_latencies\" resource.type=\"cloud_run_revision\" resource.labels.service_name=one_of(${local.function_service_filter_list})"
      aligner = "ALIGN_PERCENTILE_95", reducer = "REDUCE_MAX", group_by = ["resource.labels.service_name"], plot = "LINE"
    },
    {
      title   = "Active requests (as reconcile counted them)"
      filter  = "metric.type=\"logging.googleapis.com/user/${google_logging_metric.active_requests.name}\" resource.type=\"cloud_run_revision\""
      aligner = "ALIGN_MEAN", reducer = "REDUCE_MAX", group_by = [], plot = "LINE"
    },
  ]
}

resource "google_monitoring_dashboard" "ops" {
  project = var.project_id
  dashboard_json = jsonencode({
    displayName = "spotjobs (${var.name_prefix})"
    labels      = { spotjobs = "" }
    mosaicLayout = {
      columns = 12
      tiles = concat(
        [for index, chart in local.dashboard_charts : {
          xPos   = (index % 2) * 6
          yPos   = floor(index / 2) * 4
          width  = 6
          height = 4
          widget = {
            title = chart.title
            xyChart = {
              dataSets = [{
                plotType = chart.plot
                timeSeriesQuery = {
                  timeSeriesFilter = {
                    filter = chart.filter
                    aggregation = {
                      alignmentPeriod    = "300s"
                      perSeriesAligner   = chart.aligner
                      crossSeriesReducer = chart.reducer
                      groupByFields      = chart.group_by
                    }
                  }
                }
              }]
              yAxis = { scale = "LINEAR" }
            }
          }
        }],
        [{
          xPos   = 0
          yPos   = ceil(length(local.dashboard_charts) / 2) * 4
          width  = 12
          height = 3
          widget = {
            title = "What to do"
            text = {
              format  = "MARKDOWN"
              content = <<-EOT
                Alert policies for these charts: [Monitoring > Alerting](https://console.cloud.google.com/monitoring/alerting/policies?project=${var.project_id}) (each links back here).
                Alert details: `spotjobs alerts --follow` (subscription on the ops-alerts topic). Dead letters: `spotjobs dead-letters`, then `spotjobs dead-letters redrive --id ID` once the cause is fixed.
                A request's history: `spotjobs status ID`, `spotjobs report ID --html report.html`.
              EOT
            }
          }
        }],
      )
    }
  })

  depends_on = [time_sleep.log_metrics_visible_to_monitoring]
}

locals {
  dashboard_url = "https://console.cloud.google.com/monitoring/dashboards/builder/${basename(google_monitoring_dashboard.ops.id)}?project=${var.project_id}"
}
