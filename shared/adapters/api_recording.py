"""Opt-in record of the Google API calls a function makes, for the least-privilege test.

`SPOTJOBS_RECORD_API_CALLS=<file>` (set by the embedded stack for its function processes when
asked, `StackOptions.record_api_calls`; never by Terraform) makes `shared.adapters.clients` wrap each client
it builds with a thin recorder that appends one JSON line per distinct call to `<file>`:

    {"service": "storage", "method": "objects.get", "resource": "<bucket>", "prefix": "requests/"}
    (`objects.get_missing`: a read answered 404; `objects.overwrite`: an upload that may replace)
    {"service": "pubsub", "method": "topics.publish", "resource": "<topic>"}
    {"service": "aiplatform", "method": "customJobs.create", "resource": "<location>"}
    {"service": "iam", "method": "serviceAccounts.actAs", "resource": "<service account>"}

Storage is recorded at the HTTP session every call of the client goes through (JSON API, media
downloads and uploads alike), Pub/Sub at `publish`, Vertex at the JobServiceClient's methods.
Unset, nothing here is imported and the clients are the library's own.
"""

from __future__ import annotations

import json
import os
import re
import threading
import urllib.parse
from collections.abc import Callable
from typing import Any

ENV = "SPOTJOBS_RECORD_API_CALLS"


def record_file() -> str | None:
    return os.environ.get(ENV) or None


class Recorder:
    def __init__(self, path: str) -> None:
        self.path = path
        self._seen: set[tuple[tuple[str, str], ...]] = set()
        self._lock = threading.Lock()

    def record(self, **call: str) -> None:
        key = tuple(sorted(call.items()))
        with self._lock:
            if key in self._seen:
                return
            self._seen.add(key)
            with open(self.path, "a") as out:
                out.write(json.dumps(call, sort_keys=True) + "\n")


_recorders: dict[str, Recorder] = {}


def recorder() -> Recorder:
    path = record_file()
    assert path, f"{ENV} is not set"
    return _recorders.setdefault(path, Recorder(path))


# Storage: the JSON API and media paths of a request, as operations on a bucket.


def storage_operations(method: str, url: str) -> list[dict[str, str]]:
    """The bucket operations an HTTP request to the Storage JSON API is; [] if none."""
    parts = urllib.parse.urlsplit(url)
    segments = [urllib.parse.unquote(s) for s in parts.path.split("/") if s]
    query = urllib.parse.parse_qs(parts.query)
    for prefix in (["storage", "v1"], ["download", "storage", "v1"], ["upload", "storage", "v1"]):
        if segments[: len(prefix)] == prefix:
            kind, rest = prefix[0], segments[len(prefix) :]
            break
    else:
        return []
    if len(rest) < 2 or rest[0] != "b":
        return []
    bucket = rest[1]
    obj = "/".join(rest[3:]) if len(rest) > 3 and rest[2] == "o" else ""
    base = {"service": "storage", "resource": bucket}
    if obj:
        base["prefix"] = _folder(obj)
    method = method.upper()
    if len(rest) == 2:
        return [{**base, "method": "buckets.get"}] if method == "GET" else [{**base, "method": f"buckets.{method}"}]
    if kind == "upload":
        if method != "POST":
            return []  # the chunks of a resumable upload the POST already recorded
        name = (query.get("name") or [""])[0]
        if name:
            base["prefix"] = _folder(name)
        ops = [{**base, "method": "objects.create"}]
        if (query.get("ifGenerationMatch") or [""])[0] != "0":
            ops.append({**base, "method": "objects.overwrite"})  # may replace a live object
        return ops
    if not obj:
        # A listing is authorised by its prefix (IAM's objectListPrefix): record the one asked for.
        listed = (query.get("prefix") or [""])[0]
        return (
            [{**base, "prefix": listed, "method": "objects.list"}]
            if method == "GET"
            else [{**base, "method": f"objects.{method}"}]
        )
    return [
        {
            **base,
            "method": {
                "GET": "objects.get",
                "DELETE": "objects.delete",
                "PATCH": "objects.update",
                "PUT": "objects.update",
            }.get(method, f"objects.{method}"),
        }
    ]


