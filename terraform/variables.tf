# ---------------------------------------------------------------------------------------------
# Where
# ---------------------------------------------------------------------------------------------

variable "project_id" {
  description = "Project that hosts spotjobs: topics, functions, buckets, the log sink, and the Vertex AI jobs it submits."
  type        = string

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{4,28}[a-z0-9]$", var.project_id))
    error_message = "project_id must be a project ID (6-30 characters: lowercase letters, digits, hyphens), not a project number or name."
  }
}

variable "region" {
  description = "Region for the functions, their Artifact Registry repository, Cloud Scheduler jobs and (by default) the buckets and Vertex AI jobs."
  type        = string
  default     = "us-central1"
}

variable "vertex_location" {
  description = "Default Vertex AI location for jobs (SPOTJOBS_LOCATION); a request may name its own. Null means var.region. Keep the checkpoint bucket in the same region."
  type        = string
  default     = null
}

variable "name_prefix" {
  description = "Prefix for the names this module invents: functions, service accounts, buckets, custom roles, scheduler jobs, metrics, the sink. Pub/Sub names come from shared/topology.json unchanged, so deploy one spotjobs per project."
  type        = string
  default     = "spotjobs"

  validation {
    # Service account ids are at most 30 characters and the longest suffix is "-push-reconcile".
    condition     = can(regex("^[a-z][a-z0-9-]{1,13}[a-z0-9]$", var.name_prefix))
    error_message = "name_prefix must be 3-15 characters: a lowercase letter, then lowercase letters, digits or hyphens, not ending in a hyphen."
  }
}

variable "labels" {
  description = "Labels added to every resource that takes labels (buckets, topics, subscriptions, functions)."
  type        = map(string)
  default     = {}
}

variable "enable_apis" {
  description = "Enable the Google APIs spotjobs needs (never disabled on destroy). Set false when a project factory owns API enablement."
  type        = bool
  default     = true
}

# ---------------------------------------------------------------------------------------------
# Functions
# ---------------------------------------------------------------------------------------------

variable "runtime" {
  description = "Cloud Functions runtime. requirements.txt is locked for this Python version (tools/lock_requirements.py TARGET_PYTHON); change both together."
  type        = string
  default     = "python312"

  validation {
    condition     = can(regex("^python3[0-9]+$", var.runtime))
    error_message = "runtime must be a Python runtime id such as python312."
  }
}

