# Vertex AI has no job-state notification: a project sink routes the job's own log lines
# (resource.type="ml_job") to job-events, where on_job_event treats each as a hint and reads the
# job from the API. reconcile (scheduled) catches anything the sink misses.

resource "google_logging_project_sink" "job_events" {
  project     = var.project_id
  name        = "${var.name_prefix}-job-events"
  description = "Vertex AI custom job state lines for spotjobs on_job_event (see var.job_event_log_filter)."
  destination = "pubsub.googleapis.com/${google_pubsub_topic.topics["job_events"].id}"
  filter      = trimspace(var.job_event_log_filter)

  # true: the writer is the project's Cloud Logging service agent
  # (service-PROJECT_NUMBER@gcp-sa-logging.iam.gserviceaccount.com), which is shared by every sink of
  # the project that uses a unique writer, not one identity per sink
  # (https://cloud.google.com/logging/docs/api/reference/rest/v2/sinks/create, uniqueWriterIdentity).
  # false would mean the legacy cloud-logs@system.gserviceaccount.com group. The grant below is on
  # the job-events topic only, but any other such sink in the project could then also route to it.
  unique_writer_identity = true
}

resource "google_pubsub_topic_iam_member" "sink_writer" {
  project = var.project_id
  topic   = google_pubsub_topic.topics["job_events"].name
  role    = "roles/pubsub.publisher"
  member  = google_logging_project_sink.job_events.writer_identity
}
