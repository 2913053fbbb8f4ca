# Identities and least-privilege grants. No primitive roles, no project-wide storage or Pub/Sub
# roles, no public members. Grants sit on the narrowest resource that supports IAM (bucket, topic,
# subscription, service account, Cloud Run service); only Vertex AI and Cloud Logging need the
# project level, and Vertex gets custom roles holding exactly the customJobs permissions used.
#
# | identity             | may                                                                   |
# |----------------------|-----------------------------------------------------------------------|
# | fn-submit            | ledger r/w (and an active marker's status: active/, metadata only); create/get/list/cancel custom jobs; actAs training SA; publish ops-alerts, job-requests (the waiting line's hand-over); list/read checkpoints |
# | fn-events, fn-reconcile | ledger r/w (and active markers' status); get/list/cancel custom jobs; publish job-requests, ops-alerts, maintenance; list/read checkpoints |
# | fn-prune             | ledger read, write its cursor and its alerts log entries; list/read/delete checkpoints; publish ops-alerts |
# | fn-trigger           | state bucket under triggers/ only (no ledger); create/get manifests under the state bucket's manifests/; publish job-requests, ops-alerts |
# | push-<fn>            | invoke that one function (OIDC identity of its push subscription)      |
# | training             | object admin under the checkpoint prefix only; read the state bucket's manifests/ only; write logs |
# | var.cancellers       | read and compare-and-swap ledger records (requests/ of the state bucket), note a status on its active marker (active/, metadata only): `spotjobs cancel` |
# | build                | write build logs; push to the functions' Artifact Registry repo; get the source zips (storage.objects.get) |

locals {
  # What each entry point does (topology keys for topics). An entry point added to
  # topology.json must be added here too, or the plan fails on the missing key: deliberately.
  function_access = {
    submit_job = {
      ledger       = "read_write"
      state_prefix = null
      vertex       = "submitter"
      checkpoint   = "read" # a timeout without a commit heard: the folder (shared/deciding/folder_progress.py)
      manifests    = false
      publishes    = ["job_requests", "ops_alerts"] # job_requests: the quota line's hand-over (shared/pacing.py)
      act_as       = true
    }
    on_job_event = {
      ledger       = "read_write"
      state_prefix = null
      vertex       = "controller"
      checkpoint   = "read" # a timeout without a commit heard: the folder (shared/deciding/folder_progress.py)
      manifests    = false
      publishes    = ["job_requests", "ops_alerts", "maintenance"]
      act_as       = false
    }
    reconcile = {
      ledger       = "read_write"
      state_prefix = null
      vertex       = "controller"
      checkpoint   = "read" # a timeout without a commit heard: the folder (shared/deciding/folder_progress.py)
      manifests    = false
      publishes    = ["job_requests", "ops_alerts", "maintenance"]
      act_as       = false
    }
    prune_checkpoints = {
      # Reads the ledger; writes only its resume cursor (shared/ledger/store.py cursor_path,
      # maintenance/prune-cursor.json) in the state bucket.
      ledger       = "read"
      state_prefix = "maintenance/"
      vertex       = null
      checkpoint   = "prune"
      manifests    = false
      publishes    = ["ops_alerts"]
      act_as       = false
    }
    on_trigger = {
      # Never reads the ledger: its state is triggers/ in the state bucket (definitions, windows,
      # members), and each window's manifest, written once into the state bucket's manifests/
      # (which the training account reads, and no job may write). It publishes the request and
      # trigger_failed alerts. The watched data buckets are not read: notifications carry the
      # object metadata.
      ledger       = "none"
      state_prefix = "triggers/"
      vertex       = null
      checkpoint   = null
      manifests    = true
      publishes    = ["job_requests", "ops_alerts"]
      act_as       = false
    }
  }
  access = { for fn in keys(local.routes) : fn => local.function_access[fn] }

  publish_grants = merge([
    for fn, a in local.access : { for topic in a.publishes : "${fn} ${topic}" => { fn = fn, topic = topic } }
  ]...)

  custom_role_prefix = replace(var.name_prefix, "-", "_")
  manifests_prefix   = "manifests/" # shared/requests/envelope.py MANIFESTS_PREFIX

  # Where the ledger keeps one record per request, and its active index (shared/ledger/store.py).
  ledger_records_prefix = "requests/"
  active_index_prefix   = "active/"
  # One entry per ops alert the outbox publishes (shared/deciding/alert_log.py).
  alerts_log_prefix = "alerts/"
}