variable "function_defaults" {
  description = <<-EOT
    Sizing applied to every function unless var.functions overrides it.
    memory: Cloud Run quantity (256Mi, 512Mi, 1Gi...). cpu: vCPUs as a string ("1", "2"); concurrency above 1 needs at least 1 vCPU.
    concurrency: requests one instance serves at once (also sets THREADS for functions-framework's gunicorn).
    timeout_seconds: per request, at most 600 because the push subscription's ack deadline (the push timeout) must cover it.
    min_instances/max_instances: scaling bounds; max also caps Vertex API and GCS request rates.
  EOT
  type = object({
    memory          = optional(string, "512Mi")
    cpu             = optional(string, "1")
    concurrency     = optional(number, 8)
    timeout_seconds = optional(number, 60)
    min_instances   = optional(number, 0)
    max_instances   = optional(number, 10)
  })
  default = {}

  validation {
    condition = (
      var.function_defaults.timeout_seconds >= 1 && var.function_defaults.timeout_seconds <= 600 &&
      var.function_defaults.concurrency >= 1 && var.function_defaults.concurrency <= 1000 &&
      var.function_defaults.min_instances >= 0 && var.function_defaults.max_instances >= 1 &&
      var.function_defaults.min_instances <= var.function_defaults.max_instances
    )
    error_message = "function_defaults: timeout_seconds 1-600, concurrency 1-1000, 0 <= min_instances <= max_instances, max_instances >= 1."
  }
}

variable "functions" {
  description = <<-EOT
    Per-function overrides of var.function_defaults, keyed by entry point (submit_job, on_job_event, reconcile, prune_checkpoints).
    Unset attributes keep the module's per-function defaults: reconcile and prune_checkpoints run one instance with a longer timeout (a scheduled sweep, not a fan-out), prune_checkpoints gets 1Gi for its parallel deletes.
  EOT
  type = map(object({
    memory          = optional(string)
    cpu             = optional(string)
    concurrency     = optional(number)
    timeout_seconds = optional(number)
    min_instances   = optional(number)
    max_instances   = optional(number)
  }))
  default = {}

  validation {
    condition = alltrue([
      for fn, o in var.functions : (
        (o.timeout_seconds == null ? true : o.timeout_seconds >= 1 && o.timeout_seconds <= 600) &&
        (o.concurrency == null ? true : o.concurrency >= 1 && o.concurrency <= 1000) &&
        (o.max_instances == null ? true : o.max_instances >= 1) &&
        (o.min_instances == null ? true : o.min_instances >= 0)
      )
    ])
    error_message = "functions: timeout_seconds 1-600, concurrency 1-1000, max_instances >= 1, min_instances >= 0."
  }
}

# ---------------------------------------------------------------------------------------------
# spotjobs settings (shared/settings.py). Each attribute is the environment variable named in the
# comment; null leaves the code's default. Infrastructure names (project, buckets, topics, training
# service account, location) are filled in by this module, not here.
# ---------------------------------------------------------------------------------------------

variable "settings" {
  description = "spotjobs policy and behaviour settings passed to every function as SPOTJOBS_* environment variables (see shared/settings.py for meanings and code defaults). Null = code default. Lists are joined with commas, so list items must not contain commas."
  type = object({
    checkpoint_prefix            = optional(string, "requests") # SPOTJOBS_CHECKPOINT_PREFIX (also scopes the bucket lifecycle rule)
    allowed_machine_families     = optional(list(string))       # SPOTJOBS_ALLOWED_MACHINE_FAMILIES
    allowed_image_prefixes       = optional(list(string))       # SPOTJOBS_ALLOWED_IMAGE_PREFIXES
    allowed_service_accounts     = optional(list(string))       # SPOTJOBS_ALLOWED_SERVICE_ACCOUNTS (null = the training service account only)
    max_replicas_per_pool        = optional(number)             # SPOTJOBS_MAX_REPLICAS_PER_POOL
    max_accelerators_per_replica = optional(number)             # SPOTJOBS_MAX_ACCELERATORS_PER_REPLICA
    default_max_attempts         = optional(number)             # SPOTJOBS_DEFAULT_MAX_ATTEMPTS
    max_attempts_ceiling         = optional(number)             # SPOTJOBS_MAX_ATTEMPTS_CEILING
    max_request_bytes            = optional(number)             # SPOTJOBS_MAX_REQUEST_BYTES
    max_accelerators_per_job     = optional(number)             # SPOTJOBS_MAX_ACCELERATORS_PER_JOB
    max_replicas_per_job         = optional(number)             # SPOTJOBS_MAX_REPLICAS_PER_JOB (every pool)
    max_pools_per_job            = optional(number)             # SPOTJOBS_MAX_POOLS_PER_JOB
    max_timeout_seconds          = optional(number)             # SPOTJOBS_MAX_TIMEOUT_SECONDS (default 7 days, Vertex's own)
    max_runtime_seconds          = optional(number)             # SPOTJOBS_MAX_RUNTIME_SECONDS (default 28 days, over continuations)
    max_boot_disk_gb             = optional(number)             # SPOTJOBS_MAX_BOOT_DISK_GB
    allowed_fallback_strategies  = optional(list(string))       # SPOTJOBS_ALLOWED_FALLBACK_STRATEGIES (null = none: Spot only)
    min_spot_attempts            = optional(number)             # SPOTJOBS_MIN_SPOT_ATTEMPTS
    changeover_prior_seconds     = optional(number)             # SPOTJOBS_CHANGEOVER_PRIOR_SECONDS (default 1200)
    region_prior                 = optional(bool)               # SPOTJOBS_REGION_PRIOR (default true: placement starts from shared/fleet/region_prior.json)
    reconcile_interval_seconds   = optional(number)             # SPOTJOBS_RECONCILE_INTERVAL_SECONDS (default 300: keep it the reconcile schedule's interval)
    checkpoint_prior_seconds     = optional(number)             # SPOTJOBS_CHECKPOINT_PRIOR_SECONDS (default 3600: the trainer's checkpoint interval until seen)
    allowed_locations            = optional(list(string))       # SPOTJOBS_ALLOWED_LOCATIONS (null = any region)
    allowed_networks             = optional(list(string))       # SPOTJOBS_ALLOWED_NETWORKS (opt-in: jobSpec.network, reservedIpRanges)
    allowed_network_attachments  = optional(list(string))       # SPOTJOBS_ALLOWED_NETWORK_ATTACHMENTS (opt-in: PSC interface)
    allow_web_access             = optional(bool)               # SPOTJOBS_ALLOW_WEB_ACCESS (opt-in: web/dashboard access)
    allowed_mount_servers        = optional(list(string))       # SPOTJOBS_ALLOWED_MOUNT_SERVERS (opt-in: NFS/Lustre mounts)
    allowed_persistent_resources = optional(list(string))       # SPOTJOBS_ALLOWED_PERSISTENT_RESOURCES
    allowed_reservations         = optional(list(string))       # SPOTJOBS_ALLOWED_RESERVATIONS
    allowed_kms_keys             = optional(list(string))       # SPOTJOBS_ALLOWED_KMS_KEYS
    allowed_tensorboards         = optional(list(string))       # SPOTJOBS_ALLOWED_TENSORBOARDS
    allowed_experiments          = optional(list(string))       # SPOTJOBS_ALLOWED_EXPERIMENTS
    allowed_notify_topics        = optional(list(string))       # SPOTJOBS_ALLOWED_NOTIFY_TOPICS (null = no request may name notify)
    allowed_models               = optional(list(string))       # SPOTJOBS_ALLOWED_MODELS
    claim_lease_seconds          = optional(number)             # SPOTJOBS_CLAIM_LEASE_SECONDS
    bare_dedupe_seconds          = optional(number)             # SPOTJOBS_BARE_DEDUPE_SECONDS (a bare body's dedupe window)
    create_timeout_seconds       = optional(number)             # SPOTJOBS_CREATE_TIMEOUT_SECONDS (bounds one Vertex create)
    max_event_age_seconds        = optional(number)             # SPOTJOBS_MAX_EVENT_AGE_SECONDS
    preemption_patterns          = optional(list(string))       # SPOTJOBS_PREEMPTION_PATTERNS
    stockout_patterns            = optional(list(string))       # SPOTJOBS_STOCKOUT_PATTERNS
    preemption_storm_threshold   = optional(number)             # SPOTJOBS_PREEMPTION_STORM_THRESHOLD
    requeue_delay_seconds        = optional(number)             # SPOTJOBS_REQUEUE_DELAY_SECONDS
    unclaimed_requeue_seconds    = optional(number)             # SPOTJOBS_UNCLAIMED_REQUEUE_SECONDS
    stuck_after_seconds          = optional(number)             # SPOTJOBS_STUCK_AFTER_SECONDS
    kit_lines_settle_seconds     = optional(number)             # SPOTJOBS_KIT_LINES_SETTLE_SECONDS
    log_level                    = optional(string)             # SPOTJOBS_LOG_LEVEL
    max_claim_republishes        = optional(number)             # SPOTJOBS_MAX_CLAIM_REPUBLISHES
    list_lag_seconds             = optional(number)             # SPOTJOBS_LIST_LAG_SECONDS
    deployment                   = optional(string)             # SPOTJOBS_DEPLOYMENT
    reconcile_page_size          = optional(number)             # SPOTJOBS_RECONCILE_PAGE_SIZE
    reconcile_requests_per_run   = optional(number)             # SPOTJOBS_RECONCILE_REQUESTS_PER_RUN
    vertex_creates_per_minute    = optional(number)             # SPOTJOBS_VERTEX_CREATES_PER_MINUTE
    vertex_crud_per_minute       = optional(number)             # SPOTJOBS_VERTEX_CRUD_PER_MINUTE
    reconcile_crud_share         = optional(number)             # SPOTJOBS_RECONCILE_CRUD_SHARE
    pacer_run_seconds            = optional(number)             # SPOTJOBS_PACER_RUN_SECONDS
    quota_alert_after_seconds    = optional(number)             # SPOTJOBS_QUOTA_ALERT_AFTER_SECONDS
    ledger_retention_seconds     = optional(number)             # SPOTJOBS_LEDGER_RETENTION_SECONDS
    ledger_archive               = optional(bool)               # SPOTJOBS_LEDGER_ARCHIVE
    keep_last                    = optional(number)             # SPOTJOBS_KEEP_LAST
    keep_last_ceiling            = optional(number)             # SPOTJOBS_KEEP_LAST_CEILING
    incomplete_grace_seconds     = optional(number)             # SPOTJOBS_INCOMPLETE_GRACE_SECONDS
    finished_retention_seconds   = optional(number)             # SPOTJOBS_FINISHED_RETENTION_SECONDS
    keep_final_checkpoint        = optional(bool)               # SPOTJOBS_KEEP_FINAL_CHECKPOINT
    commit_markers               = optional(list(string))       # SPOTJOBS_COMMIT_MARKERS (submit sets it in every job too)
    prune_workers                = optional(number)             # SPOTJOBS_PRUNE_WORKERS
    prune_requests_per_run       = optional(number)             # SPOTJOBS_PRUNE_REQUESTS_PER_RUN
    trigger_settle_seconds       = optional(number)             # SPOTJOBS_TRIGGER_SETTLE_SECONDS
    trigger_cache_seconds        = optional(number)             # SPOTJOBS_TRIGGER_CACHE_SECONDS
  })
  default = {}

  validation {
    condition = alltrue(flatten([
      for v in [
        var.settings.allowed_machine_families, var.settings.allowed_image_prefixes,
        var.settings.allowed_service_accounts, var.settings.preemption_patterns,
        var.settings.stockout_patterns, var.settings.commit_markers,
        var.settings.allowed_fallback_strategies,
        var.settings.allowed_locations,
        var.settings.allowed_networks,
        var.settings.allowed_network_attachments,
        var.settings.allowed_mount_servers,
        var.settings.allowed_persistent_resources,
        var.settings.allowed_reservations,
        var.settings.allowed_kms_keys,
        var.settings.allowed_tensorboards,
        var.settings.allowed_experiments,
        var.settings.allowed_models,
        var.settings.allowed_notify_topics,
      ] : [for item in coalesce(v, []) : !strcontains(item, ",")]
    ]))
    error_message = "settings: list items must not contain commas (the functions split SPOTJOBS_* lists on commas)."
  }

  validation {
    condition     = var.settings.commit_markers == null || length(coalesce(var.settings.commit_markers, [])) > 0
    error_message = "settings.commit_markers must name at least one marker (or be left unset for the defaults): the pruner and the trainer kit in every job judge checkpoints with this list."
  }

  validation {
    condition     = can(regex("^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$", var.settings.checkpoint_prefix))
    error_message = "settings.checkpoint_prefix must be a relative object prefix without leading/trailing slashes, e.g. \"requests\"."
  }
}

variable "extra_environment" {
  description = "Additional SPOTJOBS_* environment variables for every function, for settings newer than this module's var.settings. Keys set here win."
  type        = map(string)
  default     = {}

  validation {
    condition     = alltrue([for k in keys(var.extra_environment) : can(regex("^SPOTJOBS_[A-Z0-9_]+$", k)) && k != "SPOTJOBS_VERTEX_ENDPOINT"])
    error_message = "extra_environment keys must be SPOTJOBS_* settings; SPOTJOBS_VERTEX_ENDPOINT is reserved for the embedded stack (unset means the real Vertex AI endpoint)."
  }
}

# ---------------------------------------------------------------------------------------------
# Buckets
# ---------------------------------------------------------------------------------------------

variable "buckets" {
  description = <<-EOT
    Bucket names and placement. Names default to "<project_id>-<name_prefix>-{state,checkpoints,source}".
    location: null means var.region (keep checkpoints next to the Vertex jobs that write them).
    force_destroy: let `terraform destroy` delete non-empty buckets (never in production).
  EOT
  type = object({
    location        = optional(string)
    state_name      = optional(string)
    checkpoint_name = optional(string)
    source_name     = optional(string)
    force_destroy   = optional(bool, false)
  })
  default = {}
}

variable "checkpoint_soft_delete_retention_seconds" {
  description = "Soft-delete retention of the checkpoint bucket. 0 (default) turns soft delete off: soft-deleted objects are billed like live ones for the whole retention, so with the GCS default (7 days) every pruned checkpoint would keep costing for a week. Otherwise 604800-7776000 (7-90 days)."
  type        = number
  default     = 0

  validation {
    condition     = var.checkpoint_soft_delete_retention_seconds == 0 || (var.checkpoint_soft_delete_retention_seconds >= 604800 && var.checkpoint_soft_delete_retention_seconds <= 7776000)
    error_message = "checkpoint_soft_delete_retention_seconds must be 0 (off) or between 604800 (7 days) and 7776000 (90 days)."
  }
}

variable "checkpoint_delete_after_days" {
  description = "Optional lifecycle backstop: delete objects under settings.checkpoint_prefix older than this many days, whatever prune_checkpoints decided. Off (null) by default because that prefix also holds each request's model/ and logs/ outputs (AIP_MODEL_DIR); set it when finished models are exported elsewhere."
  type        = number
  default     = null

  validation {
    condition     = var.checkpoint_delete_after_days == null || try(var.checkpoint_delete_after_days >= 7, false)
    error_message = "checkpoint_delete_after_days must be null (off) or at least 7."
  }
}

variable "state_noncurrent_version_retention_days" {
  description = "The state bucket keeps previous generations of ledger documents (versioning on, for forensics after a bad release); they are deleted this many days after being superseded."
  type        = number
  default     = 30

  validation {
    condition     = var.state_noncurrent_version_retention_days >= 1
    error_message = "state_noncurrent_version_retention_days must be at least 1."
  }
}

variable "ledger_archive_retention_days" {
  description = "Ledger records removed by the retention sweep are archived to archive/<id>.json in the state bucket (settings.ledger_archive); a lifecycle rule deletes them this many days after archiving."
  type        = number
  default     = 365

  validation {
    condition     = var.ledger_archive_retention_days >= 1
    error_message = "ledger_archive_retention_days must be at least 1."
  }
}

# ---------------------------------------------------------------------------------------------
# Job events (log sink)
# ---------------------------------------------------------------------------------------------

variable "job_event_log_filter" {
  description = <<-EOT
    Cloud Logging filter of the project sink that feeds the job-events topic (on_job_event).
    Default: every Vertex service line of a custom job (task_name="service": "Job is running.", "Job failed.", "Job completed successfully.", ...; a handful per job, any severity), the trainer kit's lines (run started, preempted, checkpoint committed, run finished: a few per run and checkpoint; Vertex may store a JSON stdout line as jsonPayload or as textPayload, so both forms are selected), plus container lines at ERROR or above that mention preemption, reclaim, stockout or insufficient resources.
    Not every worker ERROR line: Vertex files a container's stderr as ERROR, so a chatty trainer would flood job-events and spend Vertex read quota, and on_job_event reads the job from the API anyway (a log line is only a hint).
  EOT
  type        = string
  default     = <<-EOT
    resource.type="ml_job"
    AND (
      resource.labels.task_name="service"
      OR jsonPayload.spotjobs_kit.event:*
      OR textPayload:"spotjobs-kit"
      OR (
        severity>=ERROR
        AND (
          textPayload=~"(?i)preempt|reclaimed|stockout|resources are insufficient"
          OR jsonPayload.message=~"(?i)preempt|reclaimed|stockout|resources are insufficient"
        )
      )
    )
  EOT

  validation {
    condition     = strcontains(var.job_event_log_filter, "ml_job")
    error_message = "job_event_log_filter should select resource.type=\"ml_job\" entries: on_job_event only understands Vertex custom job logs."
  }
}

# ---------------------------------------------------------------------------------------------
# Schedules
# ---------------------------------------------------------------------------------------------

variable "maintenance_schedules" {
  description = "Cloud Scheduler cadence of the maintenance messages ({\"task\":\"reconcile\"} and {\"task\":\"prune\"} on the maintenance topic). Cron syntax, IANA time zone; paused keeps the job but stops it firing."
  type = object({
    reconcile = optional(object({
      schedule  = optional(string, "*/5 * * * *") # every SPOTJOBS_RECONCILE_INTERVAL_SECONDS (300)
      time_zone = optional(string, "Etc/UTC")
      paused    = optional(bool, false)
    }), {})
    prune = optional(object({
      schedule  = optional(string, "17 * * * *")
      time_zone = optional(string, "Etc/UTC")
      paused    = optional(bool, false)
    }), {})
    # The retraining triggers' tick ({"task":"triggers"} on on_trigger's own topic): a window
    # closes at the first tick after its end (+ SPOTJOBS_TRIGGER_SETTLE_SECONDS).
    triggers = optional(object({
      schedule  = optional(string, "* * * * *")
      time_zone = optional(string, "Etc/UTC")
      paused    = optional(bool, false)
    }), {})
  })
  default = {}
}

variable "retraining_schedules" {
  description = <<-EOT
    Recurring job requests (kept for existing deployments; a `schedule` entry of retraining_triggers is the same thing).
    Each entry becomes a `schedule` retraining trigger of the same name: its Cloud Scheduler job fires on_trigger, which
    publishes one request per firing with request id trg-<name>-<window>, so a firing Cloud Scheduler delivers twice
    trains once. request is a JSON string: a bare CustomJob body ({ displayName, jobSpec = {...} }) becomes the
    trigger's custom_job; an envelope is used as the trigger's request (its request_id, if any, is dropped).
    (A string rather than an object because Terraform cannot type a list whose elements hold differently shaped objects.)
  EOT
  type = list(object({
    name        = string
    schedule    = string
    time_zone   = optional(string, "Etc/UTC")
    description = optional(string, "")
    paused      = optional(bool, false)
    request     = string
  }))
  default = []

  validation {
    condition     = alltrue([for s in var.retraining_schedules : can(regex("^[a-z][a-z0-9-]{0,39}$", s.name))])
    error_message = "retraining_schedules[*].name must be 1-40 characters: lowercase letters, digits, hyphens, starting with a letter."
  }

  validation {
    condition     = length(distinct([for s in var.retraining_schedules : s.name])) == length(var.retraining_schedules)
    error_message = "retraining_schedules names must be unique."
  }

  validation {
    condition     = alltrue([for s in var.retraining_schedules : can(keys(jsondecode(s.request)))])
    error_message = "retraining_schedules[*].request must be a JSON object (use jsonencode({...}))."
  }
}

variable "retraining_triggers" {
  description = <<-EOT
    Retraining triggers (shared/triggers/definition.py; docs/triggers.md), stored in the state bucket in the
    format `spotjobs triggers apply` writes. Exactly one source each: gcs = { bucket, prefix, suffixes } (a Cloud Storage
    notification of the bucket to on_trigger's topic is created, and the Cloud Storage service agent may publish there),
    pubsub = { topic, attributes } (a push subscription of that topic to on_trigger), schedule = { cron, time_zone } (a
    Cloud Scheduler job). request is a job-request envelope without request_id, as a JSON string (jsonencode({...})),
    whose strings may hold {trigger}, {window_id}, {window_start}, {window_end}, {manifest_uri}, {object_count}.
  EOT
  type = list(object({
    name        = string
    description = optional(string, "")
    source = object({
      gcs = optional(object({
        bucket   = string
        prefix   = optional(string, "")
        suffixes = optional(list(string), [])
      }))
      pubsub = optional(object({
        topic      = string
        attributes = optional(map(string), {})
      }))
      schedule = optional(object({
        cron      = string
        time_zone = optional(string, "Etc/UTC")
        paused    = optional(bool, false)
      }))
    })
    coalesce_seconds = optional(number, 300)
    min_objects      = optional(number)
    cooldown_seconds = optional(number, 0)
    request          = string
  }))
  default = []

  validation {
    condition     = alltrue([for t in var.retraining_triggers : can(regex("^[a-z][a-z0-9-]{0,39}$", t.name))])
    error_message = "retraining_triggers[*].name must be 1-40 characters: lowercase letters, digits, hyphens, starting with a letter."
  }

  validation {
    condition     = length(distinct([for t in var.retraining_triggers : t.name])) == length(var.retraining_triggers)
    error_message = "retraining_triggers names must be unique."
  }

  validation {
    condition     = alltrue([for t in var.retraining_triggers : length([for k, v in t.source : k if v != null]) == 1])
    error_message = "retraining_triggers[*].source must set exactly one of gcs, pubsub, schedule."
  }

  validation {
    condition     = alltrue([for t in var.retraining_triggers : can(keys(jsondecode(t.request)))])
    error_message = "retraining_triggers[*].request must be a JSON object (use jsonencode({...}))."
  }
}

# ---------------------------------------------------------------------------------------------
# Who may publish and read
# ---------------------------------------------------------------------------------------------

variable "job_request_publishers" {
  description = "IAM members (user:, group:, serviceAccount:) allowed to publish job requests to job-requests. Public principals are rejected."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for m in var.job_request_publishers : can(regex("^(user|group|serviceAccount|domain|principal|principalSet):", m)) && !contains(["allUsers", "allAuthenticatedUsers"], m)])
    error_message = "job_request_publishers must be IAM member strings such as group:ml-team@example.com; allUsers/allAuthenticatedUsers are not allowed."
  }
}

