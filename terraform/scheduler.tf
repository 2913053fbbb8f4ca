# Cloud Scheduler publishes to Pub/Sub through its own service agent (roles/cloudscheduler.serviceAgent,
# granted by Google when the API is enabled); no service account of ours is involved.

locals {
  maintenance_tasks = {
    reconcile = var.maintenance_schedules.reconcile
    prune     = var.maintenance_schedules.prune
  }
}

# reconcile and prune_checkpoints both subscribe to the maintenance topic; their subscriptions
# filter on the `task` attribute (shared/topology.json), so each job sets it as well as the body.
resource "google_cloud_scheduler_job" "maintenance" {
  for_each = local.maintenance_tasks

  project     = var.project_id
  region      = var.region
  name        = "${var.name_prefix}-${each.key}"
  description = "spotjobs: publish {\"task\":\"${each.key}\"} to ${google_pubsub_topic.topics["maintenance"].name}."
  schedule    = each.value.schedule
  time_zone   = each.value.time_zone
  paused      = each.value.paused

  pubsub_target {
    topic_name = google_pubsub_topic.topics["maintenance"].id
    data       = base64encode(jsonencode({ task = each.key }))
    # What the trigger subscriptions' filters match (attributes.task = "reconcile" / "prune").
    attributes = { task = each.key }
  }

  depends_on = [google_project_service.apis]
}

# Schedule triggers, retraining_schedules included (triggers.tf): each firing goes to on_trigger,
# which publishes one job request per firing window (request id trg-<name>-<window>), so a firing
# Cloud Scheduler delivers twice trains once. Same resource address and job names as before the
# triggers existed: an upgrade updates each job's target in place.
resource "google_cloud_scheduler_job" "retraining" {
  for_each = local.schedule_triggers

  project     = var.project_id
  region      = var.region
  name        = "${var.name_prefix}-retrain-${each.key}"
  description = each.value.description != "" ? each.value.description : "spotjobs: schedule trigger ${each.key}."
  schedule    = each.value.cron
  time_zone   = each.value.time_zone
  paused      = each.value.paused

  pubsub_target {
    topic_name = google_pubsub_topic.topics["triggers"].id
    data       = base64encode(jsonencode({ trigger = each.key }))
    # What on_trigger routes a firing by (shared/triggers/publishing.py TRIGGER_ATTRIBUTE).
    attributes = { spotjobs_trigger = each.key }
  }

  depends_on = [google_project_service.apis, google_storage_bucket_object.trigger_definitions]
}

# The retraining triggers' tick: closes every window due (on_trigger's own topic).
resource "google_cloud_scheduler_job" "triggers_tick" {
  project     = var.project_id
  region      = var.region
  name        = "${var.name_prefix}-triggers"
  description = "spotjobs: publish {\"task\":\"triggers\"} to ${google_pubsub_topic.topics["triggers"].name}: close due trigger windows."
  schedule    = var.maintenance_schedules.triggers.schedule
  time_zone   = var.maintenance_schedules.triggers.time_zone
  paused      = var.maintenance_schedules.triggers.paused

  pubsub_target {
    topic_name = google_pubsub_topic.topics["triggers"].id
    data       = base64encode(jsonencode({ task = "triggers" }))
    attributes = { task = "triggers" }
  }

  depends_on = [google_project_service.apis]
}