# ---------------------------------------------------------------------------------------------
# Service accounts
# ---------------------------------------------------------------------------------------------

resource "google_service_account" "functions" {
  for_each = local.routes

  project      = var.project_id
  account_id   = "${var.name_prefix}-fn-${local.function_short[each.key]}"
  display_name = "spotjobs ${each.key} (runtime)"
  description  = "Runtime identity of the ${local.function_names[each.key]} Cloud Function."

  depends_on = [google_project_service.apis]
}

resource "google_service_account" "pushers" {
  for_each = local.routes

  project      = var.project_id
  account_id   = "${var.name_prefix}-push-${local.function_short[each.key]}"
  display_name = "spotjobs ${each.key} (push)"
  description  = "OIDC identity of the ${each.value.subscription} push subscription; may invoke ${local.function_names[each.key]} only."

  depends_on = [google_project_service.apis]
}

resource "google_service_account" "training" {
  project      = var.project_id
  account_id   = "${var.name_prefix}-training"
  display_name = "spotjobs training jobs"
  description  = "Identity of the Vertex AI CustomJobs spotjobs submits (jobSpec.serviceAccount)."

  depends_on = [google_project_service.apis]
}

# A request class's own identity (var.training_classes): its jobs write only its class's folders.
resource "google_service_account" "training_class" {
  for_each = var.training_classes

  project      = var.project_id
  account_id   = "${var.name_prefix}-tc-${each.key}"
  display_name = "spotjobs training jobs: ${each.key}"
  description  = "Identity of the CustomJobs of requests whose id starts with ${each.value}."

  depends_on = [google_project_service.apis]
}

resource "google_service_account" "build" {
  project      = var.project_id
  account_id   = "${var.name_prefix}-build"
  display_name = "spotjobs function builds"
  description  = "Cloud Build identity for building the spotjobs functions (instead of the default compute/Cloud Build service account)."

  depends_on = [google_project_service.apis]
}

# ---------------------------------------------------------------------------------------------
# Custom roles: the predefined ones are broader than needed.
# ---------------------------------------------------------------------------------------------

# roles/aiplatform.user would allow every Vertex AI operation (endpoints, datasets, notebooks...).
# cancel: submit_job cancels a second job it finds for an attempt the ledger records with another
# job (shared/submit.py _cancel_unrecorded); without it the duplicate keeps training and billing.
# customJobs.cancel is the permission the cancel method requires:
# https://cloud.google.com/vertex-ai/docs/reference/rest/v1/projects.locations.customJobs/cancel
# tests/unit/test_terraform_vertex_iam.py checks each role against the methods the code calls.
resource "google_project_iam_custom_role" "job_submitter" {
  project     = var.project_id
  role_id     = "${local.custom_role_prefix}_jobSubmitter"
  title       = "spotjobs job submitter"
  description = "Create, get, list and cancel Vertex AI CustomJobs (submit_job; cancel only for a duplicate job of one attempt)."
  permissions = [
    "aiplatform.customJobs.cancel",
    "aiplatform.customJobs.create",
    "aiplatform.customJobs.get",
    "aiplatform.customJobs.list",
  ]

  depends_on = [google_project_service.apis]
}

