# The five Cloud Functions (gen2), built by Cloud Build from one source zip.
#
# Source layout in the zip (the buildpack's source root):
#   main.py            terraform/source_root/main.py: forwards the entry points to functions/main.py
#   requirements.txt   exact pins of every runtime dependency (tools/lock_requirements.py)
#   functions/, shared/  the packages, .py and .json files only
#   spotjobs_kit/      the trainer kit's package (kit/src/spotjobs_kit/), .py files only
# Nothing else: no tests, terraform, devstack, bench, venvs, caches or .git, and no stray file a
# developer left in the work tree (the list below is an allow-list, not a deny-list).
# Why a root main.py and not GOOGLE_FUNCTION_SOURCE=functions/main.py: see source_root/main.py and
# README.md ("How main.py imports shared").

locals {
  repo_root = abspath("${path.module}/..")

  # Patterns relative to the repository root (Terraform fileset() syntax). The deploy test
  # (tests/integration/test_deploy_zip.py) reads this list to build the same zip.
  source_globs = [
    "requirements.txt",
    "functions/**/*.py",
    "functions/**/*.json",
    "shared/**/*.py",
    "shared/**/*.json",
    "kit/src/spotjobs_kit/**/*.py", # the trainer kit: checkpoint rules and kit lines shared/ imports
  ]
  source_files = sort(distinct(flatten([for pattern in local.source_globs : tolist(fileset(local.repo_root, pattern))])))
  source_entry = "${path.module}/source_root/main.py"

  # Packed at the zip's root without this folder: kit/src/spotjobs_kit/x.py -> spotjobs_kit/x.py.
  source_strip_prefix = "kit/src/"

  # Per-function sizing: module defaults, per-function adjustments, then the caller's overrides.
  function_builtin = {
    # Scheduled sweeps: one instance, longer runs; prune deletes in parallel threads. One sweep at
    # a time is the run lease's job (shared/ledger/run_lock.py), not Cloud Run's: with concurrency 1 a
    # tick pushed during a run of minutes would get 429, be retried and end in the dead-letter
    # topic. With room for more requests the tick reaches the instance, finds the lease and is
    # acknowledged; prune also serves the one-request prunes on_job_event publishes meanwhile.
    # Concurrency above 1 needs at least 1 vCPU (checked below).
    reconcile         = { timeout_seconds = 300, max_instances = 1, concurrency = 4 }
    prune_checkpoints = { timeout_seconds = 540, max_instances = 1, concurrency = 8, memory = "1Gi" }
  }
  function_config = {
    for fn in keys(local.routes) : fn => merge(
      var.function_defaults,
      lookup(local.function_builtin, fn, {}),
      { for k, v in try(var.functions[fn], {}) : k => v if v != null },
    )
  }

  # Function environment: shared/settings.py reads exactly these names. Infrastructure values come
  # from this module; behaviour settings from var.settings (null = the code default).
  # SPOTJOBS_VERTEX_ENDPOINT is deliberately absent: unset means the real regional Vertex endpoint.
  infrastructure_env = {
    GOOGLE_CLOUD_PROJECT                = var.project_id
    SPOTJOBS_LOCATION                   = local.vertex_location
    SPOTJOBS_STATE_BUCKET               = google_storage_bucket.state.name
    SPOTJOBS_CHECKPOINT_BUCKET          = google_storage_bucket.checkpoints.name
    SPOTJOBS_CHECKPOINT_BUCKET_LOCATION = google_storage_bucket.checkpoints.location
    SPOTJOBS_JOB_REQUESTS_TOPIC         = google_pubsub_topic.topics["job_requests"].name
    SPOTJOBS_JOB_EVENTS_TOPIC           = google_pubsub_topic.topics["job_events"].name
    SPOTJOBS_OPS_ALERTS_TOPIC           = google_pubsub_topic.topics["ops_alerts"].name
    SPOTJOBS_MAINTENANCE_TOPIC          = google_pubsub_topic.topics["maintenance"].name
    SPOTJOBS_TRIGGERS_TOPIC             = google_pubsub_topic.topics["triggers"].name
    SPOTJOBS_TRAINING_SERVICE_ACCOUNT   = google_service_account.training.email
    SPOTJOBS_TRAINING_CLASSES           = join(",", [for c, prefix in var.training_classes : "${prefix}=${google_service_account.training_class[c].email}"])
    # A reconcile pass stops sending Vertex calls that could outlive its function (shared/reconcile_vertex.py).
    SPOTJOBS_RECONCILE_TIMEOUT_SECONDS = tostring(local.function_config["reconcile"].timeout_seconds)
    # A drainer begins no create whose timeout would outlast its delivery (shared/pacing_drainer.py).
    SPOTJOBS_SUBMIT_TIMEOUT_SECONDS = tostring(local.function_config["submit_job"].timeout_seconds)
  }
  settings = merge(var.settings, {
    # Jobs may only run as the training service account unless the caller widens the list (and
    # grants submit_job actAs on the others).
    allowed_service_accounts = coalesce(var.settings.allowed_service_accounts, [google_service_account.training.email])
  })
  settings_env_names = {
    checkpoint_prefix            = "SPOTJOBS_CHECKPOINT_PREFIX"
    allowed_machine_families     = "SPOTJOBS_ALLOWED_MACHINE_FAMILIES"
    allowed_image_prefixes       = "SPOTJOBS_ALLOWED_IMAGE_PREFIXES"
    allowed_service_accounts     = "SPOTJOBS_ALLOWED_SERVICE_ACCOUNTS"
    max_replicas_per_pool        = "SPOTJOBS_MAX_REPLICAS_PER_POOL"
    max_accelerators_per_replica = "SPOTJOBS_MAX_ACCELERATORS_PER_REPLICA"
    default_max_attempts         = "SPOTJOBS_DEFAULT_MAX_ATTEMPTS"
    max_attempts_ceiling         = "SPOTJOBS_MAX_ATTEMPTS_CEILING"
    max_request_bytes            = "SPOTJOBS_MAX_REQUEST_BYTES"
    max_accelerators_per_job     = "SPOTJOBS_MAX_ACCELERATORS_PER_JOB"
    max_replicas_per_job         = "SPOTJOBS_MAX_REPLICAS_PER_JOB"
    max_pools_per_job            = "SPOTJOBS_MAX_POOLS_PER_JOB"
    max_timeout_seconds          = "SPOTJOBS_MAX_TIMEOUT_SECONDS"
    max_runtime_seconds          = "SPOTJOBS_MAX_RUNTIME_SECONDS"
    max_boot_disk_gb             = "SPOTJOBS_MAX_BOOT_DISK_GB"
    allowed_fallback_strategies  = "SPOTJOBS_ALLOWED_FALLBACK_STRATEGIES"
    min_spot_attempts            = "SPOTJOBS_MIN_SPOT_ATTEMPTS"
    changeover_prior_seconds     = "SPOTJOBS_CHANGEOVER_PRIOR_SECONDS"
    reconcile_interval_seconds   = "SPOTJOBS_RECONCILE_INTERVAL_SECONDS"
    checkpoint_prior_seconds     = "SPOTJOBS_CHECKPOINT_PRIOR_SECONDS"
    region_prior                 = "SPOTJOBS_REGION_PRIOR"
    allowed_locations            = "SPOTJOBS_ALLOWED_LOCATIONS"
    allowed_networks             = "SPOTJOBS_ALLOWED_NETWORKS"
    allowed_network_attachments  = "SPOTJOBS_ALLOWED_NETWORK_ATTACHMENTS"
    allow_web_access             = "SPOTJOBS_ALLOW_WEB_ACCESS"
    allowed_mount_servers        = "SPOTJOBS_ALLOWED_MOUNT_SERVERS"
    allowed_persistent_resources = "SPOTJOBS_ALLOWED_PERSISTENT_RESOURCES"
    allowed_reservations         = "SPOTJOBS_ALLOWED_RESERVATIONS"
    allowed_kms_keys             = "SPOTJOBS_ALLOWED_KMS_KEYS"
    allowed_tensorboards         = "SPOTJOBS_ALLOWED_TENSORBOARDS"
    allowed_experiments          = "SPOTJOBS_ALLOWED_EXPERIMENTS"
    allowed_notify_topics        = "SPOTJOBS_ALLOWED_NOTIFY_TOPICS"
    allowed_models               = "SPOTJOBS_ALLOWED_MODELS"
    claim_lease_seconds          = "SPOTJOBS_CLAIM_LEASE_SECONDS"
    bare_dedupe_seconds          = "SPOTJOBS_BARE_DEDUPE_SECONDS"
    create_timeout_seconds       = "SPOTJOBS_CREATE_TIMEOUT_SECONDS"
    max_event_age_seconds        = "SPOTJOBS_MAX_EVENT_AGE_SECONDS"
    preemption_patterns          = "SPOTJOBS_PREEMPTION_PATTERNS"
    stockout_patterns            = "SPOTJOBS_STOCKOUT_PATTERNS"
    preemption_storm_threshold   = "SPOTJOBS_PREEMPTION_STORM_THRESHOLD"
    requeue_delay_seconds        = "SPOTJOBS_REQUEUE_DELAY_SECONDS"
    unclaimed_requeue_seconds    = "SPOTJOBS_UNCLAIMED_REQUEUE_SECONDS"
    stuck_after_seconds          = "SPOTJOBS_STUCK_AFTER_SECONDS"
    kit_lines_settle_seconds     = "SPOTJOBS_KIT_LINES_SETTLE_SECONDS"
    log_level                    = "SPOTJOBS_LOG_LEVEL"
    max_claim_republishes        = "SPOTJOBS_MAX_CLAIM_REPUBLISHES"
    list_lag_seconds             = "SPOTJOBS_LIST_LAG_SECONDS"
    deployment                   = "SPOTJOBS_DEPLOYMENT"
    reconcile_page_size          = "SPOTJOBS_RECONCILE_PAGE_SIZE"
    reconcile_requests_per_run   = "SPOTJOBS_RECONCILE_REQUESTS_PER_RUN"
    vertex_creates_per_minute    = "SPOTJOBS_VERTEX_CREATES_PER_MINUTE"
    vertex_crud_per_minute       = "SPOTJOBS_VERTEX_CRUD_PER_MINUTE"
    reconcile_crud_share         = "SPOTJOBS_RECONCILE_CRUD_SHARE"
    pacer_run_seconds            = "SPOTJOBS_PACER_RUN_SECONDS"
    quota_alert_after_seconds    = "SPOTJOBS_QUOTA_ALERT_AFTER_SECONDS"
    ledger_retention_seconds     = "SPOTJOBS_LEDGER_RETENTION_SECONDS"
    ledger_archive               = "SPOTJOBS_LEDGER_ARCHIVE"
    keep_last                    = "SPOTJOBS_KEEP_LAST"
    keep_last_ceiling            = "SPOTJOBS_KEEP_LAST_CEILING"
    incomplete_grace_seconds     = "SPOTJOBS_INCOMPLETE_GRACE_SECONDS"
    finished_retention_seconds   = "SPOTJOBS_FINISHED_RETENTION_SECONDS"
    keep_final_checkpoint        = "SPOTJOBS_KEEP_FINAL_CHECKPOINT"
    commit_markers               = "SPOTJOBS_COMMIT_MARKERS"
    prune_workers                = "SPOTJOBS_PRUNE_WORKERS"
    prune_requests_per_run       = "SPOTJOBS_PRUNE_REQUESTS_PER_RUN"
    trigger_settle_seconds       = "SPOTJOBS_TRIGGER_SETTLE_SECONDS"
    trigger_cache_seconds        = "SPOTJOBS_TRIGGER_CACHE_SECONDS"
  }
  settings_env = {
    for key, env_name in local.settings_env_names : env_name => (
      can(tolist(local.settings[key])) ? join(",", local.settings[key]) :
      can(tobool(local.settings[key])) && !can(tonumber(local.settings[key])) ? (local.settings[key] ? "true" : "false") :
      tostring(local.settings[key])
    ) if local.settings[key] != null
  }
  function_env = merge(local.settings_env, var.extra_environment, local.infrastructure_env)
}

