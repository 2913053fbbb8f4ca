"""The one settings object, read from the environment once.

Resolution order for every field: the environment variable named in its metadata, else the
default here (the create timeout's depends on the claim lease). Lists are comma-separated.
Durations are seconds. `from_env` rejects a claim lease too short to cover a Vertex create.
Nothing else reads os.environ for spotjobs configuration.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from spotjobs_kit.layout import COMMIT_MARKERS_ENV, DEFAULT_COMMIT_MARKERS

from shared.errors import ConfigurationError
from shared.topology import TOPOLOGY

_DEFAULT_PREEMPTION_PATTERNS = (
    r"preempt",
    r"spot vm .*reclaimed",
)
_DEFAULT_STOCKOUT_PATTERNS = (
    r"stockout",
    r"resources are insufficient",
)
# Orbax, torch.distributed.checkpoint, TensorFlow's index file, the kit's marker: one definition.
_DEFAULT_COMMIT_MARKERS = DEFAULT_COMMIT_MARKERS
# The pruner's settings read the commit markers from the variable the trainer kit reads
# (COMMIT_MARKERS_ENV, defined by the kit); submit sets it in every job's containers.


DEFAULT_CREATE_TIMEOUT_SECONDS = 30.0
# Four of Vertex's default 7-day job timeouts: continuations after a timeout stop there.
DEFAULT_MAX_RUNTIME_SECONDS = 28 * 86400
# Slack between a create's timeout and its claim's lease, as a fraction of the timeout: covers the
# request's time on the wire and clock skew between the deliveries comparing claim ages.
CREATE_MARGIN_FRACTION = 0.5


def _env(name: str, default: object = None, *, kind: str = "str") -> object:
    return field(default=default, metadata={"env": name, "kind": kind})


@dataclass(frozen=True)
class Settings:
    # Where things live.
    project: str = _env("GOOGLE_CLOUD_PROJECT", "spotjobs-local")
    location: str = _env("SPOTJOBS_LOCATION", "us-central1")
    state_bucket: str = _env("SPOTJOBS_STATE_BUCKET", "spotjobs-state")
    checkpoint_bucket: str = _env("SPOTJOBS_CHECKPOINT_BUCKET", "spotjobs-checkpoints")
    checkpoint_prefix: str = _env("SPOTJOBS_CHECKPOINT_PREFIX", "requests")
    # The checkpoint bucket's location (Terraform's `buckets.location`: a region, `US`, `EU`, ...):
    # what an attempt elsewhere pays to read a checkpoint. Empty: unknown, and not weighed.
    checkpoint_bucket_location: str = _env("SPOTJOBS_CHECKPOINT_BUCKET_LOCATION", "")
    # Placement starts from the shipped region prior (shared/fleet/region_prior.json) where the
    # fleet has seen little; off: from the fleet's own observations alone (docs/placement.md).
    region_prior: bool = _env("SPOTJOBS_REGION_PRIOR", True, kind="bool")
    job_requests_topic: str = _env("SPOTJOBS_JOB_REQUESTS_TOPIC", TOPOLOGY.topic_name("job_requests"))
    job_events_topic: str = _env("SPOTJOBS_JOB_EVENTS_TOPIC", TOPOLOGY.topic_name("job_events"))
    ops_alerts_topic: str = _env("SPOTJOBS_OPS_ALERTS_TOPIC", TOPOLOGY.topic_name("ops_alerts"))
    maintenance_topic: str = _env("SPOTJOBS_MAINTENANCE_TOPIC", TOPOLOGY.topic_name("maintenance"))
    triggers_topic: str = _env("SPOTJOBS_TRIGGERS_TOPIC", TOPOLOGY.topic_name("triggers"))
    # Empty means the real regional endpoint; the embedded stack sets http://127.0.0.1:PORT.
    vertex_endpoint: str = _env("SPOTJOBS_VERTEX_ENDPOINT", "")
    training_service_account: str = _env("SPOTJOBS_TRAINING_SERVICE_ACCOUNT", "")
    # Labels every job this deployment creates (a label value: lowercase letters, digits, - and _);
    # empty means one derived from the state bucket, which is the deployment's own.
    deployment: str = _env("SPOTJOBS_DEPLOYMENT", "")

    # Request policy: what a publisher may ask for.
    allowed_machine_families: tuple[str, ...] = _env("SPOTJOBS_ALLOWED_MACHINE_FAMILIES", ("a2", "a3"), kind="list")
    allowed_image_prefixes: tuple[str, ...] = _env("SPOTJOBS_ALLOWED_IMAGE_PREFIXES", (), kind="list")
    allowed_service_accounts: tuple[str, ...] = _env("SPOTJOBS_ALLOWED_SERVICE_ACCOUNTS", (), kind="list")
    # Training identities per request class, `<request id prefix>=<service account>`: a request
    # whose id starts with the prefix runs as that account, which may write only its class's
    # folders (terraform/iam.tf); no other request may name it (docs/security.md).
    training_classes: tuple[str, ...] = _env("SPOTJOBS_TRAINING_CLASSES", (), kind="list")
    max_replicas_per_pool: int = _env("SPOTJOBS_MAX_REPLICAS_PER_POOL", 8, kind="int")
    max_accelerators_per_replica: int = _env("SPOTJOBS_MAX_ACCELERATORS_PER_REPLICA", 8, kind="int")
    default_max_attempts: int = _env("SPOTJOBS_DEFAULT_MAX_ATTEMPTS", 3, kind="int")
    max_attempts_ceiling: int = _env("SPOTJOBS_MAX_ATTEMPTS_CEILING", 10, kind="int")
    max_request_bytes: int = _env("SPOTJOBS_MAX_REQUEST_BYTES", 256 * 1024, kind="int")
    # Ceilings over the whole job (shared/requests/job_policy.py): accelerators summed over every replica of
    # every pool, replicas, worker pools, scheduling.timeout (Vertex's own default is 7 days), boot disk.
    max_accelerators_per_job: int = _env("SPOTJOBS_MAX_ACCELERATORS_PER_JOB", 16, kind="int")
    # Replicas summed over every pool: each is one VM, billed and preemptible on its own.
    max_replicas_per_job: int = _env("SPOTJOBS_MAX_REPLICAS_PER_JOB", 8, kind="int")
    max_pools_per_job: int = _env("SPOTJOBS_MAX_POOLS_PER_JOB", 2, kind="int")
    max_timeout_seconds: int = _env("SPOTJOBS_MAX_TIMEOUT_SECONDS", 7 * 86400, kind="int")
    # The running time a request may take over its continuations after the job timeout
    # (shared/deciding/continuations.py): a request's `max_runtime` may not exceed it, and it
    # bounds one that names none.
    max_runtime_seconds: int = _env("SPOTJOBS_MAX_RUNTIME_SECONDS", DEFAULT_MAX_RUNTIME_SECONDS, kind="int")
    max_boot_disk_gb: int = _env("SPOTJOBS_MAX_BOOT_DISK_GB", 1000, kind="int")
    # Fallback strategies a request may ask for (STANDARD, FLEX_START); empty = Spot only.
    allowed_fallback_strategies: tuple[str, ...] = _env("SPOTJOBS_ALLOWED_FALLBACK_STRATEGIES", (), kind="list")
    # Spot attempts a request must make before its fallback may start.
    min_spot_attempts: int = _env("SPOTJOBS_MIN_SPOT_ATTEMPTS", 1, kind="int")
    # The changeover (a move to a new attempt: launch, setup, checkpoint restore) a deadline is
    # planned with before any is seen on a machine type and location, and what validation assumes
    # when a request does not say (shared/deciding/deadline.py, docs/deadlines.md).
    changeover_prior_seconds: float = _env("SPOTJOBS_CHANGEOVER_PRIOR_SECONDS", 1200.0, kind="float")
    # The reconcile schedule's interval: a job waiting for Spot is seen by reconcile, so the
    # deadline rule decides that much early, and a dead pass's run lease more
    # (`shared.deciding.deadline_watch.longest_unasked_seconds`).
    reconcile_interval_seconds: float = _env("SPOTJOBS_RECONCILE_INTERVAL_SECONDS", 300.0, kind="float")
    # Reconcile's function timeout, as Terraform deploys it (`function_config.reconcile`): a pass
    # sends no Vertex call that could still be waiting when it is killed (`shared.reconcile_vertex.CallWindow`).
    reconcile_timeout_seconds: float = _env("SPOTJOBS_RECONCILE_TIMEOUT_SECONDS", 300.0, kind="float")
    # The trainer's checkpoint interval a deadline is planned with until the kit's commit lines
    # show one (the rule sees committed progress only: shared/deciding/deadline_watch.py).
    checkpoint_prior_seconds: float = _env("SPOTJOBS_CHECKPOINT_PRIOR_SECONDS", 3600.0, kind="float")
    # Regions a request may name in location/locations; empty = any region.
    allowed_locations: tuple[str, ...] = _env("SPOTJOBS_ALLOWED_LOCATIONS", (), kind="list")
    # Opt-ins: CustomJob fields outside the base allowlist, each refused until its setting allows
    # values. Resource names match exactly, or under an entry ending in "/" (a path prefix).
    allowed_networks: tuple[str, ...] = _env("SPOTJOBS_ALLOWED_NETWORKS", (), kind="list")
    allowed_network_attachments: tuple[str, ...] = _env("SPOTJOBS_ALLOWED_NETWORK_ATTACHMENTS", (), kind="list")
    allow_web_access: bool = _env("SPOTJOBS_ALLOW_WEB_ACCESS", False, kind="bool")
    allowed_mount_servers: tuple[str, ...] = _env("SPOTJOBS_ALLOWED_MOUNT_SERVERS", (), kind="list")
    allowed_persistent_resources: tuple[str, ...] = _env("SPOTJOBS_ALLOWED_PERSISTENT_RESOURCES", (), kind="list")
    allowed_reservations: tuple[str, ...] = _env("SPOTJOBS_ALLOWED_RESERVATIONS", (), kind="list")
    allowed_kms_keys: tuple[str, ...] = _env("SPOTJOBS_ALLOWED_KMS_KEYS", (), kind="list")
    allowed_tensorboards: tuple[str, ...] = _env("SPOTJOBS_ALLOWED_TENSORBOARDS", (), kind="list")
    allowed_experiments: tuple[str, ...] = _env("SPOTJOBS_ALLOWED_EXPERIMENTS", (), kind="list")
    allowed_models: tuple[str, ...] = _env("SPOTJOBS_ALLOWED_MODELS", (), kind="list")
    # Pub/Sub topics a request may name in `notify` (its own notifications), by prefix of the
    # topic path, e.g. projects/my-project/topics/ or projects/p/topics/team-a-; empty = none
    # may (fails closed: a request with `notify` is refused, never silently not notified).
    allowed_notify_topics: tuple[str, ...] = _env("SPOTJOBS_ALLOWED_NOTIFY_TOPICS", (), kind="list")
    # A bare body without a request id: the same content published again within this many seconds
    # of its first publish (or schedule_time) is the same request (shared/ledger/dedupe.py).
    bare_dedupe_seconds: float = _env("SPOTJOBS_BARE_DEDUPE_SECONDS", 300.0, kind="float")
    # A claim without a job older than this is taken over by a redelivery (its holder crashed).
    # It must cover a whole create: at least twice create_timeout_seconds (see from_env).
    claim_lease_seconds: float = _env("SPOTJOBS_CLAIM_LEASE_SECONDS", 120.0, kind="float")
    # A create is not retried by the client (it is not idempotent); this bounds one try, well inside
    # the push subscription's ack deadline, after which the outcome is unknown and settled by a
    # label lookup. Unset, it is 30 s, or half the lease when that is shorter (short test leases).
    create_timeout_seconds: float = _env(
        "SPOTJOBS_CREATE_TIMEOUT_SECONDS", DEFAULT_CREATE_TIMEOUT_SECONDS, kind="float"
    )

    # Event handling: what a job-state event means and how long it stays news.
    max_event_age_seconds: float = _env("SPOTJOBS_MAX_EVENT_AGE_SECONDS", 86400.0, kind="float")
    preemption_patterns: tuple[str, ...] = _env(
        "SPOTJOBS_PREEMPTION_PATTERNS", _DEFAULT_PREEMPTION_PATTERNS, kind="list"
    )
    stockout_patterns: tuple[str, ...] = _env("SPOTJOBS_STOCKOUT_PATTERNS", _DEFAULT_STOCKOUT_PATTERNS, kind="list")
    preemption_storm_threshold: int = _env("SPOTJOBS_PREEMPTION_STORM_THRESHOLD", 4, kind="int")
    requeue_delay_seconds: float = _env("SPOTJOBS_REQUEUE_DELAY_SECONDS", 0.0, kind="float")
    # A published re-queue still unclaimed after this was lost (dead-lettered): reconcile resends it.
    unclaimed_requeue_seconds: float = _env("SPOTJOBS_UNCLAIMED_REQUEUE_SECONDS", 900.0, kind="float")
    stuck_after_seconds: float = _env("SPOTJOBS_STUCK_AFTER_SECONDS", 6 * 3600.0, kind="float")
    # A SUCCEEDED job whose kit lines show its last run preempted and unfinished waits this long
    # after its end for later lines (a restart's run_started may still be on its way) before it
    # is judged incomplete and re-queued.
    kit_lines_settle_seconds: float = _env("SPOTJOBS_KIT_LINES_SETTLE_SECONDS", 300.0, kind="float")
    log_level: str = _env("SPOTJOBS_LOG_LEVEL", "INFO")
    # Re-publishes of a claim that never got a job before reconcile alerts (it keeps re-publishing:
    # a request is failed only when Vertex refuses it, never because a side was down).
    max_claim_republishes: int = _env("SPOTJOBS_MAX_CLAIM_REPUBLISHES", 5, kind="int")
    # How long Vertex's customJobs.list may lag a create: a delivery that takes a claim over after
    # a create was sent, and finds no job, waits this long after the send before creating.
    list_lag_seconds: float = _env("SPOTJOBS_LIST_LAG_SECONDS", 60.0, kind="float")
    # Vertex AI's request quotas per project and region (https://cloud.google.com/vertex-ai/docs/quotas):
    # creates are paced below the submission quota (shared/pacing.py: 58, not 60, so that no
    # minute can hold 61 creates whatever their timing inside their slots), and reconcile spends
    # at most `reconcile_crud_share` of the CRUD quota per pass.
    vertex_creates_per_minute: int = _env("SPOTJOBS_VERTEX_CREATES_PER_MINUTE", 58, kind="int")
    vertex_crud_per_minute: int = _env("SPOTJOBS_VERTEX_CRUD_PER_MINUTE", 600, kind="int")
    reconcile_crud_share: float = _env("SPOTJOBS_RECONCILE_CRUD_SHARE", 0.5, kind="float")
    # How long one submit_job delivery (from its start) drains the waiting queue before handing over
    # (inside the push subscription's 60 s acknowledgement deadline, with room for its last create;
    # it ends sooner where that create's timeout would not fit: `shared.pacing_drainer.drainer_run_seconds`).
    pacer_run_seconds: float = _env("SPOTJOBS_PACER_RUN_SECONDS", 40.0, kind="float")
    # submit_job's function timeout, as Terraform deploys it (`function_config.submit_job`): a
    # drainer begins no create whose create timeout would outlast it (`shared.pacing_drainer.drain`).
    submit_timeout_seconds: float = _env("SPOTJOBS_SUBMIT_TIMEOUT_SECONDS", 60.0, kind="float")
    # A line that drains within this long is pacing, not a quota problem: `quota_limited` is
    # alerted only once a line needs longer (by default a minute's worth of the quota waits).
    quota_alert_after_seconds: float = _env("SPOTJOBS_QUOTA_ALERT_AFTER_SECONDS", 60.0, kind="float")
    reconcile_page_size: int = _env("SPOTJOBS_RECONCILE_PAGE_SIZE", 200, kind="int")
    reconcile_requests_per_run: int = _env("SPOTJOBS_RECONCILE_REQUESTS_PER_RUN", 2000, kind="int")
    # A finished request's ledger record is removed this long after it finished (0: kept forever;
    # never less than 32 days, see shared/ledger/retention.py), archived first unless turned off.
    ledger_retention_seconds: float = _env("SPOTJOBS_LEDGER_RETENTION_SECONDS", 90 * 86400.0, kind="float")
    ledger_archive: bool = _env("SPOTJOBS_LEDGER_ARCHIVE", True, kind="bool")

    # Retraining triggers (shared/triggers/): a window closes at the first tick at least this long
    # after its end (covers handlers still recording its last notifications), and each instance
    # re-reads the trigger definitions at most this often.
    trigger_settle_seconds: float = _env("SPOTJOBS_TRIGGER_SETTLE_SECONDS", 30.0, kind="float")
    trigger_cache_seconds: float = _env("SPOTJOBS_TRIGGER_CACHE_SECONDS", 30.0, kind="float")

    # Checkpoint pruning: what is kept.
    keep_last: int = _env("SPOTJOBS_KEEP_LAST", 2, kind="int")
    keep_last_ceiling: int = _env("SPOTJOBS_KEEP_LAST_CEILING", 20, kind="int")
    incomplete_grace_seconds: float = _env("SPOTJOBS_INCOMPLETE_GRACE_SECONDS", 3600.0, kind="float")
    finished_retention_seconds: float = _env("SPOTJOBS_FINISHED_RETENTION_SECONDS", 7 * 86400.0, kind="float")
    keep_final_checkpoint: bool = _env("SPOTJOBS_KEEP_FINAL_CHECKPOINT", True, kind="bool")
    commit_markers: tuple[str, ...] = _env(COMMIT_MARKERS_ENV, _DEFAULT_COMMIT_MARKERS, kind="list")
    prune_workers: int = _env("SPOTJOBS_PRUNE_WORKERS", 32, kind="int")
    prune_requests_per_run: int = _env("SPOTJOBS_PRUNE_REQUESTS_PER_RUN", 2000, kind="int")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        environ = os.environ if environ is None else environ
        values: dict[str, object] = {}
        for f in dataclasses.fields(cls):
            raw = environ.get(f.metadata["env"])
            if raw is not None and raw.strip() != "":
                values[f.name] = _convert(f.metadata["env"], raw.strip(), f.metadata["kind"])
            elif raw is not None and f.metadata["kind"] == "list":
                values[f.name] = ()  # set but empty: an explicitly empty list
        if "create_timeout_seconds" not in values:
            lease = float(values.get("claim_lease_seconds", cls.claim_lease_seconds))
            values["create_timeout_seconds"] = min(DEFAULT_CREATE_TIMEOUT_SECONDS, lease / 2)
        settings = cls(**values)
        settings._check_create_fits_in_lease()
        settings._check_patterns()
        settings._check_image_prefixes()
        settings._check_commit_markers()
        settings._check_training_classes()
        return settings

    def check_deployable(self) -> None:
        """Fail closed where jobs are really created (no SPOTJOBS_VERTEX_ENDPOINT: Vertex AI itself).

        Without a training service account a job request naming none would run as Vertex's default
        identity, and the service-account allowlist would have nothing to hold it to. submit_job
        calls this before handling any request; the offline CLI does not need it."""
        if self.vertex_endpoint:
            return
        if not self.training_service_account:
            raise ConfigurationError(
                "SPOTJOBS_TRAINING_SERVICE_ACCOUNT is unset: jobs would run as Vertex AI's default "
                "service account; set it to the training service account (Terraform does)"
            )
        if self.allowed_locations and self.location not in self.allowed_locations:
            raise ConfigurationError(
                f"SPOTJOBS_LOCATION={self.location} is not in SPOTJOBS_ALLOWED_LOCATIONS="
                f"{','.join(self.allowed_locations)}: requests without a location would be refused"
            )

    @property
    def deployment_label(self) -> str:
        """The value of the jobs' deployment label."""
        import re

        raw = (self.deployment or self.state_bucket).lower()
        return re.sub(r"[^a-z0-9_-]", "-", raw)[:63] or "default"

    @property
    def vertex_call_timeout_seconds(self) -> float:
        """The timeout of every Vertex call but the create (get, list and each page of it, cancel):
        the create's. The client's own default is none (aiplatform_v1's JobService wraps each
        method with `default_timeout=None` and no retry), so a reply that never comes would hold
        the handler, and what it holds (a claim, reconcile's run lease, a delivery), until the
        function's own timeout killed the instance. The create's bound already fits: half the
        claim lease at most (a take-over's lookup then leaves its create its place), and half the
        push deliveries' 60 s function timeout (Terraform's default), so the call's
        DeadlineExceeded is handled, logged and answered before the instance is killed."""
        return self.create_timeout_seconds

    @property
    def create_deadline_seconds(self) -> float:
        """How long after its claim a delivery may still send the create: later, the create could
        still be in flight when the lease ends and a redelivery takes over and creates a second
        job."""
        return self.claim_lease_seconds - self.create_timeout_seconds * (1 + CREATE_MARGIN_FRACTION)

    def _check_patterns(self) -> None:
        """A bad pattern fails the instance at its first delivery (redelivered, then dead-lettered,
        so someone notices) instead of quietly acknowledging every event it cannot classify."""
        import re

        for name in ("preemption_patterns", "stockout_patterns"):
            for pattern in getattr(self, name):
                try:
                    re.compile(pattern)
                except re.error as exc:
                    env = next(f.metadata["env"] for f in dataclasses.fields(self) if f.name == name)
                    raise ConfigurationError(f"{env}: {pattern!r} is not a regular expression: {exc}") from None

    def _check_image_prefixes(self) -> None:
        from shared.image_ref import BadReference, parse_prefix

        for entry in self.allowed_image_prefixes:
            try:
                parse_prefix(entry)
            except BadReference as exc:
                raise ConfigurationError(f"SPOTJOBS_ALLOWED_IMAGE_PREFIXES: {exc}") from None

    @property
    def training_class_accounts(self) -> dict[str, str]:
        """Request id prefix -> the service account its requests run as."""
        return dict(entry.split("=", 1) for entry in self.training_classes)

    def _check_training_classes(self) -> None:
        # A prefix inside another would put one class's folders inside the other's grant.
        import re

        from shared.jobs import RESERVED_ID_PREFIXES

        prefixes = []
        for entry in self.training_classes:
            prefix, _, account = entry.partition("=")
            if not re.fullmatch(r"[a-z][a-z0-9_-]{0,40}", prefix) or "@" not in account:
                raise ConfigurationError(
                    f"SPOTJOBS_TRAINING_CLASSES: {entry!r} is not <request id prefix>=<service account>"
                    " (a prefix of lowercase letters, digits, - and _ that starts with a letter)"
                )
            if prefix.startswith(RESERVED_ID_PREFIXES) or any(
                prefix.startswith(other) or other.startswith(prefix) for other in prefixes
            ):
                raise ConfigurationError(
                    f"SPOTJOBS_TRAINING_CLASSES: prefix {prefix!r} overlaps another class's or spotjobs' own"
                    f" ({', '.join(RESERVED_ID_PREFIXES)})"
                )
            prefixes.append(prefix)

    def _check_commit_markers(self) -> None:
        # An empty list would mean "the kit's defaults" to the jobs (spotjobs_kit.Run reads an
        # empty variable so) and "no marker completes anything" to the pruner: two lists again.
        if not self.commit_markers:
            raise ConfigurationError(
                f"{COMMIT_MARKERS_ENV} is set but empty: name at least one commit marker, or unset it for the defaults"
            )

    def _check_create_fits_in_lease(self) -> None:
        # Checked for the environment's settings only: tests build others with dataclasses.replace.
        timeout, lease = self.create_timeout_seconds, self.claim_lease_seconds
        if timeout <= 0:
            raise ConfigurationError(
                f"SPOTJOBS_CREATE_TIMEOUT_SECONDS={timeout} and SPOTJOBS_CLAIM_LEASE_SECONDS={lease} must be positive"
            )
        if lease < 2 * timeout:
            raise ConfigurationError(
                f"SPOTJOBS_CLAIM_LEASE_SECONDS={lease} must be at least twice "
                f"SPOTJOBS_CREATE_TIMEOUT_SECONDS={timeout}: a claim holder sends its create "
                "only while the create and a margin still fit in the lease"
            )
        if timeout >= self.submit_timeout_seconds:
            raise ConfigurationError(
                f"SPOTJOBS_CREATE_TIMEOUT_SECONDS={timeout} must be shorter than submit_job's function timeout "
                f"SPOTJOBS_SUBMIT_TIMEOUT_SECONDS={self.submit_timeout_seconds}: a drainer begins a create only "
                "while its timeout fits in what is left of the delivery's"
            )

    @property
    def checkpoint_root(self) -> str:
        """gs:// URI under which every request's output directory lives."""
        return f"gs://{self.checkpoint_bucket}/{self.checkpoint_prefix.strip('/')}/"

    def output_dir_for(self, request_id: str) -> str:
        return f"{self.checkpoint_root}{request_id}/"

    def as_env(self) -> dict[str, str]:
        """The environment that reproduces these settings (for child processes and shells)."""
        env: dict[str, str] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, tuple):
                env[f.metadata["env"]] = ",".join(value)
            elif isinstance(value, bool):
                env[f.metadata["env"]] = "true" if value else "false"
            else:
                env[f.metadata["env"]] = str(value)
        return env


def _convert(name: str, raw: str, kind: str) -> object:
    try:
        if kind == "int":
            return int(raw)
        if kind == "float":
            return float(raw)
        if kind == "bool":
            lowered = raw.lower()
            if lowered in {"1", "true", "yes", "on"}:
                return True
            if lowered in {"0", "false", "no", "off"}:
                return False
            raise ValueError(raw)
        if kind == "list":
            return tuple(item.strip() for item in raw.split(",") if item.strip())
        return raw
    except ValueError:
        raise ConfigurationError(f"{name}={raw!r} is not a valid {kind}") from None


@functools.cache
def get_settings() -> Settings:
    """The process-wide settings, read on first use (not at import, so cold starts stay cheap)."""
    return Settings.from_env()
