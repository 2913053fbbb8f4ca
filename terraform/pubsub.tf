# Pub/Sub, built entirely from shared/topology.json.
#
# Trigger design (why push subscriptions, not event_trigger): a gen2 function's `event_trigger`
# makes Eventarc create and own the Pub/Sub subscription, and Terraform cannot set a dead-letter
# policy on it (its name is not even known in advance). So each function is deployed as an
# internal-only HTTP service and fed by a push subscription managed here: Pub/Sub's own retry
# backoff and dead-letter policy apply, the pushes authenticate with an OIDC token of a dedicated
# push identity that alone may invoke that function, and this is exactly how the embedded stack
# feeds the functions (emulator push subscriptions). Google documents this as the "direct Pub/Sub
# trigger" for Cloud Run functions. The entry points are registered with
# @functions_framework.cloud_event, so functions-framework turns the push body into a CloudEvent.

locals {
  # A push subscription's ack deadline is how long Pub/Sub waits for the HTTP response. Shorter
  # than the function timeout would redeliver a message that is still being processed, so it is
  # the topology's value or the function's timeout, whichever is longer (600 s at most).
  trigger_ack_deadline = {
    for fn in keys(local.routes) :
    fn => min(600, max(local.trigger.ack_deadline_seconds, local.function_config[fn].timeout_seconds))
  }
}

resource "google_pubsub_topic" "topics" {
  #checkov:skip=CKV_GCP_83:Messages are encrypted at rest with Google-managed keys; CMEK (kms_key_name) is not required for job requests and alerts.
  for_each = local.topics

  project = var.project_id
  name    = each.value.name
  labels  = local.labels
  # Set on purpose per topic in topology.json: lets an operator seek a subscription back in time
  # (replay job requests after a bad release) beyond what a subscription itself retains.
  message_retention_duration = "${each.value.message_retention_seconds}s"

  depends_on = [google_project_service.apis]
}

# One push subscription per function: retry with backoff, then the dead-letter topic.
resource "google_pubsub_subscription" "triggers" {
  for_each = local.routes

  project = var.project_id
  name    = each.value.subscription
  topic   = google_pubsub_topic.topics[each.value.topic].id
  labels  = local.labels

  ack_deadline_seconds       = local.trigger_ack_deadline[each.key]
  message_retention_duration = "${min(604800, local.topics[each.value.topic].message_retention_seconds)}s"

  # From topology.json (null = every message). reconcile and prune_checkpoints share the
  # maintenance topic; each subscription delivers only messages whose `task` attribute names its
  # task, and Pub/Sub acknowledges the others for it, so a busy function is never handed (and
  # never holds an instance for) the other's work. Pub/Sub cannot change the filter of an existing
  # subscription: a changed filter replaces the subscription (messages still in it are lost).
  # https://cloud.google.com/pubsub/docs/subscription-message-filter
  filter = each.value.filter

  # Never expire: job-requests can be idle for weeks, and an expired trigger subscription would
  # silently drop every later request.
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
    # The path carries the topic (projects/P/topics/T), the same path the embedded stack pushes to:
    # on_trigger tells a watched topic's messages apart by it.
    push_endpoint = "${google_cloudfunctions2_function.functions[each.key].service_config[0].uri}/projects/${var.project_id}/topics/${local.topics[each.value.topic].name}"

    oidc_token {
      service_account_email = google_service_account.pushers[each.key].email
      audience              = google_cloudfunctions2_function.functions[each.key].service_config[0].uri
    }
  }

  depends_on = [
    google_cloud_run_v2_service_iam_member.invoker,
    google_service_account_iam_member.pubsub_mints_push_tokens,
  ]
}

# Pull subscriptions for people and tools: ops alerts, and the dead-letter topic (a dead-letter
# topic without a subscription would discard what lands on it).
resource "google_pubsub_subscription" "readers" {
  for_each = local.readers

  project = var.project_id
  name    = each.key
  topic   = google_pubsub_topic.topics[each.value.topic].id
  labels  = local.labels

  ack_deadline_seconds       = each.value.ack_deadline_seconds
  message_retention_duration = "${min(604800, local.topics[each.value.topic].message_retention_seconds)}s"
  retain_acked_messages      = false

  expiration_policy {
    ttl = ""
  }
}

# Dead-lettering is done by the Pub/Sub service agent: it must publish to the dead-letter topic and
# subscribe (acknowledge) on each source subscription, or messages are retried forever instead.
resource "google_pubsub_topic_iam_member" "dead_letter_publisher" {
  project = var.project_id
  topic   = google_pubsub_topic.topics[local.dead_letter_topic].name
  role    = "roles/pubsub.publisher"
  member  = local.pubsub_service_agent
}

resource "google_pubsub_subscription_iam_member" "dead_letter_source_subscriber" {
  for_each = google_pubsub_subscription.triggers

  project      = var.project_id
  subscription = each.value.name
  role         = "roles/pubsub.subscriber"
  member       = local.pubsub_service_agent

  lifecycle {
    # A replaced subscription (e.g. a new filter) keeps its name, so this member would show no
    # diff while its grant went away with the old subscription: re-create it with it.
    replace_triggered_by = [google_pubsub_subscription.triggers[each.key]]
  }
}

# Publishers of job requests (people, CI, other services).
resource "google_pubsub_topic_iam_member" "job_request_publishers" {
  for_each = toset(var.job_request_publishers)

  project = var.project_id
  topic   = google_pubsub_topic.topics["job_requests"].name
  role    = "roles/pubsub.publisher"
  member  = each.value
}

# Readers of the ops-alerts and dead-letter subscriptions.
resource "google_pubsub_subscription_iam_member" "ops_subscribers" {
  for_each = { for pair in setproduct(keys(local.readers), var.ops_subscribers) : "${pair[0]} ${pair[1]}" => pair }

  project      = var.project_id
  subscription = google_pubsub_subscription.readers[each.value[0]].name
  role         = "roles/pubsub.subscriber"
  member       = each.value[1]
}
