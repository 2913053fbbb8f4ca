"""The fault proxy the chaos tests and benchmarks put in front of fake-gcs-server."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

import pytest

from devstack.fault_proxy import FaultProxy


@pytest.fixture
def proxy(fake_gcs: str):
    proxy = FaultProxy(fake_gcs).start()
    yield proxy
    proxy.stop()


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_requests_are_forwarded_unchanged(proxy, gcs_bucket) -> None:
    gcs_bucket.blob("a.txt").upload_from_string(b"hello")
    with urllib.request.urlopen(f"{proxy.url}/storage/v1/b/{gcs_bucket.name}/o", timeout=5) as response:
        listing = json.loads(response.read())
    assert [item["name"] for item in listing["items"]] == ["a.txt"]


def test_a_fault_window_fails_every_request_until_it_closes(proxy) -> None:
    urllib.request.urlopen(
        urllib.request.Request(
            f"{proxy.url}/_proxy/faults", data=json.dumps({"status": 503, "seconds": 0.5}).encode(), method="POST"
        )
    )
    assert _status(f"{proxy.url}/storage/v1/b") == 503
    time.sleep(0.6)
    assert _status(f"{proxy.url}/storage/v1/b") == 200
    assert proxy.plan.failed == 1


def test_counted_faults_and_latency(proxy) -> None:
    proxy.plan.set_fault(429, count=2)
    proxy.plan.latency_seconds = 0.05
    started = time.monotonic()
    statuses = [_status(f"{proxy.url}/storage/v1/b") for _ in range(3)]
    assert statuses == [429, 429, 200]
    assert time.monotonic() - started >= 0.15