variable "training_classes" {
  description = "Training identities per request class, class name => request id prefix (SPOTJOBS_TRAINING_CLASSES). A request whose id starts with the prefix runs as the class's own service account (<name_prefix>-tc-<class>), which may write only <checkpoint prefix>/<id prefix>*; the shared training account may not write there, and no other request may name the class's account. Empty: every request runs as the one training account."
  type        = map(string)
  default     = {}

  validation {
    condition = alltrue([
      for name, prefix in var.training_classes :
      can(regex("^[a-z][a-z0-9]{0,10}$", name)) && can(regex("^[a-z][a-z0-9_-]{0,40}$", prefix)) && !startswith(prefix, "req-") && !startswith(prefix, "trg-")
    ])
    error_message = "training_classes: class names are 1-11 lowercase letters and digits (a service account id holds <name_prefix>-tc-<class>); prefixes start with a letter, then lowercase letters, digits, - or _, and never req- or trg- (spotjobs' own ids)."
  }
  validation {
    # A prefix inside another would put one class's folders inside the other's grant.
    condition = alltrue([
      for pair in setproduct(keys(var.training_classes), keys(var.training_classes)) :
      pair[0] == pair[1] || !startswith(var.training_classes[pair[0]], var.training_classes[pair[1]])
    ])
    error_message = "training_classes: no class's request id prefix may start with another's."
  }
}

