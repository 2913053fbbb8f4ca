"""fake-gcs-server at 100,000 objects: range-partitioned buckets on its filesystem backend,
seeded by writing files directly, behind one latency proxy that routes and merges.

Why: fake-gcs-server 1.54's memory backend scans every object of a bucket on each create, get and
delete (seeding 10,000 objects took 44 s; 100,000 would take hours), and its filesystem backend,
whose gets and deletes cost O(1), walks the whole bucket directory on every listing (0.5-0.7 s per
list call at 100,000 objects, 2.4 s when every object matches the prefix). Neither is what GCS
costs. So here:

- each benchmark bucket is split by object-name ranges into partitions of ~`per_partition`
  objects, each one a bucket of its own (`<bucket>--p007`) on one of a few fake-gcs-server
  processes with `-backend filesystem`: a listing walks one partition, not the bucket;
- objects are seeded by writing their files and the `user.metadata` extended attribute the
  filesystem backend reads (the template taken from one object uploaded through the server, so the
  format is the server's own): 100,000 objects in ~10 s instead of hours;
- one proxy (`FarmProxy`) in front adds the latency of a call to real GCS (+20 ms) once per client
  call, routes object calls (get, download, upload, delete) by name to their partition, and serves
  a listing by asking the partitions its range covers in order and merging (page tokens are object
  names, as fake-gcs-server's own). Bucket names and links in replies are put back, and a delete
  is answered 204 with no body, as GCS does (fake-gcs-server's 200 "null" breaks gcloud).

Everything a client sends is still answered by fake-gcs-server; only where an object lives is ours.
"""

from __future__ import annotations

import base64
import bisect
import hashlib
import http.client
import json
import os
import re
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from devstack.emulators import fake_gcs_binary
from devstack.processes import ManagedProcess, free_port, http_ok, wait_until


def _partition_bucket(bucket: str, p: int) -> str:
    return f"{bucket}--p{p:03d}"


@dataclass
class PartitionedBucket:
    name: str
    lows: list[str]  # the first name of each partition ("" for the first)
    servers: int

    def partition_of(self, object_name: str) -> int:
        return max(0, bisect.bisect_right(self.lows, object_name) - 1)

    def server_of(self, p: int) -> int:
        return p % self.servers

    def partitions_for(self, prefix: str, start: str) -> list[int]:
        """Partitions whose range may hold names >= start with `prefix`, in order."""
        low = max(prefix, start)
        first = self.partition_of(low)
        out = []
        for p in range(first, len(self.lows)):
            if prefix and self.lows[p] > prefix and not self.lows[p].startswith(prefix):
                break  # every later name sorts after the prefix's names
            out.append(p)
        return out


