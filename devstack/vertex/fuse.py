"""The emulator's stand-in for the Cloud Storage FUSE mount, opt-in (`--gcs-fuse-dir DIR`).

Vertex AI mounts Cloud Storage for custom training at `/gcs/`, so `gs://BUCKET/PATH` is the file
`/gcs/BUCKET/PATH` ("Use Cloud Storage as a mounted file system",
https://cloud.google.com/vertex-ai/docs/training/cloud-storage-file-system). A framework that
writes its own checkpoint files (a transformers Trainer, Lightning) needs that path. The emulator
cannot mount a bucket; with this option it mirrors the job's checkpoint folder
(`AIP_CHECKPOINT_DIR`) between the bucket and `DIR/BUCKET/PATH`: filled from the bucket before the
job's replicas start together (not when one restarts alone), mirrored back (uploads of new or
changed files, deletes of objects whose file is gone) after each replica exits, and `SPOTJOBS_KIT_FUSE_ROOT=DIR` in the worker's environment (the
trainer kit's override of `/gcs/`).

Where it differs from Cloud Storage FUSE (invented, for tests): the bucket sees a run's files when
its worker exits (uploaded in the order they were written), not as each file is closed; a file being written when the worker is killed is
uploaded as it is (a torn file, what the kit's markers guard against); what another job wrote
meanwhile is seen at the next start only. Only one job at a time may use a checkpoint folder,
as spotjobs runs one attempt of a request at a time.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from spotjobs_kit.storage import FUSE_ROOT_ENV

# The trainer kit's override of the mount point (spotjobs_kit.storage reads it; default /gcs/).


def _split(uri: str) -> tuple[str, str]:
    bucket, _, prefix = uri.removeprefix("gs://").partition("/")
    return bucket, prefix.strip("/") + "/" if prefix.strip("/") else ""


class FuseMirror:
    """One mount root for every job; each job's checkpoint folder is mirrored at its starts and exits."""

    def __init__(self, root: str | os.PathLike[str], client: Any = None) -> None:
        self.root = Path(root)
        self._client = client
        self._pulled_at: dict[Path, int] = {}  # folder -> time.time_ns() when it was filled

    @property
    def client(self) -> Any:
        if self._client is None:
            from google.cloud import storage

            # STORAGE_EMULATOR_HOST (fake-gcs-server) is in the emulator's environment.
            self._client = storage.Client(project=os.environ.get("GOOGLE_CLOUD_PROJECT") or None)
        return self._client

    def environment(self) -> dict[str, str]:
        return {FUSE_ROOT_ENV: str(self.root)}

    def _folder(self, env: Mapping[str, str]) -> tuple[str, str, Path] | None:
        uri = env.get("AIP_CHECKPOINT_DIR") or ""
        if not uri.startswith("gs://"):
            return None
        bucket, prefix = _split(uri)
        return bucket, prefix, self.root / bucket / prefix

    def pull(self, env: Mapping[str, str]) -> None:
        """Before a worker starts: the local folder holds exactly what the bucket holds."""
        found = self._folder(env)
        if found is None:
            return
        bucket, prefix, local = found
        shutil.rmtree(local, ignore_errors=True)
        local.mkdir(parents=True, exist_ok=True)
        for blob in self.client.list_blobs(bucket, prefix=prefix):
            target = local / blob.name[len(prefix) :]
            if blob.name.endswith("/"):
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            blob.download_to_filename(str(target))
        self._pulled_at[local] = time.time_ns()

    def push(self, env: Mapping[str, str]) -> None:
        """After a worker exits: the bucket holds exactly what the local folder holds."""
        found = self._folder(env)
        if found is None or not found[2].is_dir():
            return
        bucket_name, prefix, local = found
        bucket = self.client.bucket(bucket_name)
        remote = {blob.name: blob.size for blob in self.client.list_blobs(bucket_name, prefix=prefix)}
        pulled_at = self._pulled_at.get(local, 0)
        present = set()
        # In the order they were written, as FUSE uploads each file when it is closed: a commit
        # marker written last reaches the bucket last (the pruner reads the order).
        files = sorted((p.stat().st_mtime_ns, p.as_posix(), p) for p in local.rglob("*") if p.is_file())
        for _, _, path in files:
            name = prefix + path.relative_to(local).as_posix()
            present.add(name)
            stat = path.stat()
            if remote.get(name) != stat.st_size or stat.st_mtime_ns >= pulled_at:  # new or changed
                bucket.blob(name).upload_from_filename(str(path))
        for name in set(remote) - present:
            bucket.blob(name).delete()