variable "cancellers" {
  description = "IAM members allowed to run `spotjobs cancel`: they may read and compare-and-swap ledger records (requests/ in the state bucket), patch the status on their active markers (active/), and nothing else. Public principals are rejected."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for m in var.cancellers : can(regex("^(user|group|serviceAccount|domain|principal|principalSet):", m)) && !contains(["allUsers", "allAuthenticatedUsers"], m)])
    error_message = "cancellers must be IAM member strings such as group:ml-team@example.com; allUsers/allAuthenticatedUsers are not allowed."
  }
}

variable "ops_subscribers" {
  description = "IAM members allowed to pull the ops-alerts and dead-letter reader subscriptions (on-call, an alert router). Public principals are rejected."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for m in var.ops_subscribers : can(regex("^(user|group|serviceAccount|domain|principal|principalSet):", m)) && !contains(["allUsers", "allAuthenticatedUsers"], m)])
    error_message = "ops_subscribers must be IAM member strings such as group:oncall@example.com; allUsers/allAuthenticatedUsers are not allowed."
  }
}

# ---------------------------------------------------------------------------------------------
# Monitoring
# ---------------------------------------------------------------------------------------------

variable "notification_channels" {
  description = "Cloud Monitoring notification channel ids (projects/P/notificationChannels/N) that every spotjobs alert policy notifies. Empty: policies still open incidents in the console."
  type        = list(string)
  default     = []
}