@dataclass
class GcsFarm:
    workdir: Path
    servers: int = 2
    per_partition: int = 500
    urls: list[str] = field(default_factory=list)
    roots: list[Path] = field(default_factory=list)
    buckets: dict[str, PartitionedBucket] = field(default_factory=dict)
    _processes: list[ManagedProcess] = field(default_factory=list)
    _template: dict | None = None

    def start(self) -> GcsFarm:
        for i in range(self.servers):
            port = free_port()
            root = self.workdir / f"fs{i}"
            process = ManagedProcess(
                f"fake-gcs-fs-{i}",
                [
                    str(fake_gcs_binary()),
                    "-scheme",
                    "http",
                    "-host",
                    "127.0.0.1",
                    "-port",
                    str(port),
                    "-backend",
                    "filesystem",
                    "-filesystem-root",
                    str(root),
                    "-log-level",
                    "error",
                    "-external-url",
                    f"http://127.0.0.1:{port}",
                ],
                dict(os.environ),
                self.workdir / f"fake-gcs-fs-{i}.log",
            )
            process.start()
            self._processes.append(process)
            url = f"http://127.0.0.1:{port}"
            wait_until(lambda url=url: http_ok(f"{url}/storage/v1/b"), timeout=30, what="fake-gcs-server")
            self.urls.append(url)
            self.roots.append(root)
        return self

    def stop(self) -> None:
        for process in self._processes:
            process.stop()

    # Buckets and seeding.

    def create_bucket(self, name: str, names: list[str]) -> PartitionedBucket:
        """A bucket partitioned so that `names` (sorted here) fill partitions of per_partition."""
        ordered = sorted(names)
        lows = [""] + ordered[self.per_partition :: self.per_partition]
        bucket = PartitionedBucket(name, lows, self.servers)
        for p in range(len(lows)):
            _request(
                self.urls[bucket.server_of(p)],
                "POST",
                "/storage/v1/b?project=bench",
                json.dumps({"name": _partition_bucket(name, p)}).encode(),
                {"Content-Type": "application/json"},
            )
        self.buckets[name] = bucket
        return bucket

    def template(self) -> dict:
        """The metadata document the filesystem backend keeps, from one real upload."""
        if self._template is None:
            url, root = self.urls[0], self.roots[0]
            _request(
                url,
                "POST",
                "/storage/v1/b?project=bench",
                b'{"name":"farm-template"}',
                {"Content-Type": "application/json"},
            )
            _request(
                url,
                "POST",
                "/upload/storage/v1/b/farm-template/o?uploadType=media&name=t",
                b"t",
                {"Content-Type": "application/octet-stream"},
            )
            self._template = json.loads(os.getxattr(root / "farm-template" / "t", "user.metadata"))
        return self._template

    def seed(
        self,
        bucket: str,
        objects: Iterable[tuple[str, bytes, dict[str, str] | None]],
        *,
        updated: datetime | None = None,
        content_type: str = "application/octet-stream",
    ) -> int:
        """Write objects (name, body, custom metadata) straight into the partitions' directories."""
        import google_crc32c

        layout = self.buckets[bucket]
        moment = (updated or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        generation = int(time.time() * 1e6)
        document = dict(self.template(), ContentType=content_type, Created=moment, Updated=moment)
        hashes: dict[bytes, tuple[str, str]] = {}
        made: set[Path] = set()
        count = 0
        for name, body, metadata in objects:
            p = layout.partition_of(name)
            path = self.roots[layout.server_of(p)] / _partition_bucket(bucket, p) / name
            if path.parent not in made:
                path.parent.mkdir(parents=True, exist_ok=True)
                made.add(path.parent)
            if body not in hashes:
                crc = base64.b64encode(google_crc32c.Checksum(body).digest()).decode()
                hashes[body] = (crc, base64.b64encode(hashlib.md5(body).digest()).decode())  # noqa: S324 - GCS's own
            crc, md5 = hashes[body]
            generation += 1
            document.update(Crc32c=crc, Md5Hash=md5, Etag=md5, Generation=generation, Metadata=metadata or {})
            path.write_bytes(body)
            os.setxattr(path, "user.metadata", json.dumps(document, separators=(",", ":")).encode())
            count += 1
        return count

    def proxy(self, latency_seconds: float) -> FarmProxy:
        return FarmProxy(self, latency_seconds).start()


def _request(url: str, method: str, path: str, body: bytes | None = None, headers: dict | None = None) -> bytes:
    parts = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        payload = response.read()
        if response.status >= 400 and response.status != 409:
            raise RuntimeError(f"{method} {path}: {response.status} {payload[:200]!r}")
        return payload
    finally:
        connection.close()


_HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "proxy-authorization",
    "proxy-authenticate",
    "content-length",
    "host",
}
_OBJECT = re.compile(r"^(/download|/upload)?/storage/v1/b/([^/]+)/o(?:/([^?]*))?$")
_BUCKET = re.compile(r"^/storage/v1/b/([^/?]+)$")


