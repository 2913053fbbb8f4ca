variable "project_id" {
  description = "Project to deploy spotjobs into."
  type        = string
}

variable "region" {
  description = "Region for functions, buckets, schedules and Vertex AI jobs."
  type        = string
  default     = "us-central1"
}

variable "trainer_image" {
  description = "Container image of the trainer, e.g. us-central1-docker.pkg.dev/my-project/trainers/train:2026-11-01. It must resume from AIP_CHECKPOINT_DIR."
  type        = string
}

variable "retrain_schedule" {
  description = "Cron schedule of the nightly retraining."
  type        = string
  default     = "0 2 * * *"
}

variable "time_zone" {
  description = "IANA time zone of the schedule."
  type        = string
  default     = "Europe/Berlin"
}
