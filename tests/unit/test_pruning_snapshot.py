"""Discovery over one listing of the checkpoints folder (shared/pruning/snapshot.py): the same
judgement as over the live store, in every layout the kit knows and in generated ones, for one
listing plus the reads of markers that exist; a folder past one page is judged live."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from spotjobs_kit.layout import ListedObject

from shared.ledger.records import RequestRecord
from shared.ledger.states import RequestStatus
from shared.pruning.plan import RequestPlan, plan_request
from shared.pruning.snapshot import FolderSnapshot, discovery_store
from shared.pruning.store import GcsPruneStore
from sim.gcs import MemoryStorage
from tests.support.checkpoint_layouts import LAYOUTS
from tests.support.checkpoint_specs import checkpoint_specs, write
from tests.support.prune_store import LAYOUT, NOW, MemoryStore, folder, policy, prefix_checkpoint


class ListingMemoryStore(MemoryStore):
    """The in-memory store, able to list a whole folder in one call as GcsPruneStore does."""

    def list_tree(self, prefix: str, *, limit: int) -> list[ListedObject] | None:
        objects = [o for n, o in self._listing() if n.startswith(prefix)]
        return objects if len(objects) <= limit else None

    def read_listed(self, obj: ListedObject) -> str | None:
        return self.read_text(obj.name)


def running() -> RequestRecord:
    return RequestRecord("r1", {}, "", status=RequestStatus.RUNNING)


def plan(store: MemoryStore, **overrides: object) -> RequestPlan:
    return plan_request(store, "r1", running(), layout=LAYOUT, policy=policy(**overrides), now=NOW)


def judged(result: RequestPlan) -> list[tuple[Any, ...]]:
    return [
        (v.checkpoint.name, v.checkpoint.complete, v.checkpoint.evidence, v.checkpoint.objects, v.delete, v.reason)
        for v in result.verdicts
    ] + [(u.name, u.reason) for u in result.unmanaged]


def both(fill: Any) -> tuple[MemoryStore, ListingMemoryStore]:
    live, tree = MemoryStore(), ListingMemoryStore()
    for store in (live, tree):
        fill(store)
    return live, tree


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_every_layout_is_judged_as_over_the_live_store(name: str) -> None:
    live, tree = both(lambda store: LAYOUTS[name](store, "r1"))
    assert judged(plan(tree, keep_last=1)) == judged(plan(live, keep_last=1))
    assert tree.calls()["list"] <= live.calls()["list"] and tree.calls()["read"] <= live.calls()["read"]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs=st.lists(checkpoint_specs, max_size=10), keep_last=st.integers(1, 3))
def test_generated_layouts_are_judged_as_over_the_live_store(specs: list[Any], keep_last: int) -> None:
    def fill(store: MemoryStore) -> None:
        stems = []
        for i, spec in enumerate(specs):
            unit, _ = write(store, "r1", i, spec)
            if spec.kind == "tensorflow" and spec.complete:
                stems.append(unit)
        store.put(f"{folder('r1')}checkpoint", text="".join(f'all_model_checkpoint_paths: "{s}"\n' for s in stems))

    live, tree = both(fill)
    assert judged(plan(tree, keep_last=keep_last)) == judged(plan(live, keep_last=keep_last))


def test_prefix_checkpoints_cost_one_listing_and_no_check_each() -> None:
    live, tree = both(lambda store: [prefix_checkpoint(store, "r1", f"step-{s:06d}/") for s in range(100, 600, 100)])
    plan(live)
    plan(tree)
    # Live: the folder's listing, the markers tried for the first checkpoint, one check for each
    # of the others, and a read of each one's COMMITTED (the kit's marker: the files it lists).
    assert live.calls() == {"list": 1 + 4 + 4, "read": 5, "delete": 0}
    assert tree.calls() == {"list": 1, "read": 5, "delete": 0}


def test_a_read_of_what_the_listing_does_not_show_costs_nothing() -> None:
    tree = ListingMemoryStore()
    prefix_checkpoint(tree, "r1", "step-000100/", marker="commit_success.txt")
    snapshot = discovery_store(tree, folder("r1"))
    assert isinstance(snapshot, FolderSnapshot)
    assert snapshot.read_text(f"{folder('r1')}step-000100/COMMITTED") is None
    assert snapshot.stat(f"{folder('r1')}step-000100/commit_success.txt") is not None
    assert tree.calls() == {"list": 1, "read": 0, "delete": 0}


def test_a_folder_past_one_page_is_judged_over_the_live_store(monkeypatch: pytest.MonkeyPatch) -> None:
    import shared.pruning.snapshot as snapshot

    monkeypatch.setattr(snapshot, "SNAPSHOT_OBJECTS", 3)
    tree = ListingMemoryStore()
    prefix_checkpoint(tree, "r1", "step-000100/", shards=3)
    assert discovery_store(tree, folder("r1")) is tree
    assert tree.calls()["list"] == 1


def test_an_incomplete_checkpoints_contents_are_listed_live_after_the_snapshot() -> None:
    """A marker written after the folder's listing still counts (`with_contents`), as it did when
    discovery's calls were each made live: the contents that decide a delete are never the snapshot's."""
    tree = ListingMemoryStore()
    prefix_checkpoint(tree, "r1", "step-000100/", marker=None)
    prefix_checkpoint(tree, "r1", "step-000200/")
    listed = tree.list_tree

    def list_then_commit(prefix: str, *, limit: int) -> list[ListedObject] | None:
        objects = listed(prefix, limit=limit)
        tree.put(f"{folder('r1')}step-000100/COMMITTED")
        return objects

    tree.list_tree = list_then_commit  # type: ignore[method-assign]
    verdicts = {v.checkpoint.name: v for v in plan(tree, keep_last=2).verdicts}
    assert verdicts["step-000100/"].checkpoint.complete and not verdicts["step-000100/"].delete


def gcs_bucket(storage: MemoryStorage | None = None) -> Any:
    return (storage or MemoryStorage(clock=lambda: NOW)).client().bucket("ckpt-bucket")


def test_the_gcs_store_lists_a_folder_in_one_call_or_says_it_is_bigger() -> None:
    bucket = gcs_bucket()
    for name in ("requests/r1/checkpoints/a", "requests/r1/checkpoints/b/c", "requests/r10/checkpoints/x"):
        bucket.blob(name).upload_from_string(b"x")
    store = GcsPruneStore(bucket, verify_generation=False)
    whole = store.list_tree("requests/r1/", limit=2)
    assert [o.name for o in whole or []] == ["requests/r1/checkpoints/a", "requests/r1/checkpoints/b/c"]
    assert store.list_tree("requests/", limit=2) is None
    assert store.calls()["list"] == 2


def test_a_listed_generation_is_read_once_per_client() -> None:
    storage = MemoryStorage(clock=lambda: NOW)
    bucket = gcs_bucket(storage)
    bucket.blob("requests/r1/checkpoints/step-000100/COMMITTED").upload_from_string("{}")
    first, second = (GcsPruneStore(bucket, verify_generation=False) for _ in range(2))  # two runs
    [marker] = first.list_tree("requests/r1/", limit=10) or []
    assert first.read_listed(marker) == second.read_listed(marker) == "{}"
    assert (first.calls()["read"], second.calls()["read"]) == (1, 0)
    other = GcsPruneStore(gcs_bucket(storage), verify_generation=False)  # another client: its own
    assert other.read_listed(marker) == "{}" and other.calls()["read"] == 1


def test_a_marker_rewritten_since_the_listing_is_read_as_it_is_now_and_not_remembered() -> None:
    bucket = gcs_bucket()
    name = "requests/r1/checkpoints/step-000100/COMMITTED"
    bucket.blob(name).upload_from_string("old")
    store = GcsPruneStore(bucket, verify_generation=False)
    [listed] = store.list_tree("requests/r1/", limit=10) or []
    bucket.blob(name).upload_from_string("new")
    assert store.read_listed(listed) == store.read_listed(listed) == "new"
    assert store.calls()["read"] == 4  # each: the guarded read refused, then the plain one
    bucket.blob(name).delete()
    assert store.read_listed(listed) is None


def test_lists_trees_answers_as_the_protocols_runtime_check() -> None:
    from shared.pruning.snapshot import TreeListingStore, lists_trees

    class Both:
        def list_tree(self) -> None: ...
        def read_listed(self) -> None: ...

    class OneOnly:
        def list_tree(self) -> None: ...

    blocked = Both()
    blocked.read_listed = None  # type: ignore[method-assign]  # on the instance only: the class has it
    given = OneOnly()
    given.read_listed = lambda: None  # type: ignore[attr-defined]  # on the instance only
    for store in (Both(), OneOnly(), blocked, given, object(), FolderSnapshot):
        assert lists_trees(store) == isinstance(store, TreeListingStore)


_NAME_PARTS = st.sampled_from(["a", "a-1", "a0", "b", "ckpt-1", "ckpt-10", "x.pt", ""])


@given(
    names=st.lists(st.lists(_NAME_PARTS, min_size=1, max_size=4).map("/".join), max_size=30, unique=True),
    asked=st.lists(_NAME_PARTS, max_size=3).map(lambda parts: "".join(f"{p}/" for p in parts)),
)
def test_a_snapshots_folder_listing_is_the_listing_filtered_by_its_prefix(names: list[str], asked: str) -> None:
    root = "requests/r1/checkpoints/"
    objects = [ListedObject(root + name, 1, 0, NOW) for name in names]
    prefix = root + asked
    listing = FolderSnapshot(ListingMemoryStore(), root, objects).list_folder(prefix)
    under = sorted((o for o in objects if o.name.startswith(prefix)), key=lambda o: o.name)
    assert listing.files == tuple(o for o in under if "/" not in o.name[len(prefix) :])
    assert listing.subfolders == tuple(
        sorted({prefix + o.name[len(prefix) :].split("/")[0] + "/" for o in under if "/" in o.name[len(prefix) :]})
    )
