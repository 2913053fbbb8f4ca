# Three buckets, all uniform bucket-level access (IAM only, no ACLs) with public access prevention
# enforced. Versioning and soft delete are chosen per bucket, on purpose:
#
# | bucket      | holds                                   | versioning | soft delete          |
# |-------------|-----------------------------------------|------------|----------------------|
# | state       | the ledger (tiny JSON, CAS-updated)     | on         | GCS default (7 days) |
# | checkpoints | training outputs, pruned continuously   | OFF        | OFF by default       |
# | source      | function source zips, named by hash     | on         | GCS default          |

locals {
  bucket_location = upper(coalesce(var.buckets.location, var.region))
  bucket_names = {
    state       = coalesce(var.buckets.state_name, "${var.project_id}-${var.name_prefix}-state")
    checkpoints = coalesce(var.buckets.checkpoint_name, "${var.project_id}-${var.name_prefix}-checkpoints")
    source      = coalesce(var.buckets.source_name, "${var.project_id}-${var.name_prefix}-source")
  }
}

# The ledger: gs://<state>/requests/<request_id>.json, every write guarded by if_generation_match.
resource "google_storage_bucket" "state" {
  #checkov:skip=CKV_GCP_62:Usage/storage access logs are superseded by Cloud Audit Logs; enable DATA_READ/DATA_WRITE audit logs for storage.googleapis.com org-wide if required.
  project       = var.project_id
  name          = local.bucket_names.state
  location      = local.bucket_location
  storage_class = "STANDARD"
  labels        = local.labels
  force_destroy = var.buckets.force_destroy

  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"

  # On: every CAS write supersedes a generation; keeping them a while lets an operator see what a
  # bad release did to a request. Noncurrent generations are deleted by the rule below. Versioning
  # does not interfere with if_generation_match (preconditions test the live generation).
  versioning {
    enabled = true
  }

  lifecycle_rule {
    condition {
      days_since_noncurrent_time = var.state_noncurrent_version_retention_days
      with_state                 = "ARCHIVED"
    }
    action {
      type = "Delete"
    }
  }

  # What grows with history goes by lifecycle rule where its age says when nothing needs it any
  # more (docs/ARCHITECTURE.md, "What the state bucket keeps"; the rules:
  # https://cloud.google.com/storage/docs/lifecycle). Every age exceeds the longest time the object
  # is needed. Pub/Sub keeps a message at most 31 days, the horizon of several below.

  # The pacing slots (shared/pacing.py): one empty object per create, never read once past.
  lifecycle_rule {
    condition {
      age            = 1
      matches_prefix = ["pacing/slots/"]
    }
    action {
      type = "Delete"
    }
  }

  # A bare body's dedupe windows (shared/ledger/dedupe.py): each write sets the document's
  # Custom-Time to the end of its newest window; no delivery names a window 32 days after its end
  # (HORIZON_SECONDS: every window would be dropped by the next write anyway). A day more.
  lifecycle_rule {
    condition {
      days_since_custom_time = 33
      matches_prefix         = ["dedupe/"]
    }
    action {
      type = "Delete"
    }
  }

  # Redrive claims (spotjobs/deadletters.py): one per dead letter redriven, needed while that dead
  # letter can still be pulled (the dead-letter subscription keeps it 7 days, a topic 31 at most).
  lifecycle_rule {
    condition {
      age            = 32
      matches_prefix = ["deadletters/redriven/"]
    }
    action {
      type = "Delete"
    }
  }

  # Preemption lines of jobs not indexed yet (shared/observe.py): an adoption counts and removes
  # its job's within minutes; a foreign job's are never counted, and a line older than a day is
  # stale anyway (SPOTJOBS_MAX_EVENT_AGE_SECONDS). A day more.
  lifecycle_rule {
    condition {
      age            = 2
      matches_prefix = ["unindexed/"]
    }
    action {
      type = "Delete"
    }
  }

  # Rejection notes (shared/redeliveries.py): one per job-requests message rejected, needed while
  # Pub/Sub may deliver that message again (a subscription keeps a message 31 days at most).
  lifecycle_rule {
    condition {
      age            = 32
      matches_prefix = ["rejections/"]
    }
    action {
      type = "Delete"
    }
  }

  # A region's burst document (shared/pacing.py): the drainer that finds its line empty removes
  # it; this is the backstop. Needed while a burst drains (a week at 58 a minute is over half a
  # million requests); if one lasts longer, the next drainer alerts quota_limited once more.
  lifecycle_rule {
    condition {
      age            = 7
      matches_prefix = ["pacing/"]
      matches_suffix = ["/burst.json"]
    }
    action {
      type = "Delete"
    }
  }

  # Fleet observations (shared/fleet/store.py): one empty object per fact a job told about Spot
  # capacity; the capacity estimate reads the last 7 days (WINDOW_SECONDS). A day more.
  lifecycle_rule {
    condition {
      age            = 8
      matches_prefix = ["fleet/"]
    }
    action {
      type = "Delete"
    }
  }

  # The alerts log (shared/deciding/alert_log.py): one object per ops alert the outbox published,
  # for `spotjobs dashboard`'s Alerts page (it shows a week); kept LOG_DAYS (30), a day more.
  lifecycle_rule {
    condition {
      age            = 31
      matches_prefix = ["alerts/"]
    }
    action {
      type = "Delete"
    }
  }

  # Ledger records removed by the retention sweep, archived first (shared/ledger/retention.py):
  # nothing reads them; they are for the operator, for var.ledger_archive_retention_days.
  lifecycle_rule {
    condition {
      age            = var.ledger_archive_retention_days
      matches_prefix = ["archive/"]
    }
    action {
      type = "Delete"
    }
  }

  depends_on = [google_project_service.apis]
}