resource "google_project_iam_custom_role" "job_controller" {
  project     = var.project_id
  role_id     = "${local.custom_role_prefix}_jobController"
  title       = "spotjobs job controller"
  description = "Get, list and cancel Vertex AI CustomJobs (on_job_event, reconcile); cannot create jobs."
  permissions = [
    "aiplatform.customJobs.cancel",
    "aiplatform.customJobs.get",
    "aiplatform.customJobs.list",
  ]

  depends_on = [google_project_service.apis]
}

# roles/storage.objectUser also grants update/restore/multipart and managed-folder permissions.
# Overwriting an object (every compare-and-swap write of a ledger document) needs delete as well as
# create.
resource "google_project_iam_custom_role" "ledger_writer" {
  project     = var.project_id
  role_id     = "${local.custom_role_prefix}_ledgerWriter"
  title       = "spotjobs ledger writer"
  description = "Read, list, create and overwrite ledger objects (granted on the state bucket only)."
  permissions = [
    "storage.objects.create",
    "storage.objects.delete",
    "storage.objects.get",
    "storage.objects.list",
  ]

  depends_on = [google_project_service.apis]
}

# A write that changes a record's status notes it on the request's active marker with a metadata
# patch (shared/ledger/store.py): update only, no create, delete or read; on active/ only.
resource "google_project_iam_custom_role" "marker_noter" {
  project     = var.project_id
  role_id     = "${local.custom_role_prefix}_markerNoter"
  title       = "spotjobs active marker status noter"
  description = "Patch object metadata (granted on the state bucket, its active/ prefix only): a marker's status."
  permissions = [
    "storage.objects.update",
  ]

  depends_on = [google_project_service.apis]
}

# roles/storage.objectAdmin would also let the pruner write checkpoints. get is needed: the layout
# rules (kit/src/spotjobs_kit/layout.py) read a few small files frameworks complete checkpoints
# with (TensorFlow's `checkpoint` index, DeepSpeed's `latest`, Orbax's `_CHECKPOINT_METADATA` of a
# folder without a marker, the kit's `COMMITTED`, whose listed files must be there); everything
# else the pruner learns from listings.
resource "google_project_iam_custom_role" "checkpoint_pruner" {
  project     = var.project_id
  role_id     = "${local.custom_role_prefix}_checkpointPruner"
  title       = "spotjobs checkpoint pruner"
  description = "List, read and delete objects (granted on the checkpoint bucket only); cannot create or overwrite."
  permissions = [
    "storage.objects.delete",
    "storage.objects.get",
    "storage.objects.list",
  ]

  depends_on = [google_project_service.apis]
}

# on_trigger's manifests: written once (if_generation_match=0 needs create only) and read back.
resource "google_project_iam_custom_role" "manifest_writer" {
  project     = var.project_id
  role_id     = "${local.custom_role_prefix}_manifestWriter"
  title       = "spotjobs trigger manifest writer"
  description = "Create and read objects (granted on the state bucket, its manifests/ prefix only); cannot overwrite, delete or list."
  permissions = [
    "storage.objects.create",
    "storage.objects.get",
  ]

  depends_on = [google_project_service.apis]
}

# Training jobs read their trigger's manifest: get only (roles/storage.objectViewer would add list).
resource "google_project_iam_custom_role" "manifest_reader" {
  project     = var.project_id
  role_id     = "${local.custom_role_prefix}_manifestReader"
  title       = "spotjobs trigger manifest reader"
  description = "Read (get) objects: trigger manifests, for the training service account, on the state bucket's manifests/ only."
  permissions = [
    "storage.objects.get",
  ]

  depends_on = [google_project_service.apis]
}

