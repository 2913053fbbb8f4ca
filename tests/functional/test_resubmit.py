"""`spotjobs resubmit` resuming, against fake-gcs-server: what the copy carries (everything that
makes the checkpoint complete, that evidence last), the check of the copy before anything is
published, and a new id only where its folder is empty (issue 28, breaks 8, 9, 10)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from google.cloud import pubsub_v1
from google.cloud.storage import Blob, Bucket
from spotjobs_kit.layout import discover, newest_complete

from shared import settings as settings_module
from shared.ledger.records import RequestRecord
from shared.ledger.states import RequestStatus
from shared.ledger.store import LedgerStore
from shared.requests.envelope import canonical_envelope
from shared.requests.policy import validate_request
from shared.settings import Settings, get_settings
from spotjobs.cli import main
from spotjobs.resume import CheckpointCarrier
from tests.conftest import EVENTS_DIR
from tests.support.framework_layouts import (
    Save,
    dcp,
    deepspeed,
    hf_trainer,
    orbax_gcs,
    orbax_renamed_legacy,
    write_save,
)
from tests.support.prune_store import MemoryStore, tf_checkpoint, tf_index

MARKERS = ("commit_success.txt", ".metadata", "checkpoint", "COMMITTED")


@pytest.fixture
def buckets(gcs_bucket: Bucket, fake_gcs: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Bucket, Bucket]]:
    """(state bucket, checkpoint bucket), the settings and the storage client pointed at them."""
    checkpoints = gcs_bucket.client.create_bucket(f"{gcs_bucket.name[:50]}-ckpt")
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", fake_gcs)
    monkeypatch.setenv("SPOTJOBS_STATE_BUCKET", gcs_bucket.name)
    monkeypatch.setenv("SPOTJOBS_CHECKPOINT_BUCKET", checkpoints.name)
    settings_module.get_settings.cache_clear()
    yield gcs_bucket, checkpoints
    settings_module.get_settings.cache_clear()


@pytest.fixture
def published(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """What the CLI publishes, instead of publishing it."""
    sent: list[dict[str, Any]] = []

    class Publisher:
        def publish(self, topic: str, data: bytes, **attributes: str) -> Any:
            sent.append({"topic": topic, "body": json.loads(data), **attributes})
            return type("Future", (), {"result": lambda self, timeout=None: f"m{len(sent)}"})()

    monkeypatch.setattr(pubsub_v1, "PublisherClient", Publisher)
    return sent


def folder(request_id: str) -> str:
    return f"requests/{request_id}/checkpoints/"


def upload(bucket: Bucket, store: MemoryStore, request_id: str = "r1") -> None:
    """The objects a MemoryStore layout holds for `request_id`, in `bucket`, in write order."""
    for name, obj in sorted(store.objects.items(), key=lambda item: (item[1].updated, item[1].generation)):
        if name.startswith(folder(request_id)):
            bucket.blob(name).upload_from_string(store.texts.get(name) or "x" * obj.size)


def written(bucket: Bucket, *saves: Save) -> None:
    store = MemoryStore()
    for save in saves:
        write_save(store, "r1", save)
    upload(bucket, store)


def resumed_step(bucket: Bucket, request_id: str) -> int | None:
    """The step the kit (and the pruner) would resume `request_id` from."""
    from shared.pruning.store import GcsPruneStore

    store = GcsPruneStore(bucket, verify_generation=False)
    newest = newest_complete(discover(store, folder(request_id), MARKERS).checkpoints)
    return newest.step if newest else None


def names(bucket: Bucket, request_id: str) -> set[str]:
    return {b.name[len(folder(request_id)) :] for b in bucket.list_blobs(prefix=folder(request_id))}


def cut_after(monkeypatch: pytest.MonkeyPatch, writes: int) -> None:
    """Every write to the bucket after the first `writes` fails: a copy cut short."""
    done = {"writes": 0}

    def counted(original: Callable[..., Any]) -> Callable[..., Any]:
        def write(*args: Any, **kwargs: Any) -> Any:
            if done["writes"] >= writes:
                raise ConnectionError("cut short")
            done["writes"] += 1
            return original(*args, **kwargs)

        return write

    monkeypatch.setattr(Bucket, "copy_blob", counted(Bucket.copy_blob))
    monkeypatch.setattr(Blob, "upload_from_string", counted(Blob.upload_from_string))


SAVES = {
    "orbax_legacy": orbax_renamed_legacy,
    "orbax_gcs": orbax_gcs,
    "hf": hf_trainer,
    "dcp": dcp,
    "deepspeed": deepspeed,
}


@pytest.mark.parametrize("framework", sorted(SAVES))
def test_a_copy_cut_short_is_never_resumed_from(
    buckets: tuple[Bucket, Bucket], monkeypatch: pytest.MonkeyPatch, framework: str
) -> None:
    """Break 8: the copy went in name order with only the markers last, so an Orbax `400/`
    holding only `_CHECKPOINT_METADATA` (it sorts first) was complete by its commit timestamp.
    A copy cut short is complete only once every file but a redundant commit marker is there
    (Orbax on gs://: the committed metadata, then commit_success.txt, as Orbax writes them)."""
    _, bucket = buckets
    written(bucket, SAVES[framework](400))
    settings = get_settings()
    total = len({name for name, _ in SAVES[framework](400).writes})
    data = {n for n in names(bucket, "r1") if n.rsplit("/", 1)[-1] not in MARKERS}
    for writes in range(total):
        with monkeypatch.context() as patch:
            cut_after(patch, writes)
            with pytest.raises(ConnectionError):
                CheckpointCarrier(bucket.client, settings).carry("r1", f"cut-{writes}")
        if resumed_step(bucket, f"cut-{writes}") is not None:  # only short of a redundant marker
            assert names(bucket, f"cut-{writes}") >= data, f"resumed from a copy cut after {writes} writes"
    assert CheckpointCarrier(bucket.client, settings).carry("r1", "whole").step == 400
    assert resumed_step(bucket, "whole") == 400


def test_deepspeed_and_tensorflow_copies_carry_the_evidence_beside_the_folder(buckets: tuple[Bucket, Bucket]) -> None:
    """Break 9: DeepSpeed's `latest` and TensorFlow's `checkpoint` index were left behind, so the
    copy announced as step N was no checkpoint at all and the job started at 0."""
    _, bucket = buckets
    settings = get_settings()
    written(bucket, deepspeed(100), deepspeed(200))
    carried = CheckpointCarrier(bucket.client, settings).carry("r1", "ds")
    assert (carried.name, carried.step) == ("global_step200/", 200)
    assert resumed_step(bucket, "ds") == 200
    assert bucket.blob(folder("ds") + "latest").download_as_text() == "global_step200"

    store = MemoryStore()
    for stem in ("ckpt-1", "ckpt-2"):
        tf_checkpoint(store, "tf", stem)
    tf_index(store, "tf", ["ckpt-1", "ckpt-2"])
    upload(bucket, store, "tf")
    carried = CheckpointCarrier(bucket.client, settings).carry("tf", "tf-copy")
    assert (carried.name, carried.step) == ("ckpt-2", 2)
    assert resumed_step(bucket, "tf-copy") == 2


def failed_request(state: Bucket, request_id: str = "r1") -> None:
    settings = Settings.from_env({})
    body = (EVENTS_DIR / "requests" / "bare_quick.json").read_bytes()
    request = validate_request(body, attributes={"request_id": request_id}, settings=settings)
    envelope = canonical_envelope(request, default_location="us-central1", default_max_attempts=3)
    record = RequestRecord(request_id, envelope, f"gs://x/requests/{request_id}/", status=RequestStatus.FAILED)
    record.finished_at = "2026-11-29T10:00:00.000Z"
    LedgerStore(state).restore(record)


def test_the_new_id_is_one_whose_folder_is_empty(
    buckets: tuple[Bucket, Bucket], published: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    """Break 10: `r1-r2` is unknown to the ledger (retention) but its folder still holds another
    run's step 10000: the new request resumed from that, not from the copied 400."""
    state, bucket = buckets
    failed_request(state)
    store = MemoryStore()
    write_save(store, "r1", dcp(400))
    write_save(store, "r1-r2", dcp(10000))
    upload(bucket, store, "r1")
    upload(bucket, store, "r1-r2")

    code = main(["resubmit", "r1", "--new-id", "r1-r2", "--json"])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and published == []
    assert "r1-r2" in err and "not empty" in err

    assert main(["resubmit", "r1", "--json"]) == 0
    receipt = json.loads(capsys.readouterr().out)
    assert receipt["request_id"] == "r1-r3" and receipt["resumed_from"]["step"] == 400
    assert [p["request_id"] for p in published] == ["r1-r3"]
    assert resumed_step(bucket, "r1-r3") == 400 and resumed_step(bucket, "r1-r2") == 10000


def test_a_copy_that_does_not_check_out_is_never_published(
    buckets: tuple[Bucket, Bucket],
    published: list[dict[str, Any]],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    state, bucket = buckets
    failed_request(state)
    written(bucket, orbax_gcs(400))
    copy_blob = Bucket.copy_blob

    def copy_and_shorten(self: Bucket, blob: Blob, destination: Bucket, new_name: str, **kwargs: Any) -> Blob:
        copied = copy_blob(self, blob, destination, new_name, **kwargs)
        if new_name.endswith("manifest.ocdbt"):  # the copy is not what it copies
            destination.blob(new_name).upload_from_string("short")
        return copied

    monkeypatch.setattr(Bucket, "copy_blob", copy_and_shorten)
    code = main(["resubmit", "r1"])
    out, err = capsys.readouterr()
    assert code == 1 and published == [] and out == ""
    assert "manifest.ocdbt" in err
