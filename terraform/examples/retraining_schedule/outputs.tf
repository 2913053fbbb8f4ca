output "job_requests_topic" {
  description = "Topic the nightly schedule publishes to (ad-hoc requests can too)."
  value       = module.spotjobs.topic_ids["job_requests"]
}

output "checkpoint_root" {
  description = "Where each request's outputs and checkpoints land."
  value       = module.spotjobs.checkpoint_root
}

output "training_service_account" {
  description = "Grant this account read access to the training data."
  value       = module.spotjobs.training_service_account
}