# The build reads the function source and nothing else in Cloud Storage. Google's page on the
# Cloud Run functions build service account asks for roles/run.builder on the project
# (https://cloud.google.com/run/docs/configuring/services/build-service-account); of that role's
# permissions (https://cloud.google.com/run/docs/reference/iam/roles) the one for reading the
# source is storage.objects.get, granted here on the two buckets the source is read from only
# (roles/storage.objectViewer would add list and managed-folder reads).
resource "google_project_iam_custom_role" "build_source_reader" {
  project     = var.project_id
  role_id     = "${local.custom_role_prefix}_buildSourceReader"
  title       = "spotjobs build source reader"
  description = "Read (get) objects: the function source, for the build service account, on the source buckets only."
  permissions = [
    "storage.objects.get",
  ]

  depends_on = [google_project_service.apis]
}

# ---------------------------------------------------------------------------------------------
# Function grants
# ---------------------------------------------------------------------------------------------

resource "google_storage_bucket_iam_member" "ledger" {
  for_each = { for fn, a in local.access : fn => a if a.ledger != "none" }

  bucket = google_storage_bucket.state.name
  role   = each.value.ledger == "read_write" ? google_project_iam_custom_role.ledger_writer.id : "roles/storage.objectViewer"
  member = "serviceAccount:${google_service_account.functions[each.key].email}"
}

# A function that keeps state of its own (and does not write the ledger) gets write access to that
# prefix only. Listing is authorised on the bucket, not on an object, so for a function without
# ledger read access (on_trigger) the condition also admits a list whose prefix lies under its
# own (the request attribute storage.googleapis.com/objectListPrefix of Cloud Storage's IAM
# conditions).
resource "google_storage_bucket_iam_member" "state_prefix_writer" {
  for_each = { for fn, a in local.access : fn => a if a.ledger != "read_write" && a.state_prefix != null }

  bucket = google_storage_bucket.state.name
  role   = google_project_iam_custom_role.ledger_writer.id
  member = "serviceAccount:${google_service_account.functions[each.key].email}"

  condition {
    title       = "objects under ${each.value.state_prefix}"
    description = "${each.key} may create and overwrite only its own objects in the state bucket."
    expression = join(" || ", concat(
      ["resource.name.startsWith(\"projects/_/buckets/${google_storage_bucket.state.name}/objects/${each.value.state_prefix}\")"],
      each.value.ledger == "none" ? ["api.getAttribute(\"storage.googleapis.com/objectListPrefix\", \"\").startsWith(\"${each.value.state_prefix}\")"] : [],
    ))
  }
}

# People who may cancel requests (`spotjobs cancel` writes the cancel into the request's ledger
# record under compare-and-swap; the functions then cancel the job): the ledger writer role on the
# state bucket's requests/ prefix only, where listing is allowed for lists under that prefix (a read
# of a record that does not exist must answer 404). Nothing at Vertex, no other object.
resource "google_storage_bucket_iam_member" "cancellers" {
  for_each = toset(var.cancellers)

  bucket = google_storage_bucket.state.name
  role   = google_project_iam_custom_role.ledger_writer.id
  member = each.value

  condition {
    title       = "ledger records"
    description = "spotjobs cancel: read and compare-and-swap ledger records (requests/) only."
    expression = join(" || ", [
      "resource.name.startsWith(\"projects/_/buckets/${google_storage_bucket.state.name}/objects/${local.ledger_records_prefix}\")",
      "api.getAttribute(\"storage.googleapis.com/objectListPrefix\", \"\").startsWith(\"${local.ledger_records_prefix}\")",
    ])
  }
}

resource "google_storage_bucket_iam_member" "marker_noter" {
  for_each = { for fn, a in local.access : fn => a if a.ledger == "read_write" }

  bucket = google_storage_bucket.state.name
  role   = google_project_iam_custom_role.marker_noter.id
  member = "serviceAccount:${google_service_account.functions[each.key].email}"

  condition {
    title       = "active markers"
    description = "${each.key}: note a record's new status on its active marker (active/) only."
    expression  = "resource.name.startsWith(\"projects/_/buckets/${google_storage_bucket.state.name}/objects/${local.active_index_prefix}\")"
  }
}

