# Vertex AI has no job-state notification: a project sink routes the job's own log lines
# (resource.type="ml_job") to job-events, where on_job_event treats each as a hint and reads the
# job from the API. reconcile (scheduled) catches anything the sink misses.

resource "google_logging_project_sink" "job_events" {
  project     = var.project_id
  name        = "${var.name_prefix}-job-events"
  description = "Vertex AI custom job state lines for spotjobs on_job_event (see var.job_event_log_filter)."
  destination = "pubsub.googleapis.com/${google_pubsub_topic.topics["job_events"].id}"
  filter      = trimspace(var.job_event_log_filter)

  # A dedicated writer identity for this sink (service-...@gcp-sa-logging), granted publish on the
  # one topic below, instead of the shared project logging identity.
  unique_writer_identity = true
}

resource "google_pubsub_topic_iam_member" "sink_writer" {
  project = var.project_id
  topic   = google_pubsub_topic.topics["job_events"].name
  role    = "roles/pubsub.publisher"
  member  = google_logging_project_sink.job_events.writer_identity
}
