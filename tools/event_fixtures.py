"""Write the documented-shape log entry fixtures under tests/events/ (deterministic).

    .venv/bin/python -m tools.event_fixtures           # rewrite them
    .venv/bin/python -m tools.event_fixtures --check   # exit 1 if a file differs

The shapes are the ones docs/signals.md describes: `ml_job` LogEntries with `logName`
`projects/P/logs/ml.googleapis.com%2F<job_id>` and `resource.labels` `job_id`, `task_name`
(`service` for Vertex's own lines, `workerpool0-0` for the primary replica) and `project_id`;
service lines as `textPayload` at INFO; the trainer kit's lines made by
`spotjobs_kit.lines.format_line` (what `Run.emit` prints), stored either as `jsonPayload` (the
JSON line parsed: `severity` lifted out into the entry, numbers as doubles) or as `textPayload`
(the line as printed). The captured files are what `gcloud logging read --format=json` prints: a
JSON array, newest first, keys sorted, nanosecond timestamps. The job files are what
`gcloud ai custom-jobs describe --format=json` prints: a CustomJob in REST JSON.

The error of the FAILED job is illustrative: Vertex documents that a Spot job whose restarts run
out "fails with a STOCKOUT error", not the exact message or code (docs/signals.md).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from spotjobs_kit.lines import (
    CHECKPOINT_COMMITTED,
    PREEMPTED,
    RUN_FINISHED,
    RUN_STARTED,
    format_line,
)

ROOT = Path(__file__).resolve().parents[1] / "tests" / "events"
DOCUMENTED = ROOT / "log_entries" / "documented"
CAPTURED = ROOT / "log_entries" / "captured"
JOBS = ROOT / "jobs"

PROJECT = "my-project"
PROJECT_NUMBER = "123456789012"
LOCATION = "us-central1"
DEPLOYMENT = "prod"
SERVICE = "service"
WORKER = "workerpool0-0"

SUCCEEDED_JOB = "2238490567215693824"
SUCCEEDED_REQUEST = "resnet50-nightly"
STOCKOUT_JOB = "5837261940182736896"
STOCKOUT_REQUEST = "llm-finetune-7b"
# Illustrative (see the module docstring); matches the default stockout pattern, not code 8.
STOCKOUT_ERROR = {"code": 13, "message": "The job failed with a STOCKOUT error."}


def _nanos(moment: datetime) -> str:
    """RFC 3339 with nanoseconds, as Cloud Logging returns times."""
    return f"{moment:%Y-%m-%dT%H:%M:%S}.{moment.microsecond:06d}417Z"


def _millis(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Job:
    """One job's entries, built in time order."""

    def __init__(self, job_id: str, request_id: str, start: datetime) -> None:
        self.job_id, self.request_id, self.start = job_id, request_id, start
        self.entries: list[dict[str, Any]] = []
        self.kit_lines: list[tuple[float, str, int, int, dict[str, Any]]] = []  # kit() arguments

    def _entry(self, at: float, task: str, severity: str, payload: dict[str, Any]) -> dict[str, Any]:
        moment = self.start + timedelta(seconds=at)
        identity = json.dumps([self.job_id, task, at, payload], sort_keys=True)
        entry = {
            "insertId": hashlib.sha1(identity.encode()).hexdigest()[:14],
            "logName": f"projects/{PROJECT}/logs/ml.googleapis.com%2F{self.job_id}",
            "receiveTimestamp": _nanos(moment + timedelta(milliseconds=312)),
            "resource": {
                "labels": {"job_id": self.job_id, "project_id": PROJECT, "task_name": task},
                "type": "ml_job",
            },
            "severity": severity,
            "timestamp": _nanos(moment),
            **payload,
        }
        self.entries.append(entry)
        return entry

    def service(self, at: float, text: str, severity: str = "INFO") -> dict[str, Any]:
        return self._entry(at, SERVICE, severity, {"textPayload": text})

    def worker(self, at: float, text: str, severity: str = "INFO") -> dict[str, Any]:
        """A plain container line: stdout at INFO, stderr at ERROR."""
        return self._entry(at, WORKER, severity, {"textPayload": text})

    @property
    def kit_key(self) -> str:
        """The attempt's key (illustrative, derived from the job id): submit draws one per attempt
        and puts it in the job's env; the kit signs every line with it."""
        return hashlib.sha256(f"fixture key of {self.job_id}".encode()).hexdigest()

    def kit(self, at: float, event: str, run: int, form: str, attempt: int = 1, **fields: Any) -> dict[str, Any]:
        """A kit line as `Run.emit` prints it, signed, stored as `jsonPayload` or `textPayload`."""
        self.kit_lines.append((at, event, run, attempt, fields))
        line = format_line(
            event,
            {
                "request_id": self.request_id,
                "attempt": attempt,
                "run": run,
                "job_id": self.job_id,
                **fields,
                "time": _millis(self.start + timedelta(seconds=at)),
            },
            key=self.kit_key,
        )
        if form == "text":
            return self._entry(at, WORKER, "INFO", {"textPayload": line})
        parsed = json.loads(line)
        severity = parsed.pop("severity")
        parsed["spotjobs_kit"] = {k: _double(v) for k, v in parsed["spotjobs_kit"].items()}
        return self._entry(at, WORKER, severity, {"jsonPayload": parsed})

    def job_json(self, state: str, end_seconds: float, error: dict[str, Any] | None = None) -> dict[str, Any]:
        end = self.start + timedelta(seconds=end_seconds)
        job: dict[str, Any] = {
            "createTime": _micros(self.start - timedelta(seconds=9)),
            "displayName": f"{self.request_id}-a1",
            "endTime": _micros(end),
            "jobSpec": {
                "baseOutputDirectory": {
                    "outputUriPrefix": f"gs://{PROJECT}-spotjobs-checkpoints/requests/{self.request_id}/"
                },
                "scheduling": {"strategy": "SPOT"},
                "serviceAccount": f"spotjobs-training@{PROJECT}.iam.gserviceaccount.com",
                "workerPoolSpecs": [
                    {
                        "containerSpec": {
                            "env": [
                                {"name": "SPOTJOBS_REQUEST_ID", "value": self.request_id},
                                {"name": "SPOTJOBS_ATTEMPT", "value": "1"},
                                {"name": "SPOTJOBS_KIT_KEY", "value": self.kit_key},
                            ],
                            "imageUri": f"us-docker.pkg.dev/{PROJECT}/trainers/{self.request_id}:1",
                        },
                        "diskSpec": {"bootDiskSizeGb": 100, "bootDiskType": "pd-ssd"},
                        "machineSpec": {
                            "acceleratorCount": 1,
                            "acceleratorType": "NVIDIA_L4",
                            "machineType": "g2-standard-8",
                        },
                        "replicaCount": "1",
                    }
                ],
            },
            "labels": {
                "spotjobs-attempt": "1",
                "spotjobs-deployment": DEPLOYMENT,
                "spotjobs-request-id": self.request_id,
            },
            "name": f"projects/{PROJECT_NUMBER}/locations/{LOCATION}/customJobs/{self.job_id}",
            "startTime": _micros(self.start + timedelta(seconds=60)),
            "state": state,
            "updateTime": _micros(end + timedelta(seconds=1)),
        }
        if error is not None:
            job["error"] = error
        return job


