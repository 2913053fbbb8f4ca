# The smallest complete deployment: everything at module defaults, plus an email channel for the
# alert policies and the principals allowed to submit and to read alerts.

provider "google" {
  project = var.project_id
  region  = var.region
}

provider "google-beta" {
  project = var.project_id
  region  = var.region
}

resource "google_monitoring_notification_channel" "email" {
  count = var.alert_email == null ? 0 : 1

  project      = var.project_id
  display_name = "spotjobs on-call"
  type         = "email"
  labels = {
    email_address = var.alert_email
  }
}

module "spotjobs" {
  source = "../.."

  project_id = var.project_id
  region     = var.region

  job_request_publishers = var.job_request_publishers
  ops_subscribers        = var.ops_subscribers
  notification_channels  = google_monitoring_notification_channel.email[*].id

  settings = {
    # Spot training on A2/A3 (the machine families the Spot documentation lists for training).
    allowed_machine_families = ["a2", "a3"]
    allowed_image_prefixes   = length(var.allowed_image_prefixes) > 0 ? var.allowed_image_prefixes : null
  }
}
