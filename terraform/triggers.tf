# Retraining triggers (on_trigger; docs/triggers.md): the definitions, written into the
# state bucket in the format `spotjobs triggers apply` stores; a Cloud Storage notification per
# watched bucket and prefix; a push subscription per watched topic; Cloud Scheduler jobs for the
# tick and for schedule triggers (scheduler.tf, `retraining`). on_trigger's own topic and push
# subscription come from shared/topology.json like every function's.

locals {
  # retraining_schedules (the older variable) are schedule triggers of the same name: a bare
  # CustomJob body becomes the trigger's custom_job, an envelope its request (less request_id,
  # which is derived from the trigger and the window). The conditional picks between two JSON
  # strings because its branches must share a type, which two different objects do not.
  migrated_schedules = [
    for s in var.retraining_schedules : {
      name        = s.name
      description = s.description
      source      = { schedule = { cron = s.schedule, time_zone = s.time_zone, paused = s.paused } }
      coalesce    = 300
      min_objects = null
      cooldown    = 0
      request = jsondecode(
        can(jsondecode(s.request).custom_job)
        ? jsonencode({ for k, v in jsondecode(s.request) : k => v if k != "request_id" })
        : jsonencode({ custom_job = jsondecode(s.request) })
      )
    }
  ]
  declared_triggers = [
    for t in var.retraining_triggers : {
      name        = t.name
      description = t.description
      source      = { for kind, body in t.source : kind => body if body != null }
      coalesce    = t.coalesce_seconds
      min_objects = t.min_objects
      cooldown    = t.cooldown_seconds
      request     = jsondecode(t.request)
    }
  ]
  all_triggers = { for t in concat(local.migrated_schedules, local.declared_triggers) : t.name => t }

  # What on_trigger reads (shared/triggers/definition.py); `paused` is Cloud Scheduler's, not the
  # definition's.
  trigger_definitions = {
    for name, t in local.all_triggers : name => merge(
      {
        schema_version   = 1
        name             = name
        description      = t.description
        source           = { for kind, body in t.source : kind => { for k, v in body : k => v if k != "paused" } }
        coalesce_seconds = t.coalesce
        cooldown_seconds = t.cooldown
        request          = t.request
      },
      { for k, v in { min_objects = t.min_objects } : k => v if v != null },
    )
  }

  gcs_triggers      = { for name, t in local.all_triggers : name => t.source.gcs if contains(keys(t.source), "gcs") }
  pubsub_triggers   = { for name, t in local.all_triggers : name => t.source.pubsub if contains(keys(t.source), "pubsub") }
  schedule_triggers = { for name, t in local.all_triggers : name => merge(t.source.schedule, { description = t.description }) if contains(keys(t.source), "schedule") }

  # One notification per watched bucket and prefix (triggers sharing both share it; a bucket allows
  # at most 10 notification configurations per event type).
  watched_prefixes = { for pair in distinct([for t in values(local.gcs_triggers) : { bucket = t.bucket, prefix = t.prefix }]) : "${pair.bucket}/${pair.prefix}" => pair }
  # A watched topic is named (in this project) or pathed (projects/P/topics/T).
  watched_topics = {
    for topic in distinct([for t in values(local.pubsub_triggers) : t.topic]) :
    element(split("/", topic), length(split("/", topic)) - 1) => (length(split("/", topic)) > 1 ? topic : "projects/${var.project_id}/topics/${topic}")
  }
}

check "trigger_names_are_unique_across_schedules_and_triggers" {
  assert {
    condition     = length(local.all_triggers) == length(var.retraining_schedules) + length(var.retraining_triggers)
    error_message = "A name is used by both retraining_schedules and retraining_triggers; trigger names must be unique."
  }
}

resource "google_storage_bucket_object" "trigger_definitions" {
  for_each = local.trigger_definitions

  bucket       = google_storage_bucket.state.name
  name         = "triggers/_definitions/${each.key}.json"
  content      = jsonencode(each.value)
  content_type = "application/json"
}

# Cloud Storage publishes notifications as its project service agent
# (service-PROJECT_NUMBER@gs-project-accounts.iam.gserviceaccount.com), which must be a publisher on
# the topic: https://cloud.google.com/storage/docs/reporting-changes (prerequisites).
data "google_storage_project_service_account" "gcs" {
  project = var.project_id
}

resource "google_pubsub_topic_iam_member" "gcs_notifies_triggers" {
  count = length(local.watched_prefixes) > 0 ? 1 : 0

  project = var.project_id
  topic   = google_pubsub_topic.topics["triggers"].name
  role    = "roles/pubsub.publisher"
  member  = "serviceAccount:${data.google_storage_project_service_account.gcs.email_address}"
}

# Payload JSON_API_V1: the message data is the object's JSON; the attributes name the bucket,
# object, generation, event type and time (https://cloud.google.com/storage/docs/pubsub-notifications).
resource "google_storage_notification" "triggers" {
  for_each = local.watched_prefixes

  bucket             = each.value.bucket
  topic              = google_pubsub_topic.topics["triggers"].id
  payload_format     = "JSON_API_V1"
  event_types        = ["OBJECT_FINALIZE"]
  object_name_prefix = each.value.prefix == "" ? null : each.value.prefix

  depends_on = [google_pubsub_topic_iam_member.gcs_notifies_triggers]
}

# A pubsub trigger's topic is pushed to on_trigger like its own: the push identity, retry and
# dead letters of the trigger subscriptions, and an endpoint path naming the watched topic (the
# CloudEvent source on_trigger matches against the definitions). No filter: several triggers may
# watch one topic with different attribute matches; on_trigger applies them.
resource "google_pubsub_subscription" "watched_topics" {
  for_each = local.watched_topics

  project = var.project_id
  name    = "on-trigger-${each.key}"
  topic   = each.value
  labels  = local.labels

  ack_deadline_seconds = local.trigger_ack_deadline["on_trigger"]

  expiration_policy {
    ttl = ""
  }

  retry_policy {
    minimum_backoff = "${local.trigger.minimum_backoff_seconds}s"
    maximum_backoff = "${local.trigger.maximum_backoff_seconds}s"
  }

  dead_letter_policy {
    dead_letter_topic     = google_pubsub_topic.topics[local.dead_letter_topic].id
    max_delivery_attempts = local.trigger.max_delivery_attempts
  }

  push_config {
    push_endpoint = "${google_cloudfunctions2_function.functions["on_trigger"].service_config[0].uri}/${each.value}"

    oidc_token {
      service_account_email = google_service_account.pushers["on_trigger"].email
      audience              = google_cloudfunctions2_function.functions["on_trigger"].service_config[0].uri
    }
  }

  depends_on = [
    google_cloud_run_v2_service_iam_member.invoker,
    google_service_account_iam_member.pubsub_mints_push_tokens,
  ]
}

resource "google_pubsub_subscription_iam_member" "watched_topics_dead_letter_subscriber" {
  for_each = google_pubsub_subscription.watched_topics

  project      = var.project_id
  subscription = each.value.name
  role         = "roles/pubsub.subscriber"
  member       = local.pubsub_service_agent
}
