"""The pruner's storage adapter (shared/pruning/store.py `GcsPruneStore`) on the simulator's
in-memory Cloud Storage: what it lists and how many calls that costs (the counts a run reports),
the resumed listing of request folders, the one-item stat, and the generation-guarded delete, also
when another instance acts between its look and its delete. tests/functional/test_prune.py drives
the same adapter on fake-gcs-server."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
import requests

from shared.pruning.store import DeleteOutcome, GcsPruneStore, widen_connection_pool
from sim.gcs import MemoryStorage

BUCKET = "ckpt"
NOW = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
# GCS serves at most this many items per listing page.
GCS_PAGE_LIMIT = 1000


class Storage:
    """In-memory Cloud Storage that counts the calls it serves, and lets a test act just before
    the next call of one kind (another instance, between the adapter's look and its delete)."""

    def __init__(self) -> None:
        self.served: Counter[str] = Counter()
        self.before: dict[str, Callable[[], None]] = {}
        self.memory = MemoryStorage(clock=lambda: NOW, io=self._io)
        self.client = self.memory.client()
        self.bucket = self.client.bucket(BUCKET)

    def _io(self, _service: str, operation: str, perform: Callable[[], Any]) -> Any:
        interleaved = self.before.pop(operation, None)
        if interleaved is not None:
            interleaved()
        self.served[operation] += 1
        return perform()

    def put(self, name: str, data: bytes = b"0123456789") -> None:
        self.bucket.blob(name).upload_from_string(data)
        self.served.clear()  # only the adapter's calls are counted

    def store(self, *, verify_generation: bool = False, **kwargs: Any) -> GcsPruneStore:
        return GcsPruneStore(self.bucket, verify_generation=verify_generation, **kwargs)

    def names(self) -> set[str]:
        return set(self.memory.objects(BUCKET))


@pytest.fixture
def storage() -> Storage:
    return Storage()


def test_a_new_store_has_made_no_calls(storage: Storage) -> None:
    assert storage.store().calls() == {"list": 0, "read": 0, "delete": 0, "verify": 0}


def test_calls_count_every_call_the_storage_served(storage: Storage) -> None:
    for name in ("f/a/x", "f/a/y", "f/b/z", "f/top.pt", "f/index.txt"):
        storage.put(name)
    store = storage.store(verify_generation=True)
    store.list_folder("f/")
    store.list_all("f/a/")
    store.stat("f/top.pt")
    store.read_text("f/index.txt")
    store.read_text("f/missing.txt")
    [listed] = store.list_folder("f/b/").files
    store.delete(listed)
    calls = store.calls()
    assert calls == {"list": 4, "read": 2, "delete": 1, "verify": 1}
    # A verification is a one-item listing: each count is a call Cloud Storage served.
    assert storage.served == {"list": calls["list"] + calls["verify"], "read": calls["read"], "delete": calls["delete"]}


def test_a_listing_reads_every_page_and_counts_each(storage: Storage) -> None:
    files = [f"f/file-{i}" for i in range(5)]
    for name in [*files, "f/sub-1/x", "f/sub-2/y"]:
        storage.put(name)
    store = storage.store(page_size=2)
    listing = store.list_folder("f/")
    assert [o.name for o in listing.files] == files
    assert set(listing.subfolders) == {"f/sub-1/", "f/sub-2/"}
    assert [o.name for o in store.list_all("f/")] == [*files, "f/sub-1/x", "f/sub-2/y"]
    assert store.calls()["list"] == 4 + 4  # seven entries in pages of two, twice


def test_a_folder_of_a_full_page_is_listed_in_one_call(storage: Storage) -> None:
    """The adapter asks for pages as large as GCS serves: a run's listings cost one call per
    thousand objects, not more."""
    for i in range(GCS_PAGE_LIMIT):
        storage.put(f"f/step-{i:06d}/shard", b"")
    store = storage.store()
    assert len(store.list_all("f/")) == GCS_PAGE_LIMIT
    assert len(store.list_folder("f/").subfolders) == GCS_PAGE_LIMIT
    assert store.calls()["list"] == 2


def test_listed_objects_carry_generation_size_and_time(storage: Storage) -> None:
    storage.put("f/ckpt-1.pt", b"12345")
    storage.put("f/empty.pt", b"")
    live = storage.memory.objects(BUCKET)
    listed = {o.name: o for o in storage.store().list_all("f/")}
    assert listed["f/ckpt-1.pt"].generation == live["f/ckpt-1.pt"].generation
    assert (listed["f/ckpt-1.pt"].size, listed["f/ckpt-1.pt"].updated) == (5, NOW)
    assert listed["f/empty.pt"].size == 0  # an empty object frees no bytes


# Request folders, resumed after a cursor.


def test_request_ids_are_the_folders_under_the_root_in_listing_order(storage: Storage) -> None:
    for name in ("requests/b/x", "requests/a/x", "requests/a-1/x", "requests/-early/x", "requests/README", "other/c/x"):
        storage.put(name)
    # GCS orders the folder prefixes: "a-1/" comes before "a/".
    assert list(storage.store().list_request_ids("requests/")) == ["-early", "a-1", "a", "b"]


def test_folders_that_cannot_name_a_request_are_not_listed(storage: Storage) -> None:
    for name in ("requests/../checkpoints/x", "requests/./checkpoints/x", "requests/ok/checkpoints/x"):
        storage.put(name)
    store = storage.store()
    assert list(store.list_request_ids("requests/")) == ["ok"]
    assert list(store.list_request_ids("requests/", after="-")) == ["ok"]


def test_a_resumed_listing_starts_after_its_cursor(storage: Storage) -> None:
    for rid in ("a", "a-1", "a.b", "b", "c"):
        storage.put(f"requests/{rid}/checkpoints/x")
    store = storage.store()
    assert list(store.list_request_ids("requests/", after="a")) == ["b", "c"]
    assert list(store.list_request_ids("requests/", after="a-1")) == ["a.b", "a", "b", "c"]
    assert list(store.list_request_ids("requests/", after="c")) == []


def test_a_resumed_listing_does_not_read_the_folders_before_its_cursor(storage: Storage) -> None:
    """A bounded run resumes at its cursor: what the earlier runs covered costs no listing again."""
    for i in range(10):
        storage.put(f"requests/r{i}/checkpoints/x")
    store = storage.store(page_size=1)
    assert list(store.list_request_ids("requests/", after="r7")) == ["r8", "r9"]
    assert store.calls()["list"] == 2


# One object's metadata.


def test_stat_finds_exactly_the_name_asked(storage: Storage) -> None:
    storage.put("f/step-1/COMMITTED.tmp")
    store = storage.store()
    assert store.stat("f/step-1/COMMITTED") is None  # a longer name is another object
    storage.put("f/step-1/COMMITTED", b"{}")
    found = store.stat("f/step-1/COMMITTED")
    assert found is not None and (found.name, found.size) == ("f/step-1/COMMITTED", 2)
    assert store.stat("f/step-2/COMMITTED") is None
    assert store.calls()["list"] == 3


def test_read_text_of_a_missing_object_is_none(storage: Storage) -> None:
    storage.put("f/checkpoint", b'model_checkpoint_path: "ckpt-1"\n')
    store = storage.store()
    assert store.read_text("f/checkpoint") == 'model_checkpoint_path: "ckpt-1"\n'
    assert store.read_text("f/nothing") is None


# The guarded delete, with and without a look first (fake-gcs-server ignores the precondition).


@pytest.mark.parametrize("verify_generation", [False, True])
def test_a_delete_removes_the_generation_listed(storage: Storage, verify_generation: bool) -> None:
    storage.put("f/ckpt-1.pt")
    store = storage.store(verify_generation=verify_generation)
    [listed] = store.list_all("f/")
    assert store.delete(listed) is DeleteOutcome.DELETED
    assert storage.names() == set()


@pytest.mark.parametrize("verify_generation", [False, True])
def test_a_delete_of_an_object_rewritten_since_listed_is_refused(storage: Storage, verify_generation: bool) -> None:
    storage.put("f/ckpt-1.pt")
    store = storage.store(verify_generation=verify_generation)
    [listed] = store.list_all("f/")
    storage.put("f/ckpt-1.pt", b"saved again")
    assert store.delete(listed) is DeleteOutcome.CHANGED
    assert storage.memory.objects(BUCKET)["f/ckpt-1.pt"].data == b"saved again"


@pytest.mark.parametrize("verify_generation", [False, True])
def test_a_delete_of_an_object_someone_else_deleted_is_gone(storage: Storage, verify_generation: bool) -> None:
    storage.put("f/ckpt-1.pt")
    store = storage.store(verify_generation=verify_generation)
    [listed] = store.list_all("f/")
    storage.bucket.delete_blob("f/ckpt-1.pt")
    assert store.delete(listed) is DeleteOutcome.GONE
    # A look that finds it gone spends no delete.
    assert store.calls()["delete"] == (0 if verify_generation else 1)


@pytest.mark.parametrize(
    ("between", "outcome"),
    [("rewritten", DeleteOutcome.CHANGED), ("deleted", DeleteOutcome.GONE)],
)
def test_another_instance_acting_between_the_look_and_the_delete(
    storage: Storage, between: str, outcome: DeleteOutcome
) -> None:
    storage.put("f/ckpt-1.pt")
    store = storage.store(verify_generation=True)
    [listed] = store.list_all("f/")

    def act() -> None:
        if between == "rewritten":
            storage.bucket.blob("f/ckpt-1.pt").upload_from_string(b"saved again")
        else:
            storage.bucket.delete_blob("f/ckpt-1.pt")

    storage.before["delete"] = act
    assert store.delete(listed) is outcome
    assert storage.names() == ({"f/ckpt-1.pt"} if between == "rewritten" else set())


# The HTTP connection pool the deleting threads share.


class _SessionClient:
    def __init__(self) -> None:
        self._http = requests.Session()


@pytest.mark.parametrize(("threads", "pool"), [(32, 32), (10, 10), (4, 10)])
def test_the_connection_pool_holds_a_connection_per_thread(threads: int, pool: int) -> None:
    """Never narrower than requests' own default of 10 per host."""
    client = _SessionClient()
    widen_connection_pool(client, threads)  # type: ignore[arg-type]
    for scheme in ("https://", "http://"):
        assert client._http.get_adapter(scheme + "storage.googleapis.com/")._pool_maxsize == pool


def test_a_client_without_an_http_session_is_left_as_it_is(storage: Storage) -> None:
    widen_connection_pool(storage.client, 32)  # type: ignore[arg-type]