resource "google_storage_bucket_iam_member" "cancellers_note_marker_status" {
  for_each = toset(var.cancellers)

  bucket = google_storage_bucket.state.name
  role   = google_project_iam_custom_role.marker_noter.id
  member = each.value

  condition {
    title       = "active markers"
    description = "spotjobs cancel: note a record's new status on its active marker (active/) only."
    expression  = "resource.name.startsWith(\"projects/_/buckets/${google_storage_bucket.state.name}/objects/${local.active_index_prefix}\")"
  }
}

# The alerts log (shared/deciding/alert_log.py): whoever publishes an ops alert through the outbox
# writes its entry under alerts/ first. The ledger's writers may already; a function that only
# reads the ledger and publishes alerts (prune_checkpoints: its prune report) may create and
# overwrite objects under alerts/ only.
resource "google_storage_bucket_iam_member" "alerts_log_writer" {
  for_each = { for fn, a in local.access : fn => a if a.ledger == "read" && contains(a.publishes, "ops_alerts") }

  bucket = google_storage_bucket.state.name
  role   = google_project_iam_custom_role.ledger_writer.id
  member = "serviceAccount:${google_service_account.functions[each.key].email}"

  condition {
    title       = "the alerts log"
    description = "${each.key} may create and overwrite only alerts log entries (alerts/) in the state bucket."
    expression  = "resource.name.startsWith(\"projects/_/buckets/${google_storage_bucket.state.name}/objects/${local.alerts_log_prefix}\")"
  }
}

# on_trigger writes each window's manifest once (create, if absent) into the state bucket's
# manifests/ (shared/requests/envelope.py manifest_path), where no job may write, and reads it
# back when a crashed close is resumed: create and get, under manifests/ only.
resource "google_storage_bucket_iam_member" "manifest_writer" {
  for_each = { for fn, a in local.access : fn => a if a.manifests }

  bucket = google_storage_bucket.state.name
  role   = google_project_iam_custom_role.manifest_writer.id
  member = "serviceAccount:${google_service_account.functions[each.key].email}"

  condition {
    title       = "trigger manifests"
    description = "${each.key} may create and read the trigger requests' manifests only."
    expression  = "resource.name.startsWith(\"projects/_/buckets/${google_storage_bucket.state.name}/objects/${local.manifests_prefix}\")"
  }
}

# The deciders read an attempt's checkpoint folder (listings, the kit's run objects and markers)
# before failing a timeout without progress: list and get, nothing more.
resource "google_project_iam_custom_role" "checkpoint_reader" {
  project     = var.project_id
  role_id     = "${local.custom_role_prefix}_checkpointReader"
  title       = "spotjobs checkpoint reader"
  description = "List and read objects (granted on the checkpoint bucket only); cannot create, overwrite or delete."
  permissions = [
    "storage.objects.get",
    "storage.objects.list",
  ]

  depends_on = [google_project_service.apis]
}

resource "google_storage_bucket_iam_member" "checkpoint_reader" {
  for_each = { for fn, a in local.access : fn => a if a.checkpoint == "read" }

  bucket = google_storage_bucket.checkpoints.name
  role   = google_project_iam_custom_role.checkpoint_reader.id
  member = "serviceAccount:${google_service_account.functions[each.key].email}"
}

resource "google_storage_bucket_iam_member" "checkpoint_pruner" {
  for_each = { for fn, a in local.access : fn => a if a.checkpoint == "prune" }

  bucket = google_storage_bucket.checkpoints.name
  role   = google_project_iam_custom_role.checkpoint_pruner.id
  member = "serviceAccount:${google_service_account.functions[each.key].email}"
}

# Vertex AI has no per-job IAM: custom jobs are authorised at the project level.
resource "google_project_iam_member" "vertex" {
  for_each = { for fn, a in local.access : fn => a if a.vertex != null }

  project = var.project_id
  role    = each.value.vertex == "submitter" ? google_project_iam_custom_role.job_submitter.id : google_project_iam_custom_role.job_controller.id
  member  = "serviceAccount:${google_service_account.functions[each.key].email}"
}

