output "job_requests_topic" {
  description = "Publish job requests here."
  value       = module.spotjobs.topic_ids["job_requests"]
}

output "topic_ids" {
  description = "All spotjobs topics."
  value       = module.spotjobs.topic_ids
}

output "function_names" {
  description = "Deployed Cloud Functions."
  value       = module.spotjobs.function_names
}

output "state_bucket" {
  description = "Ledger bucket."
  value       = module.spotjobs.state_bucket
}

output "checkpoint_bucket" {
  description = "Checkpoint bucket."
  value       = module.spotjobs.checkpoint_bucket
}

output "training_service_account" {
  description = "Service account the training jobs run as."
  value       = module.spotjobs.training_service_account
}

output "function_service_accounts" {
  description = "Runtime identity of each function."
  value       = module.spotjobs.function_service_accounts
}
