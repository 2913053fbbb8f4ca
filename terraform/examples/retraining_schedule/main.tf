# spotjobs plus a nightly retraining: Cloud Scheduler publishes a bare CustomJob body to
# job-requests every night. A bare body's request id is the Pub/Sub message id, so each night is a
# new request (an envelope's fixed request_id would be de-duplicated after the first night).
# Preemptions, re-queues from the last checkpoint and checkpoint pruning are then spotjobs' job.

provider "google" {
  project = var.project_id
  region  = var.region
}

provider "google-beta" {
  project = var.project_id
  region  = var.region
}

locals {
  # Vertex AI CustomJob in REST JSON (camelCase, int64 as strings), exactly as documented for
  # projects.locations.customJobs.create. No baseOutputDirectory and no serviceAccount: spotjobs
  # sets the output directory under its checkpoint bucket and runs the job as its training
  # service account.
  nightly_custom_job = {
    displayName = "nightly-retrain"
    jobSpec = {
      workerPoolSpecs = [{
        machineSpec = {
          machineType      = "a2-highgpu-1g"
          acceleratorType  = "NVIDIA_TESLA_A100"
          acceleratorCount = 1
        }
        replicaCount = "1"
        diskSpec = {
          bootDiskType   = "pd-ssd"
          bootDiskSizeGb = 100
        }
        containerSpec = {
          imageUri = var.trainer_image
          args     = ["--epochs=20", "--checkpoint-every-steps=500"]
        }
      }]
      scheduling = {
        strategy = "SPOT"
        timeout  = "86400s"
      }
    }
  }
  trainer_repository = "${join("/", slice(split("/", var.trainer_image), 0, 3))}/"
}

module "spotjobs" {
  source = "../.."

  project_id = var.project_id
  region     = var.region

  settings = {
    allowed_machine_families = ["a2", "a3"]
    allowed_image_prefixes   = [local.trainer_repository]
  }

  maintenance_schedules = {
    reconcile = { schedule = "*/5 * * * *" }
    prune     = { schedule = "30 * * * *" }
  }

  retraining_schedules = [
    {
      name        = "nightly"
      schedule    = var.retrain_schedule
      time_zone   = var.time_zone
      description = "Nightly retraining on Spot A100s."
      request     = jsonencode(local.nightly_custom_job)
    },
  ]
}
