output "topic_ids" {
  description = "Pub/Sub topic ids (projects/P/topics/T) keyed by topology key: job_requests, job_events, ops_alerts, maintenance, dead_letter, triggers."
  value       = { for key, topic in google_pubsub_topic.topics : key => topic.id }
}

output "topic_names" {
  description = "Pub/Sub topic names keyed by topology key."
  value       = { for key, topic in google_pubsub_topic.topics : key => topic.name }
}

output "trigger_subscriptions" {
  description = "Push subscription feeding each function, keyed by entry point."
  value       = { for fn, sub in google_pubsub_subscription.triggers : fn => sub.id }
}

output "reader_subscriptions" {
  description = "Pull subscriptions for operators (ops alerts, dead letters), keyed by name."
  value       = { for name, sub in google_pubsub_subscription.readers : name => sub.id }
}

output "function_names" {
  description = "Cloud Function names keyed by entry point."
  value       = { for fn, f in google_cloudfunctions2_function.functions : fn => f.name }
}

output "function_uris" {
  description = "Internal-only HTTPS endpoints of the functions (push targets), keyed by entry point."
  value       = { for fn, f in google_cloudfunctions2_function.functions : fn => f.service_config[0].uri }
}

output "state_bucket" {
  description = "Bucket holding the ledger (SPOTJOBS_STATE_BUCKET)."
  value       = google_storage_bucket.state.name
}

output "checkpoint_bucket" {
  description = "Bucket holding job outputs and checkpoints (SPOTJOBS_CHECKPOINT_BUCKET)."
  value       = google_storage_bucket.checkpoints.name
}

output "checkpoint_root" {
  description = "gs:// prefix under which every request's base output directory lives."
  value       = "gs://${google_storage_bucket.checkpoints.name}/${var.settings.checkpoint_prefix}/"
}

output "source_bucket" {
  description = "Bucket holding the function source zips."
  value       = google_storage_bucket.source.name
}

output "source_object" {
  description = "The source zip currently deployed (named by its MD5)."
  value       = google_storage_bucket_object.source.name
}

output "function_service_accounts" {
  description = "Runtime service account email of each function, keyed by entry point."
  value       = { for fn, sa in google_service_account.functions : fn => sa.email }
}

output "push_service_accounts" {
  description = "OIDC identity of each function's push subscription, keyed by entry point."
  value       = { for fn, sa in google_service_account.pushers : fn => sa.email }
}

output "training_service_account" {
  description = "Service account the Vertex AI jobs run as (put it in jobSpec.serviceAccount, or let spotjobs default to it)."
  value       = google_service_account.training.email
}

output "build_service_account" {
  description = "Cloud Build identity that builds the functions."
  value       = google_service_account.build.email
}

output "log_sink_writer_identity" {
  description = "Writer identity of the ml_job log sink (granted publisher on job-events)."
  value       = google_logging_project_sink.job_events.writer_identity
}

output "log_metrics" {
  description = "Log-based metric types, keyed by metric key."
  value       = { for key, m in google_logging_metric.events : key => "logging.googleapis.com/user/${m.name}" }
}

output "function_environment" {
  description = "Environment every function gets (shared/settings.py names), for reproducing production settings locally."
  value       = local.function_env
}

output "dashboard_url" {
  description = "The spotjobs ops dashboard in the Cloud console (every alert policy links to it)."
  value       = local.dashboard_url
}

output "retraining_triggers" {
  description = "Retraining trigger definitions stored in the state bucket (triggers/_definitions/<name>.json), keyed by name, with each gcs trigger's notification and each pubsub trigger's watched-topic subscription."
  value = {
    definitions   = { for name, object in google_storage_bucket_object.trigger_definitions : name => "gs://${object.bucket}/${object.name}" }
    notifications = { for key, n in google_storage_notification.triggers : key => n.notification_id }
    subscriptions = { for topic, sub in google_pubsub_subscription.watched_topics : topic => sub.id }
  }
}