class FarmProxy:
    """The farm's front: +latency per client call, routing by name, listings merged. Counts the
    client's calls by kind (list, get, upload, delete, other)."""

    def __init__(self, farm: GcsFarm, latency_seconds: float) -> None:
        self.farm = farm
        self.latency_seconds = latency_seconds
        self.calls: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._local = threading.local()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                pass

            def _any(self) -> None:
                proxy._serve(self)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _any

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> FarmProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def reset_calls(self) -> Counter[str]:
        with self._lock:
            calls, self.calls = self.calls, Counter()
        return calls

    def _count(self, kind: str) -> None:
        with self._lock:
            self.calls[kind] += 1

    # Forwarding.

    def _connection(self, server: int) -> http.client.HTTPConnection:
        connections = getattr(self._local, "connections", None)
        if connections is None:
            connections = self._local.connections = {}
        if server not in connections:
            parts = urllib.parse.urlsplit(self.farm.urls[server])
            connections[server] = http.client.HTTPConnection(parts.hostname, parts.port, timeout=120)
        return connections[server]

    def _forward(
        self, server: int, method: str, path: str, body: bytes | None, headers: dict[str, str]
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        for attempt in range(2):
            connection = self._connection(server)
            try:
                connection.request(method, path, body=body, headers=headers)
                response = connection.getresponse()
                return response.status, response.getheaders(), response.read()
            except (http.client.HTTPException, OSError):
                connection.close()
                self._local.connections.pop(server, None)
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def _serve(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else None
        headers = {k: v for k, v in handler.headers.items() if k.lower() not in _HOP_BY_HOP}
        if self.latency_seconds:
            time.sleep(self.latency_seconds)
        url = urllib.parse.urlsplit(handler.path)
        query = urllib.parse.parse_qs(url.query, keep_blank_values=True)
        method = handler.command
        match = _OBJECT.match(url.path)
        bucket = self.farm.buckets.get(match.group(2)) if match else None
        if match and bucket is not None:
            kind, name = match.group(1), urllib.parse.unquote(match.group(3) or "")
            if not name and method == "GET" and not kind:
                self._count("list")
                self._reply(handler, 200, [("Content-Type", "application/json")], self._list(bucket, query))
                return
            if kind == "/upload":
                name = query.get("name", [""])[0] or _multipart_name(body or b"")
                self._count("upload")
            else:
                self._count({"GET": "get", "DELETE": "delete"}.get(method, "other"))
            p = bucket.partition_of(name)
            path = url.path.replace(f"/b/{bucket.name}/", f"/b/{_partition_bucket(bucket.name, p)}/", 1)
            path += f"?{url.query}" if url.query else ""
            status, response_headers, payload = self._forward(bucket.server_of(p), method, path, body, headers)
            if method == "DELETE" and status == 200 and payload.strip() in (b"", b"null"):
                # GCS answers a delete 204 with no body; fake-gcs-server says 200 "null", which
                # gcloud's JSON decoder rejects (the object is gone, but it reports an error).
                status, payload = 204, b""
                response_headers = [(k, v) for k, v in response_headers if k.lower() != "content-type"]
            self._reply(handler, status, response_headers, _unpartition(bucket.name, payload))
            return
        bucket_match = _BUCKET.match(url.path)
        if bucket_match and bucket_match.group(1) in self.farm.buckets:
            path = url.path.replace(bucket_match.group(1), _partition_bucket(bucket_match.group(1), 0))
            path += f"?{url.query}" if url.query else ""
            self._count("other")
            status, response_headers, payload = self._forward(0, method, path, body, headers)
            self._reply(handler, status, response_headers, _unpartition(bucket_match.group(1), payload))
            return
        self._count("other")
        status, response_headers, payload = self._forward(0, method, handler.path, body, headers)
        self._reply(handler, status, response_headers, payload)

    def _list(self, bucket: PartitionedBucket, query: dict[str, list[str]]) -> bytes:
        get = lambda key: query.get(key, [""])[0]  # noqa: E731
        prefix, delimiter = get("prefix"), get("delimiter")
        start = max(get("startOffset"), get("pageToken"))
        wanted = int(get("maxResults") or 1000)
        items: list[dict] = []
        prefixes: set[str] = set()
        token = ""
        for p in bucket.partitions_for(prefix, start):
            if len(items) >= wanted:
                if not delimiter:
                    token = max(bucket.lows[p], start)
                    break
                remaining = 1
            else:
                remaining = wanted - len(items)
            params = {"prefix": prefix, "maxResults": str(remaining)}
            for key in ("delimiter", "endOffset", "includeTrailingDelimiter", "versions"):
                if get(key):
                    params[key] = get(key)
            if start:
                params["startOffset"] = start
            path = f"/storage/v1/b/{_partition_bucket(bucket.name, p)}/o?{urllib.parse.urlencode(params)}"
            status, _, payload = self._forward(bucket.server_of(p), "GET", path, None, {})
            if status != 200:
                raise RuntimeError(f"partition listing failed: {status} {payload[:200]!r}")
            page = json.loads(payload)
            prefixes.update(page.get("prefixes", ()))
            if len(items) >= wanted:
                if page.get("items") and not token:
                    token = page["items"][0]["name"]
            else:
                items.extend(page.get("items", ()))
                if page.get("nextPageToken") and not token:
                    token = page["nextPageToken"]
                    if not delimiter:
                        break
        document: dict = {"kind": "storage#objects", "items": items}
        if prefixes:
            document["prefixes"] = sorted(prefixes)
        if token:
            document["nextPageToken"] = token
        return _unpartition(bucket.name, json.dumps(document).encode())

    def _reply(
        self, handler: BaseHTTPRequestHandler, status: int, headers: list[tuple[str, str]], payload: bytes
    ) -> None:
        if payload[:1] == b"{":
            payload = _links_to(self.url, self.farm.urls, payload)
        handler.send_response(status)
        for key, value in headers:
            if key.lower() not in _HOP_BY_HOP:
                handler.send_header(key, value)
        handler.send_header("Content-Length", str(len(payload)))
        handler.end_headers()
        if handler.command != "HEAD":
            handler.wfile.write(payload)


def _unpartition(bucket: str, payload: bytes) -> bytes:
    return re.sub(re.escape(bucket.encode()) + rb"--p\d{3}", bucket.encode(), payload)


def _links_to(proxy_url: str, urls: list[str], payload: bytes) -> bytes:
    """Links in replies (mediaLink, selfLink) name a backend; clients must come back here."""
    for url in urls:
        payload = payload.replace(url.encode(), proxy_url.encode())
    return payload


def _multipart_name(body: bytes) -> str:
    """The object name of a multipart upload: its first part is the JSON resource."""
    start = body.find(b"{")
    end = body.find(b"\r\n--", start)
    try:
        return json.loads(body[start:end])["name"]
    except (ValueError, KeyError):
        return ""
