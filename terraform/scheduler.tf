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

resource "google_cloud_scheduler_job" "retraining" {
  for_each = { for s in var.retraining_schedules : s.name => s }

  project     = var.project_id
  region      = var.region
  name        = "${var.name_prefix}-retrain-${each.key}"
  description = each.value.description != "" ? each.value.description : "spotjobs: recurring job request ${each.key}."
  schedule    = each.value.schedule
  time_zone   = each.value.time_zone
  paused      = each.value.paused

  pubsub_target {
    topic_name = google_pubsub_topic.topics["job_requests"].id
    # Re-encoded so the published body is canonical JSON whatever spacing the caller used.
    data = base64encode(jsonencode(jsondecode(each.value.request)))
  }

  depends_on = [google_project_service.apis]
}