# Creating a job that runs as the training service account requires actAs on that account only.
resource "google_service_account_iam_member" "submit_acts_as_training" {
  for_each = { for fn, a in local.access : fn => a if a.act_as }

  service_account_id = google_service_account.training.name
  role               = "roles/iam.serviceAccountUser"
  member             = "serviceAccount:${google_service_account.functions[each.key].email}"
}

# ... and on each class's account, for its class's requests.
resource "google_service_account_iam_member" "submit_acts_as_training_class" {
  for_each = {
    for pair in setproduct([for fn, a in local.access : fn if a.act_as], keys(var.training_classes)) :
    "${pair[0]}/${pair[1]}" => { fn = pair[0], class = pair[1] }
  }

  service_account_id = google_service_account.training_class[each.value.class].name
  role               = "roles/iam.serviceAccountUser"
  member             = "serviceAccount:${google_service_account.functions[each.value.fn].email}"
}

resource "google_pubsub_topic_iam_member" "function_publishers" {
  for_each = local.publish_grants

  project = var.project_id
  topic   = google_pubsub_topic.topics[each.value.topic].name
  role    = "roles/pubsub.publisher"
  member  = "serviceAccount:${google_service_account.functions[each.value.fn].email}"
}

# Pub/Sub mints the push subscriptions' OIDC tokens as the push identities. Needed explicitly for
# projects whose Pub/Sub service agent predates April 2021; granted on each push account only
# (never project-wide Token Creator).
resource "google_service_account_iam_member" "pubsub_mints_push_tokens" {
  for_each = local.routes

  service_account_id = google_service_account.pushers[each.key].name
  role               = "roles/iam.serviceAccountTokenCreator"
  member             = local.pubsub_service_agent
}

# ---------------------------------------------------------------------------------------------
# Training jobs
# ---------------------------------------------------------------------------------------------

# Jobs write under the checkpoint prefix only (every request's output folder is there,
# Settings.output_dir_for): not the rest of the bucket. Cloud Storage evaluates a condition on the
# object's name (https://cloud.google.com/iam/docs/conditions-resource-attributes); a listing is
# authorised on the bucket, so the second clause admits listings of prefixes under it (the request
# attribute storage.googleapis.com/objectListPrefix, as state_prefix_writer does). One identity per
# request is not possible (at most 20 bindings of one role and member with different conditions:
# https://cloud.google.com/iam/quotas), so jobs of different requests still share this prefix:
# what keeps a job from speaking for another is the kit's per-attempt key (docs/security.md).
# A request class (var.training_classes) gets its own account on its own id prefix, which the
# shared account may not touch: jobs of different classes cannot write each other's folders.
# CEL's `!` and `&&` are documented operators of IAM conditions
# (https://cloud.google.com/iam/docs/conditions-overview#cel).
locals {
  checkpoint_objects = "projects/_/buckets/${google_storage_bucket.checkpoints.name}/objects/${var.settings.checkpoint_prefix}/"
  list_prefix        = "api.getAttribute(\"storage.googleapis.com/objectListPrefix\", \"\")"
  class_exclusions = {
    objects = join("", [for prefix in values(var.training_classes) : " && !resource.name.startsWith(\"${local.checkpoint_objects}${prefix}\")"])
    listing = join("", [for prefix in values(var.training_classes) : " && !${local.list_prefix}.startsWith(\"${var.settings.checkpoint_prefix}/${prefix}\")"])
  }
}

