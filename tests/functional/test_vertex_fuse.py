"""The Vertex emulator's stand-in for the /gcs/ mount (devstack/vertex/fuse.py) over a real
fake-gcs-server: a worker's folder is the bucket's at its start, and the bucket is the folder's at
its exit (new, changed and deleted files), outside the checkpoint folder untouched."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from spotjobs_kit.storage import FUSE_ROOT_ENV

from devstack.vertex.fuse import FuseMirror


def objects(bucket: Any, prefix: str = "") -> dict[str, bytes]:
    return {blob.name: blob.download_as_bytes() for blob in bucket.client.list_blobs(bucket, prefix=prefix)}


def test_a_worker_sees_the_bucket_at_its_start_and_the_bucket_sees_its_files_at_its_exit(
    gcs_bucket: Any, tmp_path: Path
) -> None:
    base = "requests/r1/checkpoints/"
    for name, data in {
        f"{base}step-000010/state.pt": b"ten",
        f"{base}step-000010/COMMITTED": b"{}",
        f"{base}step-000020/state.pt": b"twenty",
        "requests/r1/model/model.json": b"outside the checkpoint folder",
    }.items():
        gcs_bucket.blob(name).upload_from_string(data)
    mirror = FuseMirror(tmp_path / "gcs", client=gcs_bucket.client)
    env = {"AIP_CHECKPOINT_DIR": f"gs://{gcs_bucket.name}/{base}"}
    local = tmp_path / "gcs" / gcs_bucket.name / base
    (local / "stale-from-an-earlier-run").mkdir(parents=True)

    mirror.pull(env)
    assert sorted(p.relative_to(local).as_posix() for p in local.rglob("*") if p.is_file()) == [
        "step-000010/COMMITTED",
        "step-000010/state.pt",
        "step-000020/state.pt",
    ]
    assert mirror.environment() == {FUSE_ROOT_ENV: str(tmp_path / "gcs")}

    (local / "step-000020" / "state.pt").write_bytes(b"rewritten")  # same size or not: uploaded
    (local / "step-000030").mkdir()
    (local / "step-000030" / "state.pt").write_bytes(b"thirty")
    time.sleep(0.01)
    (local / "step-000030" / "COMMITTED").write_bytes(b"{}")  # last, though first by name
    for leaf in ("state.pt", "COMMITTED"):
        (local / "step-000010" / leaf).unlink()  # the kit retired it
    mirror.push(env)

    uploaded = {b.name: b.updated for b in gcs_bucket.client.list_blobs(gcs_bucket, prefix=base)}
    # In write order, as FUSE uploads on close: the marker written last is newer than its files.
    assert uploaded[f"{base}step-000030/COMMITTED"] > uploaded[f"{base}step-000030/state.pt"]
    assert objects(gcs_bucket) == {
        f"{base}step-000020/state.pt": b"rewritten",
        f"{base}step-000030/COMMITTED": b"{}",
        f"{base}step-000030/state.pt": b"thirty",
        "requests/r1/model/model.json": b"outside the checkpoint folder",
    }
