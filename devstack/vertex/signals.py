"""Signal profiles: what the emulator lets a client observe of a job's life.

Project rule: the Vertex emulator does what Google documents and nothing more by default; each
behaviour names its source, and anything invented is opt-in and never required for spotjobs to
work. So there are two profiles:

`documented` (the default) is only what Google documents, with the shapes public captures show:

- States are those of `job_state.proto` (QUEUED, PENDING, RUNNING, then a terminal state; there
  is no restarting state): https://github.com/googleapis/googleapis/blob/master/google/cloud/aiplatform/v1/job_state.proto
- A Spot preemption: "When Spot VMs are preempted, the serverless training job fails with a
  `STOCKOUT` error and Compute Engine tries to restart the job up to six times."
  (https://docs.cloud.google.com/gemini-enterprise-agent-platform/machine-learning/training/use-spot-vms,
  formerly https://cloud.google.com/vertex-ai/docs/training/use-spot-vms). Nothing documents a
  log line or a state change per preemption, so the only trace of one is what the worker sees: SIGTERM,
  SIGKILL after the grace period, a fresh start. The job stays RUNNING throughout; after the
  restarts run out it is FAILED with a STOCKOUT error.
- "About one minute after a job ends, [Vertex] sets the error code on the training job object"
  (https://cloud.google.com/vertex-ai/docs/training/understanding-training-service): `error`
  appears `error_delay_seconds` after the final state (60 by default; tests shorten it).
- Service lines are `textPayload` at INFO with the texts public `gcloud ai custom-jobs
  stream-logs` captures show ("Waiting for job to be provisioned.", "Job is preparing.", "Job is
  running.", "Tearing down training program.", "Finished tearing down training program.",
  "Job completed successfully."; "Job failed." from AI Platform Training captures, the same
  `ml_job` resource). Container lines are `textPayload`, stdout at INFO and stderr at ERROR
  (the same captures).

`rich` is the emulator's earlier, invented behaviour, kept for what spotjobs may use when present
and must never need: a WARNING service line per preemption, RUNNING -> PENDING -> RUNNING on each
restart, service lines as `jsonPayload` with ERROR on failures, error code 8, JSON container lines
as `jsonPayload`, and `error` set with the final state.
"""

from __future__ import annotations

from dataclasses import dataclass

from devstack.vertex import logs as lines

DOCUMENTED = "documented"
RICH = "rich"
PROFILES = (DOCUMENTED, RICH)
DEFAULT_PROFILE = DOCUMENTED

# google.rpc codes (https://github.com/googleapis/googleapis/blob/master/google/rpc/code.proto).
UNKNOWN_CODE = 2
RESOURCE_EXHAUSTED_CODE = 8

ServiceLines = list[tuple[str, str]]  # (severity, text)


@dataclass(frozen=True)
class SignalProfile:
    name: str
    # Service lines as jsonPayload {"message"} (rich) or textPayload (documented).
    service_lines_as_json: bool
    # A container line that is a JSON object with a "message": jsonPayload with the line's own
    # severity (rich), or textPayload like any other line (documented). Whether Vertex stores such
    # a line as jsonPayload is not documented (Cloud Logging's structured logging describes the
    # agent's parsing, https://cloud.google.com/logging/docs/structured-logging, not Vertex's), so
    # a reader must recognise a line by its text either way.
    structured_container_lines: bool
    # Vertex documents neither; invented, rich only.
    preemption_service_line: bool
    pending_on_restart: bool
    # Seconds between a job's final state and its `error`, unless configured.
    default_error_delay_seconds: float

    @property
    def rich(self) -> bool:
        return self.name == RICH

    # ---- the service lines of each moment ----

    def created(self) -> ServiceLines:
        # The capture's first line is "Waiting for job to be provisioned."; rich says "preparing".
        return [("INFO", lines.PREPARING if self.rich else lines.PROVISIONING)]

    def pending(self) -> ServiceLines:
        return [("INFO", lines.PROVISIONING if self.rich else lines.PREPARING)]

    def running(self) -> ServiceLines:
        return [("INFO", lines.RUNNING)]

    def preempted(self, restart: int, replica: str = lines.PRIMARY_REPLICA, *, whole_job: bool = True) -> ServiceLines:
        if not self.preemption_service_line:
            return []
        return [("WARNING", lines.preempted_and_restarting(restart, replica, whole_job=whole_job))]

    def succeeded(self) -> ServiceLines:
        if self.rich:
            return [("INFO", lines.TEARDOWN), ("INFO", lines.SUCCEEDED)]
        return [("INFO", lines.TEARING_DOWN), ("INFO", lines.TEARDOWN), ("INFO", lines.SUCCEEDED)]

    def exited(self, message: str) -> ServiceLines:
        """A non-zero exit; `message` is the job's error (documented in the error table of
        "Understanding the training service"), a service line only in rich."""
        if self.rich:
            return [("ERROR", message), ("INFO", lines.TEARDOWN), ("ERROR", lines.FAILED)]
        return [("INFO", lines.TEARING_DOWN), ("INFO", lines.TEARDOWN), ("INFO", lines.FAILED)]

    def failed(self, message: str) -> ServiceLines:
        """Any other failure (stockout, unrunnable job, emulator error)."""
        if self.rich:
            return [("ERROR", message), ("ERROR", lines.FAILED)]
        return [("INFO", lines.FAILED)]

    def cancelled(self) -> ServiceLines:
        # No cancellation line is documented or captured; rich invents one.
        return [("INFO", lines.CANCELLED)] if self.rich else []

    def stockout(self, preemptions: int, replica: str = lines.PRIMARY_REPLICA) -> tuple[int, str]:
        """The error of a job whose Spot restarts ran out.

        Only "a STOCKOUT error" is documented: no code, no message text. `documented` says
        STOCKOUT in the message and carries google.rpc UNKNOWN (2), the code for "errors raised
        by APIs that do not return enough error information": spotjobs must not depend on the
        code, and a code it does not treat specially (8 is in its capacity codes; 13 INTERNAL is
        what Vertex documents for its own internal errors, with their own message and retries)
        proves it reads the message. `rich` keeps the invented RESOURCE_EXHAUSTED (8).
        """
        if self.rich:
            return RESOURCE_EXHAUSTED_CODE, lines.stockout(preemptions, replica)
        return UNKNOWN_CODE, lines.STOCKOUT_DOCUMENTED


_PROFILES = {
    DOCUMENTED: SignalProfile(
        name=DOCUMENTED,
        service_lines_as_json=False,
        structured_container_lines=False,
        preemption_service_line=False,
        pending_on_restart=False,
        default_error_delay_seconds=60.0,  # "About one minute after a job ends"
    ),
    RICH: SignalProfile(
        name=RICH,
        service_lines_as_json=True,
        structured_container_lines=True,
        preemption_service_line=True,
        pending_on_restart=True,
        default_error_delay_seconds=0.0,
    ),
}


def profile(name: str) -> SignalProfile:
    """Raises ValueError for a name that is not a profile."""
    try:
        return _PROFILES[name]
    except KeyError:
        raise ValueError(f"signals must be one of {list(PROFILES)}: {name!r}") from None
