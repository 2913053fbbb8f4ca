"""From a trigger's request template and a closed window to the job request it publishes.

Placeholders in any string of `request` (`{trigger}` ...) are replaced; other text, braces
included, is left alone. After rendering, spotjobs sets what the trainer needs to find the window's
data, in every worker pool and as labels:

- env `SPOTJOBS_MANIFEST_URI` (the manifest's gs:// URI), `SPOTJOBS_TRIGGER`, `SPOTJOBS_WINDOW_ID`
  (`SPOTJOBS_*` is not a name the request policy reserves, so submit_job accepts them);
- labels `retrain-trigger` and `retrain-window` (label values cannot hold a URI; the window id
  names the manifest: `gs://<state bucket>/manifests/trg-<trigger>-<window id>.json`).

The result is checked with the request policy (`shared.requests.policy.validate_request`), exactly as
submit_job will check it, so a trigger never publishes what submit would reject.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from shared.clock import iso
from shared.errors import Violation
from shared.jobs import TRIGGER_ID_PREFIX
from shared.requests.envelope import manifest_path

PLACEHOLDERS = ("trigger", "window_id", "window_start", "window_end", "manifest_uri", "object_count")
_PLACEHOLDER = re.compile(r"\{([a-z_]+)\}")
MANIFEST_ENV = "SPOTJOBS_MANIFEST_URI"
TRIGGER_ENV = "SPOTJOBS_TRIGGER"
WINDOW_ENV = "SPOTJOBS_WINDOW_ID"
TRIGGER_LABEL = "retrain-trigger"
WINDOW_LABEL = "retrain-window"
REQUEST_ID_PREFIX = TRIGGER_ID_PREFIX


@dataclass(frozen=True)
class Window:
    """[start, start + length) in UTC; its id sorts like its start and is a valid label value."""

    start: datetime
    seconds: int

    @classmethod
    def containing(cls, moment: datetime, seconds: int) -> Window:
        epoch = int(moment.timestamp())
        return cls(datetime.fromtimestamp(epoch - epoch % seconds, UTC), seconds)

    @classmethod
    def from_id(cls, window_id: str, seconds: int) -> Window:
        start = datetime.strptime(window_id, "w%Y%m%dt%H%M%Sz").replace(tzinfo=UTC)
        return cls(start, seconds)

    @property
    def id(self) -> str:
        return self.start.strftime("w%Y%m%dt%H%M%Sz")

    @property
    def end(self) -> datetime:
        return self.start + timedelta(seconds=self.seconds)


def request_id_for(trigger: str, window_id: str) -> str:
    """The request id of a trigger's window: the same for every delivery and every instance, so
    submit_job's ledger claim absorbs a second publish."""
    return f"{REQUEST_ID_PREFIX}{trigger}-{window_id}"


def template_violations(template: object, path: str) -> list[Violation]:
    """Placeholders a template names that do not exist."""
    out: list[Violation] = []
    for where, text in _strings(template, path):
        for name in _PLACEHOLDER.findall(text):
            if name not in PLACEHOLDERS:
                out.append(Violation(where, f"unknown placeholder {{{name}}}; known: {', '.join(PLACEHOLDERS)}"))
    return out


def _strings(value: object, path: str) -> list[tuple[str, str]]:
    if isinstance(value, str):
        return [(path, value)]
    if isinstance(value, Mapping):
        return [s for k, v in value.items() for s in _strings(v, f"{path}.{k}")]
    if isinstance(value, list):
        return [s for i, v in enumerate(value) for s in _strings(v, f"{path}[{i}]")]
    return []


def render(
    template: Mapping[str, Any],
    *,
    trigger: str,
    window: Window,
    manifest_uri: str,
    object_count: int,
) -> dict[str, Any]:
    """The envelope a window publishes (unchecked): placeholders replaced, request id, env, labels."""
    values = {
        "trigger": trigger,
        "window_id": window.id,
        "window_start": iso(window.start, timespec="seconds"),
        "window_end": iso(window.end, timespec="seconds"),
        "manifest_uri": manifest_uri,
        "object_count": str(object_count),
    }

    def substitute(value: Any) -> Any:
        if isinstance(value, str):
            return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), value)
        if isinstance(value, Mapping):
            return {k: substitute(v) for k, v in value.items()}
        if isinstance(value, list):
            return [substitute(v) for v in value]
        return value

    envelope = substitute(dict(template))
    envelope["request_id"] = request_id_for(trigger, window.id)
    envelope.setdefault("schema_version", 1)
    job = envelope.get("custom_job")
    if isinstance(job, dict):
        _inject(job, {MANIFEST_ENV: manifest_uri, TRIGGER_ENV: trigger, WINDOW_ENV: window.id})
        labels = job.setdefault("labels", {})
        if isinstance(labels, dict):
            labels[TRIGGER_LABEL] = trigger
            labels[WINDOW_LABEL] = window.id
    return envelope


def _either(mapping: dict[str, Any], camel: str, snake: str) -> Any:
    return mapping.get(camel, mapping.get(snake))


def _inject(job: dict[str, Any], env: Mapping[str, str]) -> None:
    """Set `env` in the container (or Python package) spec of every worker pool."""
    spec = _either(job, "jobSpec", "job_spec")
    pools = _either(spec, "workerPoolSpecs", "worker_pool_specs") if isinstance(spec, dict) else None
    for pool in pools if isinstance(pools, list) else []:
        if not isinstance(pool, dict):
            continue
        for camel, snake in (("containerSpec", "container_spec"), ("pythonPackageSpec", "python_package_spec")):
            code = _either(pool, camel, snake)
            if isinstance(code, dict):
                current = [e for e in code.get("env") or [] if not (isinstance(e, dict) and e.get("name") in env)]
                code["env"] = [*current, *({"name": k, "value": v} for k, v in env.items())]


def check_rendered(envelope: Mapping[str, Any], settings: Any) -> list[Violation]:
    """Every violation submit_job would find in `envelope` (empty: it will be accepted)."""
    from shared.requests.envelope import InvalidJobRequest
    from shared.requests.policy import validate_request

    try:
        validate_request(json.dumps(envelope).encode(), attributes={}, settings=settings)
    except InvalidJobRequest as exc:
        return list(exc.violations)
    return []


def check_request_template(definition: Any, settings: Any, now: datetime) -> list[Violation]:
    """Render a definition's request for a sample window and check it, paths under `request`."""
    window = Window.containing(now, definition.coalesce_seconds)
    envelope = render(
        definition.request,
        trigger=definition.name,
        window=window,
        manifest_uri=manifest_uri_for(settings, definition.name, window.id),
        object_count=0,
    )
    return [Violation(f"request.{v.path}".rstrip("."), v.message) for v in check_rendered(envelope, settings)]


def manifest_uri_for(settings: Any, trigger: str, window_id: str) -> str:
    """The manifest sits in the state bucket (`manifests/<request id>.json`), which the training
    service account may read there and nowhere else, and write nowhere: a job cannot plant or
    overwrite the manifest of a window (jobs may write the checkpoint bucket)."""
    return manifest_uri(settings, request_id_for(trigger, window_id))


def manifest_uri(settings: Any, request_id: str) -> str:
    return f"gs://{settings.state_bucket}/{manifest_path(request_id)}"