def _multipart_name(data: Any) -> str:
    """The object name in a multipart upload's JSON metadata part ("" if none)."""
    if not isinstance(data, (bytes, bytearray)):
        return ""
    match = re.search(rb'"name":\s*"((?:[^"\\]|\\.)*)"', bytes(data[:4096]))
    return json.loads(b'"' + match.group(1) + b'"') if match else ""


def record_storage(client: Any) -> Any:
    session = client._http  # every request of the client, JSON API and media, goes through it
    request: Callable[..., Any] = session.request
    rec = recorder()

    def recording(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        params = kwargs.get("params")
        full = url if not params else f"{url}{'&' if '?' in url else '?'}{urllib.parse.urlencode(params)}"
        name = _multipart_name(kwargs.get("data"))
        if name and "name=" not in full:  # a multipart upload names its object in the body
            full = f"{full}{'&' if '?' in full else '?'}{urllib.parse.urlencode({'name': name})}"
        response = request(method, url, *args, **kwargs)
        missing = getattr(response, "status_code", None) == 404
        for call in storage_operations(method, full):
            if missing and call["method"] == "objects.get":
                call["method"] = "objects.get_missing"  # read of an object that does not exist
            rec.record(**call)
        return response

    session.request = recording
    return client


# Pub/Sub: the topic of each publish.


class RecordingPublisher:
    def __init__(self, publisher: Any) -> None:
        self._publisher = publisher
        self._recorder = recorder()

    def publish(self, topic: str, *args: Any, **kwargs: Any) -> Any:
        self._recorder.record(service="pubsub", method="topics.publish", resource=topic.rsplit("/", 1)[-1])
        return self._publisher.publish(topic, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._publisher, name)


# Vertex AI: each JobService method, by location; the service account a created job runs as.

_JOB_METHODS = {
    "create_custom_job": "customJobs.create",
    "get_custom_job": "customJobs.get",
    "list_custom_jobs": "customJobs.list",
    "cancel_custom_job": "customJobs.cancel",
    "delete_custom_job": "customJobs.delete",
}


class RecordingJobService:
    def __init__(self, client: Any) -> None:
        self._client = client
        self._recorder = recorder()

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._client, name)
        if not callable(attribute) or name.startswith("_") or "path" in name:
            return attribute
        method = _JOB_METHODS.get(name, f"JobService.{name}")

        def call(*args: Any, **kwargs: Any) -> Any:
            request = kwargs.get("request") if "request" in kwargs else (args[0] if args else None)
            where = (
                _field(request, "parent") or _field(request, "name") or kwargs.get("parent") or kwargs.get("name") or ""
            )
            location = where.split("/locations/", 1)[1].split("/", 1)[0] if "/locations/" in where else ""
            self._recorder.record(service="aiplatform", method=method, resource=location)
            if name == "create_custom_job":
                job = _field(request, "custom_job") or kwargs.get("custom_job")
                account = _field(_field(job, "job_spec"), "service_account")
                if account:
                    self._recorder.record(service="iam", method="serviceAccounts.actAs", resource=account)
            return attribute(*args, **kwargs)

        return call


def _field(value: Any, name: str) -> Any:
    if value is None:
        return None
    if isinstance(value, dict):
        return value.get(name)
    return getattr(value, name, None)


def _folder(name: str) -> str:
    """The object's folder, at most two levels deep (`requests/r1/`, `maintenance/`): enough to
    tell which prefix-conditioned grant a call needs, without a line per object."""
    parts = name.split("/")[:-1][:2]
    return "".join(f"{part}/" for part in parts) if parts else name
