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
      Alerts with details are also on the ops-alerts topic (subscription ops-alerts-reader).
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
      Pull `${each.key}` to inspect it (attribute CloudPubSubDeadLetterSourceSubscription names the trigger);
      fix the cause, then re-publish the data to the source topic and acknowledge it here.
    EOT
  }
}
