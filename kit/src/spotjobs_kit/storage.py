"""Where the checkpoint directory lives, behind one small interface.

- `gs://bucket/path/` with the Cloud Storage FUSE mount Vertex provides (`/gcs/bucket/path/`):
  a `FileStore` over the mount;
- `gs://...` without the mount: a `GcsStore` through google-cloud-storage, imported only then;
- anything else: a `FileStore` over that local path.

Names are relative to the checkpoint directory (`step-000400/COMMITTED`), so `discover` from
`spotjobs_kit.layout` runs over any of them with the prefix "".
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from spotjobs_kit.layout import EPOCH, FolderListing, ListedObject

FUSE_ROOT = "/gcs"
# Where a stand-in for the mount lives instead (the embedded stack's emulator sets it).
FUSE_ROOT_ENV = "SPOTJOBS_KIT_FUSE_ROOT"


class KitError(Exception):
    """The kit cannot do what it was asked (no checkpoint directory, no way to reach it)."""


def split_gcs_uri(uri: str) -> tuple[str, str]:
    """'gs://bucket/a/b' -> ('bucket', 'a/b/'); the prefix ends with '/' (or is empty)."""
    if not uri.startswith("gs://"):
        raise KitError(f"{uri!r} is not a gs:// URI")
    bucket, _, prefix = uri[len("gs://") :].partition("/")
    if not bucket:
        raise KitError(f"{uri!r} names no bucket")
    prefix = prefix.strip("/")
    return bucket, f"{prefix}/" if prefix else ""


def open_store(checkpoint_dir: str, *, fuse_root: str | None = None, gcs_client: Any = None) -> FileStore | GcsStore:
    """The store for a checkpoint directory: FUSE mount, else google-cloud-storage (with
    `gcs_client` if given), else local."""
    if checkpoint_dir.startswith("gs://"):
        bucket, prefix = split_gcs_uri(checkpoint_dir)
        mount = Path(fuse_root or os.environ.get(FUSE_ROOT_ENV) or FUSE_ROOT)
        if mount.is_dir():
            return FileStore(mount / bucket / prefix, uri=f"gs://{bucket}/{prefix}")
        try:
            return GcsStore(checkpoint_dir, client=gcs_client)
        except ImportError as error:
            raise KitError(
                f"cannot reach {checkpoint_dir}: no Cloud Storage FUSE mount at {mount} and "
                "google-cloud-storage is not installed (pip install 'spotjobs-kit[gcs]')"
            ) from error
    return FileStore(Path(checkpoint_dir))


def _walk(local: Path) -> dict[str, int]:
    """Every file under `local`, by relative POSIX path, with its size."""
    files = {}
    for path in sorted(local.rglob("*")):
        if path.is_file():
            files[path.relative_to(local).as_posix()] = path.stat().st_size
    return files


def _fsync(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _make_durable(local: Path) -> dict[str, int]:
    """fsync every file under `local` and every folder, so a marker written next is never on disk
    (or, through the FUSE mount, in the bucket) before the data it vouches for; returns the files."""
    files = _walk(local)
    for relative in files:
        _fsync(local / relative)
    for folder in sorted({(local / r).parent for r in files} | {local}, key=lambda p: -len(p.parts)):
        _fsync(folder)
    return files


def _markers_last(files: dict[str, int], last: tuple[str, ...]) -> list[str]:
    """Upload order: a framework's own commit marker (`.metadata`) after everything it vouches for."""
    return sorted(files, key=lambda relative: (relative in last, relative))


class FileStore:
    """A folder on a file system: a local one, or a bucket through the Cloud Storage FUSE mount."""

    def __init__(self, root: Path, *, uri: str | None = None) -> None:
        self.root = Path(root)
        self.uri = uri or str(self.root)

    def location(self, name: str) -> str:
        return str(self.root / name)

    def list_folder(self, prefix: str) -> FolderListing:
        files, subfolders = [], []
        try:
            entries = list(os.scandir(self.root / prefix))
        except (FileNotFoundError, NotADirectoryError):
            entries = []
        for entry in entries:
            if entry.is_dir():
                subfolders.append(f"{prefix}{entry.name}/")
            elif entry.is_file():
                files.append(self._listed(f"{prefix}{entry.name}", entry.stat()))
        return FolderListing(prefix, tuple(sorted(files, key=lambda o: o.name)), tuple(sorted(subfolders)))

    def stat(self, name: str) -> ListedObject | None:
        try:
            found = os.stat(self.root / name)
        except (FileNotFoundError, NotADirectoryError):
            return None
        return self._listed(name, found) if stat.S_ISREG(found.st_mode) else None

    def read_text(self, name: str) -> str | None:
        try:
            return (self.root / name).read_text()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None

    def write(self, name: str, data: bytes) -> None:
        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())

    def create(self, name: str, data: bytes) -> bool:
        """Write `name` only if it does not exist yet; False if it did."""
        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with open(path, "xb") as out:
                out.write(data)
        except FileExistsError:
            return False
        return True

    def remove(self, name: str) -> None:
        try:
            os.remove(self.root / name)
        except FileNotFoundError:
            pass

    def staging(self, name: str) -> str:
        """The local folder a checkpoint `name` is saved into: the checkpoint folder itself."""
        path = self.root / name
        path.mkdir(parents=True, exist_ok=True)
        return str(path)

    def publish(self, name: str, local: str, *, last: tuple[str, ...] = ()) -> dict[str, int]:
        """Make what was saved into `staging(name)` durable; returns its files and sizes."""
        return _make_durable(Path(local))

    def seal(self, name: str) -> dict[str, int]:
        """Make a folder a framework wrote itself (`checkpoint-20/`) durable; returns its files."""
        return _make_durable(self.root / name)

    def remove_folder(self, name: str, markers: tuple[str, ...]) -> None:
        """Delete a checkpoint folder, its commit markers first (never complete while half gone)."""
        for marker in markers:
            self.remove(name + marker)
        shutil.rmtree(self.root / name, ignore_errors=True)

    def discard(self, local: str) -> None:
        """A save that failed: what it wrote stays (incomplete, never resumed from)."""

    @staticmethod
    def _listed(name: str, found: os.stat_result) -> ListedObject:
        updated = datetime.fromtimestamp(found.st_mtime_ns / 1e9, tz=timezone.utc)
        return ListedObject(name, found.st_mtime_ns, found.st_size, updated)