# Checkpoints and other training outputs: gs://<checkpoints>/<checkpoint_prefix>/<request_id>/
# {checkpoints,model,logs}/ (AIP_CHECKPOINT_DIR, AIP_MODEL_DIR, AIP_TENSORBOARD_LOG_DIR).
resource "google_storage_bucket" "checkpoints" {
  #checkov:skip=CKV_GCP_62:Usage/storage access logs are superseded by Cloud Audit Logs; enable DATA_READ/DATA_WRITE audit logs for storage.googleapis.com org-wide if required.
  #checkov:skip=CKV_GCP_78:Versioning is deliberately off: noncurrent versions of pruned checkpoints would stay billable, which is exactly what prune_checkpoints exists to stop.
  project       = var.project_id
  name          = local.bucket_names.checkpoints
  location      = local.bucket_location
  storage_class = "STANDARD"
  labels        = local.labels
  force_destroy = var.buckets.force_destroy

  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"

  versioning {
    enabled = false
  }

  # Soft-deleted objects are billed at the same rate as live objects for the whole retention
  # period. GCS turns soft delete on for 7 days by default, so every checkpoint prune_checkpoints
  # deletes would keep costing for a week (checkpoints are large and rewritten every few hours).
  # 0 turns it off; set var.checkpoint_soft_delete_retention_seconds (7-90 days) to buy
  # undelete protection at that price.
  soft_delete_policy {
    retention_duration_seconds = var.checkpoint_soft_delete_retention_seconds
  }

  # Backstop, always on: a Spot VM reclaimed in the middle of an XML multipart upload leaves parts
  # that are billed until aborted.
  lifecycle_rule {
    condition {
      age = 1
    }
    action {
      type = "AbortIncompleteMultipartUpload"
    }
  }

  # Backstop, optional: delete anything older than N days under the managed prefix even if pruning
  # never ran. Off by default because the same prefix holds finished models (see variables.tf).
  dynamic "lifecycle_rule" {
    for_each = var.checkpoint_delete_after_days == null ? [] : [var.checkpoint_delete_after_days]
    content {
      condition {
        age            = lifecycle_rule.value
        matches_prefix = ["${var.settings.checkpoint_prefix}/"]
      }
      action {
        type = "Delete"
      }
    }
  }

  depends_on = [google_project_service.apis]
}

# Function source archives, one object per distinct zip (named by its MD5), so a code change is
# a new object name and therefore a new build; an unchanged tree is a no-op plan.
resource "google_storage_bucket" "source" {
  #checkov:skip=CKV_GCP_62:Usage/storage access logs are superseded by Cloud Audit Logs; enable DATA_READ/DATA_WRITE audit logs for storage.googleapis.com org-wide if required.
  project       = var.project_id
  name          = local.bucket_names.source
  location      = local.bucket_location
  storage_class = "STANDARD"
  labels        = local.labels
  force_destroy = var.buckets.force_destroy

  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"

  # Objects are immutable (content-addressed names); versioning only guards against an operator
  # overwriting or deleting the zip a deployed revision was built from.
  versioning {
    enabled = true
  }

  lifecycle_rule {
    condition {
      days_since_noncurrent_time = 30
      with_state                 = "ARCHIVED"
    }
    action {
      type = "Delete"
    }
  }

  depends_on = [google_project_service.apis]
}