variable "alert_policies" {
  description = <<-EOT
    Alert policies on the log-based metrics (counts of jsonPayload.event lines) and on the dead-letter backlog.
    An alert fires when the count over window_seconds exceeds threshold. Defaults: a preemption storm (more than 20 preemptions in an hour),
    repeated re-queues (more than 10 in an hour), and any attempts_exhausted, invalid_request or dead-lettered message.
  EOT
  type = object({
    preemptions = optional(object({
      enabled        = optional(bool, true)
      threshold      = optional(number, 20)
      window_seconds = optional(number, 3600)
    }), {})
    requeues = optional(object({
      enabled        = optional(bool, true)
      threshold      = optional(number, 10)
      window_seconds = optional(number, 3600)
    }), {})
    attempts_exhausted = optional(object({
      enabled        = optional(bool, true)
      threshold      = optional(number, 0)
      window_seconds = optional(number, 300)
    }), {})
    invalid_requests = optional(object({
      enabled        = optional(bool, true)
      threshold      = optional(number, 0)
      window_seconds = optional(number, 300)
    }), {})
    dead_letters = optional(object({
      enabled        = optional(bool, true)
      threshold      = optional(number, 0)
      window_seconds = optional(number, 300)
    }), {})
  })
  default = {}

  validation {
    condition = alltrue([
      for p in [
        var.alert_policies.preemptions, var.alert_policies.requeues, var.alert_policies.attempts_exhausted,
        var.alert_policies.invalid_requests, var.alert_policies.dead_letters,
      ] : p.threshold >= 0 && p.window_seconds >= 60 && p.window_seconds <= 86400
    ])
    error_message = "alert_policies: threshold >= 0 and window_seconds between 60 and 86400."
  }
}

variable "log_metric_propagation_seconds" {
  description = <<-EOT
    How long the alert policies wait after their log-based metrics are created (or changed). Cloud Monitoring answers
    404 "Cannot find metric(s) ... it could take up to 10 minutes to become available" for a metric created moments before,
    so without the wait the first apply fails on every alert policy. 0 = no wait (the metrics already exist).
  EOT
  type        = number
  default     = 600
  validation {
    condition     = var.log_metric_propagation_seconds >= 0 && var.log_metric_propagation_seconds <= 1800
    error_message = "log_metric_propagation_seconds: between 0 and 1800."
  }
}
