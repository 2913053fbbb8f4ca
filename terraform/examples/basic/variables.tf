variable "project_id" {
  description = "Project to deploy spotjobs into."
  type        = string
}

variable "region" {
  description = "Region for functions, buckets, schedules and Vertex AI jobs."
  type        = string
  default     = "us-central1"
}

variable "alert_email" {
  description = "Email address notified by the spotjobs alert policies. Null: no notification channel is created."
  type        = string
  default     = null
}

variable "job_request_publishers" {
  description = "IAM members allowed to publish job requests, e.g. [\"group:ml-team@example.com\"]."
  type        = list(string)
  default     = []
}

variable "ops_subscribers" {
  description = "IAM members allowed to pull ops alerts and dead letters."
  type        = list(string)
  default     = []
}

variable "allowed_image_prefixes" {
  description = "Registries/repositories job containers may come from, e.g. [\"us-central1-docker.pkg.dev/my-project/trainers/\"]. Empty: the code default."
  type        = list(string)
  default     = []
}