data "archive_file" "source" {
  type             = "zip"
  output_path      = "${path.module}/.build/${var.name_prefix}-functions-source.zip"
  output_file_mode = "0644" # same bytes, same MD5, whatever the checkout's umask

  dynamic "source" {
    for_each = toset(local.source_files)
    content {
      content  = file("${local.repo_root}/${source.value}")
      filename = trimprefix(source.value, local.source_strip_prefix)
    }
  }

  source {
    content  = file(local.source_entry)
    filename = "main.py"
  }
}

resource "google_storage_bucket_object" "source" {
  # Content-addressed: a code or dependency change is a new object, hence a new build/revision.
  name         = "functions/${data.archive_file.source.output_md5}.zip"
  bucket       = google_storage_bucket.source.name
  source       = data.archive_file.source.output_path
  content_type = "application/zip"
}

# Images of the functions, instead of the implicit project-wide gcf-artifacts repository, so the
# build identity can be granted writer on this repository alone.
resource "google_artifact_registry_repository" "functions" {
  #checkov:skip=CKV_GCP_84:Images contain only this repository's open code and public wheels; Google-managed encryption is sufficient.
  project       = var.project_id
  location      = var.region
  repository_id = "${var.name_prefix}-functions"
  description   = "Container images built from the spotjobs Cloud Functions source."
  format        = "DOCKER"
  labels        = local.labels

  cleanup_policy_dry_run = false
  cleanup_policies {
    id     = "keep-recent"
    action = "KEEP"
    most_recent_versions {
      keep_count = 10
    }
  }
  cleanup_policies {
    id     = "delete-old"
    action = "DELETE"
    condition {
      older_than = "7776000s" # 90 days; the 10 newest versions of each image are kept regardless
    }
  }

  depends_on = [google_project_service.apis]
}