def _double(value: Any) -> Any:
    """Cloud Logging keeps jsonPayload numbers as doubles."""
    return float(value) if isinstance(value, int) and not isinstance(value, bool) else value


def _micros(moment: datetime) -> str:
    return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")


def _provisioning(job: Job) -> None:
    # The service lines of a public transcript of a Vertex AI custom job, in its order.
    job.service(0, "Waiting for job to be provisioned.")
    job.service(20, "Vertex AI is setting up this job.")
    job.service(45, "Waiting for training program to start.")
    job.service(55, "Job is preparing.")
    job.service(60, "Job is running.")


def preempted_twice_succeeded() -> tuple[Job, dict[str, Any]]:
    job = Job(SUCCEEDED_JOB, SUCCEEDED_REQUEST, datetime(2026, 11, 29, 9, 0, tzinfo=UTC))
    _provisioning(job)
    job.kit(70, RUN_STARTED, 0, "json", resumed_step=None, checkpoint=None)
    job.worker(75, "step 100 loss 2.3104")
    job.kit(130, CHECKPOINT_COMMITTED, 0, "json", step=200, seconds=4.211, checkpoint="step-000200", bytes=104857600)
    job.kit(190, PREEMPTED, 0, "json", step=250, seconds_since_checkpoint=60.02)
    # Documented Vertex says nothing here: the job stays RUNNING while the worker restarts.
    job.kit(300, RUN_STARTED, 1, "text", resumed_step=200, checkpoint="step-000200")
    job.worker(301, "UserWarning: torch.cuda.amp.GradScaler(args...) is deprecated.", "ERROR")
    job.kit(400, CHECKPOINT_COMMITTED, 1, "text", step=400, seconds=4.007, checkpoint="step-000400", bytes=104857600)
    job.kit(460, PREEMPTED, 1, "text", step=430, seconds_since_checkpoint=59.87)
    job.kit(600, RUN_STARTED, 2, "json", resumed_step=400, checkpoint="step-000400")
    job.kit(700, CHECKPOINT_COMMITTED, 2, "json", step=600, seconds=4.118, checkpoint="step-000600", bytes=104857600)
    job.kit(701, RUN_FINISHED, 2, "json", step=600)
    job.worker(705, "Task completed. Exit code (0). Exit reason (SUCCEEDED)")
    job.service(710, "Tearing down training program.")
    job.service(720, "Finished tearing down training program.")
    job.service(725, "Job completed successfully.")
    return job, job.job_json("JOB_STATE_SUCCEEDED", 725)