class GcsStore:
    """A gs:// folder through google-cloud-storage (imported here only; STORAGE_EMULATOR_HOST
    points it at an emulator)."""

    def __init__(self, uri: str, client: Any = None) -> None:
        from google.cloud import storage

        bucket, self._base = split_gcs_uri(uri)
        self._client = client or storage.Client(project=os.environ.get("GOOGLE_CLOUD_PROJECT") or None)
        self._bucket = self._client.bucket(bucket)
        self.uri = f"gs://{bucket}/{self._base}"

    def location(self, name: str) -> str:
        return self.uri + name

    def list_folder(self, prefix: str) -> FolderListing:
        blobs = self._client.list_blobs(self._bucket, prefix=self._base + prefix, delimiter="/")
        files = [self._listed(blob) for blob in blobs]  # prefixes are known once consumed
        subfolders = sorted(p[len(self._base) :] for p in blobs.prefixes)
        return FolderListing(prefix, tuple(files), tuple(subfolders))

    def stat(self, name: str) -> ListedObject | None:
        blob = self._bucket.get_blob(self._base + name)
        return self._listed(blob) if blob is not None else None

    def read_text(self, name: str) -> str | None:
        from google.api_core.exceptions import NotFound

        try:
            return self._bucket.blob(self._base + name).download_as_text()
        except NotFound:
            return None

    def write(self, name: str, data: bytes) -> None:
        from google.cloud.storage.retry import DEFAULT_RETRY

        # Writing the same bytes again is harmless, so retrying an unconditional upload is safe.
        self._bucket.blob(self._base + name).upload_from_string(data, retry=DEFAULT_RETRY)

    def create(self, name: str, data: bytes) -> bool:
        from google.api_core.exceptions import PreconditionFailed

        try:
            self._bucket.blob(self._base + name).upload_from_string(data, if_generation_match=0)
        except PreconditionFailed:
            return False
        return True

    def remove(self, name: str) -> None:
        from google.api_core.exceptions import NotFound

        try:
            self._bucket.blob(self._base + name).delete()
        except NotFound:
            pass

    def staging(self, name: str) -> str:
        return tempfile.mkdtemp(prefix="spotjobs-kit-")

    def publish(self, name: str, local: str, *, last: tuple[str, ...] = ()) -> dict[str, int]:
        from google.cloud.storage.retry import DEFAULT_RETRY

        try:
            files = _walk(Path(local))
            for relative in _markers_last(files, last):
                blob = self._bucket.blob(f"{self._base}{name}{relative}")
                blob.upload_from_filename(str(Path(local) / relative), retry=DEFAULT_RETRY)
            return files
        finally:
            shutil.rmtree(local, ignore_errors=True)

    def discard(self, local: str) -> None:
        shutil.rmtree(local, ignore_errors=True)

    def seal(self, name: str) -> dict[str, int]:
        """A folder a framework wrote to gs:// itself: uploaded objects are durable; their sizes."""
        prefix = self._base + name
        return {b.name[len(prefix) :]: int(b.size or 0) for b in self._client.list_blobs(self._bucket, prefix=prefix)}

    def remove_folder(self, name: str, markers: tuple[str, ...]) -> None:
        for marker in markers:
            self.remove(name + marker)
        for blob in self._client.list_blobs(self._bucket, prefix=self._base + name):
            blob.delete()

    def fetch(self, names: list[str]) -> str:
        """Download the objects `names` (a name ending in "/": everything under it) into a new
        local folder, keeping their relative names; returns that folder."""
        local = Path(tempfile.mkdtemp(prefix="spotjobs-kit-"))
        for name in names:
            if name.endswith("/"):
                blobs = list(self._client.list_blobs(self._bucket, prefix=self._base + name))
            else:
                blobs = [self._bucket.blob(self._base + name)]
            for blob in blobs:
                target = local / blob.name[len(self._base) :]
                target.parent.mkdir(parents=True, exist_ok=True)
                blob.download_to_filename(str(target))
        return str(local)

    def _listed(self, blob: Any) -> ListedObject:
        return ListedObject(
            blob.name[len(self._base) :],
            int(blob.generation or 0),
            int(blob.size or 0),
            blob.updated or EPOCH,
        )
