# spotjobs on Google Cloud: the Pub/Sub topology, five Cloud Functions (gen2), their identities,
# buckets, the Vertex job-event log sink, Cloud Scheduler jobs and Cloud Monitoring.
#
# Files by concern: pubsub.tf, functions.tf, iam.tf, storage.tf, logging.tf, scheduler.tf,
# monitoring.tf, triggers.tf. This file holds the shared locals, the project lookup and the APIs.

locals {
  # The ONE definition of topics, routes and trigger settings, shared with the embedded stack
  # (shared/topology.py). Nothing below spells a topic or subscription name.
  topology = jsondecode(file("${path.module}/../shared/topology.json"))

  topics              = local.topology.topics               # key => { name, message_retention_seconds }
  routes              = local.topology.functions            # entry point => { topic (key), subscription }
  trigger             = local.topology.trigger_subscription # ack deadline, backoff, attempts, dead_letter_topic (key)
  readers             = local.topology.pull_subscriptions   # subscription name => { topic (key), ack_deadline_seconds }
  dead_letter_topic   = local.trigger.dead_letter_topic
  dead_letter_readers = [for name, sub in local.readers : name if sub.topic == local.dead_letter_topic]

  # Short, stable per-function ids for resource names with tight length limits (service account
  # ids are 6-30 characters). An entry point added to topology.json without a short id here gets
  # its hyphenated name, truncated.
  short_ids = {
    submit_job        = "submit"
    on_job_event      = "events"
    reconcile         = "reconcile"
    prune_checkpoints = "prune"
    on_trigger        = "trigger"
  }
  function_short = {
    for fn in keys(local.routes) : fn => lookup(local.short_ids, fn, substr(replace(fn, "_", "-"), 0, 9))
  }
  # Cloud Functions (and their Cloud Run services) are named after the entry point.
  function_names = { for fn in keys(local.routes) : fn => "${var.name_prefix}-${replace(fn, "_", "-")}" }

  vertex_location = coalesce(var.vertex_location, var.region)

  labels = merge(var.labels, { app = "spotjobs", "spotjobs-deployment" = var.name_prefix })

  apis = [
    "aiplatform.googleapis.com",
    "artifactregistry.googleapis.com",
    "cloudbuild.googleapis.com",
    "cloudfunctions.googleapis.com",
    "cloudresourcemanager.googleapis.com",
    "cloudscheduler.googleapis.com",
    "iam.googleapis.com",
    "logging.googleapis.com",
    "monitoring.googleapis.com",
    "pubsub.googleapis.com",
    "run.googleapis.com",
    "storage.googleapis.com",
  ]
}

data "google_project" "this" {
  project_id = var.project_id
}

resource "google_project_service" "apis" {
  for_each = var.enable_apis ? toset(local.apis) : toset([])

  project = var.project_id
  service = each.value
  # Other workloads in the project may use these APIs: never turn them off on destroy.
  disable_on_destroy         = false
  disable_dependent_services = false
}

# The Pub/Sub service agent (service-PROJECT_NUMBER@gcp-sa-pubsub.iam.gserviceaccount.com) is
# created lazily by Google; asking for it here makes it exist before the IAM bindings below name it
# (dead-letter publisher/subscriber, OIDC token creator for push).
resource "google_project_service_identity" "pubsub" {
  provider = google-beta

  project = var.project_id
  service = "pubsub.googleapis.com"

  depends_on = [google_project_service.apis]
}

locals {
  pubsub_service_agent = "serviceAccount:${google_project_service_identity.pubsub.email}"
}

# Unknown per-function overrides are almost certainly typos: say so at plan time.
check "function_overrides_name_known_functions" {
  assert {
    condition     = length(setsubtract(keys(var.functions), keys(local.routes))) == 0
    error_message = "var.functions has keys that are not entry points in shared/topology.json: ${join(", ", setsubtract(keys(var.functions), keys(local.routes)))}"
  }
}