def preempted_7_stockout() -> tuple[Job, dict[str, Any]]:
    job = Job(STOCKOUT_JOB, STOCKOUT_REQUEST, datetime(2026, 11, 30, 2, 0, tzinfo=UTC))
    _provisioning(job)
    for run in range(7):  # the first run and Vertex's six restarts, each preempted
        base, form = 70 + run * 600, "json" if run % 2 == 0 else "text"
        resumed = run * 200 if run else None
        job.kit(
            base, RUN_STARTED, run, form, resumed_step=resumed, checkpoint=f"step-{resumed:06d}" if resumed else None
        )
        job.kit(
            base + 300,
            CHECKPOINT_COMMITTED,
            run,
            form,
            step=(run + 1) * 200,
            seconds=12.5,
            checkpoint=f"step-{(run + 1) * 200:06d}",
            bytes=14_000_000_000,
        )
        if run != 3:  # run 3 was killed without notice: no `preempted` line, the next start says it
            job.kit(base + 400, PREEMPTED, run, form, step=(run + 1) * 200 + 50, seconds_since_checkpoint=100.0)
    end = 70 + 6 * 600 + 420
    job.service(end, "Job failed.")
    return job, job.job_json("JOB_STATE_FAILED", end, STOCKOUT_ERROR)


def files() -> dict[Path, Any]:
    """Every fixture file and its content."""
    succeeded, succeeded_job = preempted_twice_succeeded()
    stockout, stockout_job = preempted_7_stockout()
    out: dict[Path, Any] = {
        CAPTURED / "preempted_twice_succeeded.json": list(reversed(succeeded.entries)),
        CAPTURED / "preempted_7_stockout.json": list(reversed(stockout.entries)),
        JOBS / "preempted_twice_succeeded.json": succeeded_job,
        JOBS / "preempted_7_stockout.json": stockout_job,
    }
    by_text = {e.get("textPayload"): e for e in succeeded.entries + stockout.entries}
    singles = {
        "service_provisioning": by_text["Waiting for job to be provisioned."],
        "service_setting_up": by_text["Vertex AI is setting up this job."],
        "service_preparing": by_text["Job is preparing."],
        "service_running": by_text["Job is running."],
        "service_teardown": by_text["Finished tearing down training program."],
        "service_succeeded": by_text["Job completed successfully."],
        "service_failed": by_text["Job failed."],
        "worker_stdout": by_text["step 100 loss 2.3104"],
        "worker_stderr": next(e for e in succeeded.entries if e["severity"] == "ERROR"),
    }
    # Each kit event's first line in the succeeded job, stored both ways.
    twins = Job(SUCCEEDED_JOB, SUCCEEDED_REQUEST, succeeded.start)
    for at, event, run, attempt, fields in succeeded.kit_lines:
        if f"kit_{event}_json" not in singles:
            for form in ("json", "text"):
                singles[f"kit_{event}_{form}"] = twins.kit(at, event, run, form, attempt, **fields)
    for name, entry in singles.items():
        out[DOCUMENTED / f"{name}.json"] = entry
    return out


def render(content: Any) -> str:
    return json.dumps(content, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a file differs")
    args = parser.parse_args(argv)
    stale = []
    for path, content in files().items():
        text = render(content)
        if args.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(path)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    for path in stale:
        print(f"stale: {path} (run python -m tools.event_fixtures)", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