resource "google_storage_bucket_iam_member" "training_checkpoints" {
  bucket = google_storage_bucket.checkpoints.name
  role   = "roles/storage.objectAdmin"
  member = "serviceAccount:${google_service_account.training.email}"

  condition {
    title       = "the checkpoint prefix"
    description = "Training jobs may read and write objects under ${var.settings.checkpoint_prefix}/ only, outside the training classes' prefixes."
    expression = join(" || ", [
      "(resource.name.startsWith(\"${local.checkpoint_objects}\")${local.class_exclusions.objects})",
      "(${local.list_prefix}.startsWith(\"${var.settings.checkpoint_prefix}/\")${local.class_exclusions.listing})",
    ])
  }
}

resource "google_storage_bucket_iam_member" "training_class_checkpoints" {
  for_each = var.training_classes

  bucket = google_storage_bucket.checkpoints.name
  role   = "roles/storage.objectAdmin"
  member = "serviceAccount:${google_service_account.training_class[each.key].email}"

  condition {
    title       = "the ${each.key} class's folders"
    description = "Jobs of requests whose id starts with ${each.value} may read and write their folders only."
    expression = join(" || ", [
      "resource.name.startsWith(\"${local.checkpoint_objects}${each.value}\")",
      "${local.list_prefix}.startsWith(\"${var.settings.checkpoint_prefix}/${each.value}\")",
    ])
  }
}

# A trigger's request reads its window's manifest (SPOTJOBS_MANIFEST_URI) from the state bucket:
# get, under manifests/ only (no listing, no write; nothing else of the state bucket).
resource "google_storage_bucket_iam_member" "training_reads_manifests" {
  bucket = google_storage_bucket.state.name
  role   = google_project_iam_custom_role.manifest_reader.id
  member = "serviceAccount:${google_service_account.training.email}"

  condition {
    title       = "trigger manifests"
    description = "Training jobs may read the trigger requests' manifests only."
    expression  = "resource.name.startsWith(\"projects/_/buckets/${google_storage_bucket.state.name}/objects/${local.manifests_prefix}\")"
  }
}

resource "google_project_iam_member" "training_log_writer" {
  project = var.project_id
  role    = "roles/logging.logWriter"
  member  = "serviceAccount:${google_service_account.training.email}"
}

resource "google_project_iam_member" "training_class_log_writer" {
  for_each = var.training_classes

  project = var.project_id
  role    = "roles/logging.logWriter"
  member  = "serviceAccount:${google_service_account.training_class[each.key].email}"
}

# ---------------------------------------------------------------------------------------------
# Builds (Cloud Build runs the buildpack as this account)
# ---------------------------------------------------------------------------------------------

resource "google_project_iam_member" "build_log_writer" {
  project = var.project_id
  role    = "roles/logging.logWriter"
  member  = "serviceAccount:${google_service_account.build.email}"
}

resource "google_artifact_registry_repository_iam_member" "build_writer" {
  project    = var.project_id
  location   = google_artifact_registry_repository.functions.location
  repository = google_artifact_registry_repository.functions.name
  role       = "roles/artifactregistry.writer"
  member     = "serviceAccount:${google_service_account.build.email}"
}

resource "google_storage_bucket_iam_member" "build_reads_source" {
  bucket = google_storage_bucket.source.name
  role   = google_project_iam_custom_role.build_source_reader.id
  member = "serviceAccount:${google_service_account.build.email}"
}

# Cloud Functions copies the source into its own gcf-v2-sources-<number>-<region> bucket and the
# build fetches it from there ("Access to bucket gcf-v2-sources-... denied" otherwise). That bucket
# is created by Google on first deploy, so the grant is project-level with a condition limiting it
# to that bucket.
resource "google_project_iam_member" "build_reads_gcf_sources" {
  project = var.project_id
  role    = google_project_iam_custom_role.build_source_reader.id
  member  = "serviceAccount:${google_service_account.build.email}"

  condition {
    title       = "gcf-v2-sources bucket only"
    description = "Cloud Functions' own source staging bucket for ${var.region}."
    expression  = "resource.name.startsWith(\"projects/_/buckets/gcf-v2-sources-${data.google_project.this.number}-${var.region}\")"
  }
}