resource "google_cloudfunctions2_function" "functions" {
  for_each = local.routes

  project     = var.project_id
  location    = var.region
  name        = local.function_names[each.key]
  description = "spotjobs ${each.key}: fed by push subscription ${each.value.subscription} on topic ${local.topics[each.value.topic].name}."
  labels      = local.labels

  build_config {
    runtime           = var.runtime
    entry_point       = each.key
    service_account   = google_service_account.build.id
    docker_repository = google_artifact_registry_repository.functions.id

    source {
      storage_source {
        bucket = google_storage_bucket.source.name
        object = google_storage_bucket_object.source.name
      }
    }
  }

  service_config {
    available_memory                 = local.function_config[each.key].memory
    available_cpu                    = local.function_config[each.key].cpu
    timeout_seconds                  = local.function_config[each.key].timeout_seconds
    max_instance_request_concurrency = local.function_config[each.key].concurrency
    min_instance_count               = local.function_config[each.key].min_instances
    max_instance_count               = local.function_config[each.key].max_instances
    # Reachable only from inside the project/perimeter (Pub/Sub push qualifies); the OIDC token
    # of the push identity is still required on top (no allUsers invoker anywhere).
    ingress_settings               = "ALLOW_INTERNAL_ONLY"
    all_traffic_on_latest_revision = true
    service_account_email          = google_service_account.functions[each.key].email
    environment_variables = merge(local.function_env, {
      # functions-framework serves with gunicorn threads; match the instance concurrency.
      THREADS = tostring(local.function_config[each.key].concurrency)
    })
  }

  lifecycle {
    # "If you set concurrency greater than 1, the function must have 1 or more vCPU"
    # (https://cloud.google.com/functions/docs/configuring/concurrency).
    precondition {
      condition     = local.function_config[each.key].concurrency == 1 || try(tonumber(local.function_config[each.key].cpu) >= 1, false)
      error_message = "${each.key}: concurrency above 1 needs cpu >= 1 (Cloud Run functions)."
    }
  }

  depends_on = [
    google_project_service.apis,
    google_project_iam_member.build_log_writer,
    google_project_iam_member.build_reads_gcf_sources,
    google_artifact_registry_repository_iam_member.build_writer,
    google_storage_bucket_iam_member.build_reads_source,
  ]
}

# Only the function's own push identity may invoke it. For gen2 the invoke check is Cloud Run's
# (run.routes.invoke on the function's service, which has the function's name).
resource "google_cloud_run_v2_service_iam_member" "invoker" {
  for_each = local.routes

  project  = var.project_id
  location = var.region
  name     = google_cloudfunctions2_function.functions[each.key].name
  role     = "roles/run.invoker"
  member   = "serviceAccount:${google_service_account.pushers[each.key].email}"
}
