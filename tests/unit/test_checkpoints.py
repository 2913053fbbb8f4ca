"""Discovery and completeness over listings (spotjobs_kit.layout, the kit's and the pruner's rules)."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st
from spotjobs_kit.layout import (
    Evidence,
    FolderListing,
    Kind,
    ListedObject,
    copy_order,
    discover,
    evidence_beside,
    group_listing,
    hf_checkpoint_complete,
    is_checkpoint_file,
    is_orbax_tmp,
    newest_complete,
    orbax_committed,
    order_markers,
    parse_tf_index,
    stem_of,
    step_of,
    tensorflow_stem_complete,
)

from tests.support.framework_layouts import (
    NEVER_CHECKPOINTS,
    SAVES,
    dcp,
    deepspeed,
    hf_trainer,
    hf_trainer_sharded,
    keras_model_checkpoint,
    keras_weights,
    lightning,
    orbax_gcs,
    orbax_metadata,
    orbax_renamed_legacy,
    orbax_tmp,
    write_save,
)
from tests.support.prune_store import (
    NOW,
    MemoryStore,
    file_checkpoint,
    folder,
    prefix_checkpoint,
    tf_checkpoint,
    tf_index,
)

MARKERS = ("commit_success.txt", ".metadata", "checkpoint", "COMMITTED")


@pytest.mark.parametrize(
    ("name", "step"),
    [
        ("step-000400", 400),
        ("400", 400),
        ("ckpt-5", 5),
        ("model.ckpt-1000", 1000),
        ("epoch=3-step=1000", 1000),  # Lightning: the step, not the epoch
        ("step_400_epoch_2", 400),
        ("checkpoint-12", 12),
        ("checkpoint_12", 12),
        ("global_step1000", 1000),  # DeepSpeed
        ("iter_0001000", 1000),  # Megatron
        ("iteration-7", 7),
        ("epoch_3", 3),
        ("ckpt.000400", 400),
        ("Step400", 400),
        ("best", None),
        ("checkpoint", None),
        # Numbers that follow no checkpoint word are not steps: these are user files.
        ("vocab_32000", None),
        ("run-20240105-1200", None),
        ("weights.000400", None),
        ("model-400", None),
        ("timestep_512", None),  # "step" inside another word
        ("checkpoint_3b", None),  # a size, not a step
        ("ckpt-400-final", 400),
    ],
)
def test_step_of(name: str, step: int | None) -> None:
    assert step_of(name) == step
    assert step_of(name) == step  # again, from the memo


def test_a_bare_number_is_remembered_apart_for_directories_and_files() -> None:
    assert (step_of("400"), step_of("400", bare_number=False), step_of("400")) == (400, None, 400)


def test_user_files_with_numbers_are_unmanaged_and_never_checkpoints() -> None:
    prefix = "requests/r1/checkpoints/"
    names = ("ckpt-000400.pt", "ckpt-000500.pt", "run-20240105-1200.log", "vocab_32000.txt", "20240105.log")
    grouping = group_listing(
        FolderListing(prefix, files=tuple(_obj(prefix + n) for n in names), subfolders=(prefix + "400/",))
    )
    assert sorted(grouping.stems) == ["ckpt-000400", "ckpt-000500"]
    assert grouping.prefixes == {"400/": 400}  # a bare number names a directory checkpoint only
    assert sorted(u.name for u in grouping.unmanaged) == ["20240105.log", "run-20240105-1200.log", "vocab_32000.txt"]


# No checkpoint word can be spelled without c, e, i, k, p, s or t.
_WORDLESS = st.text(alphabet="abdfghlmnoruvwxyzABD0123456789-_.=", min_size=1, max_size=30)


@given(name=_WORDLESS.filter(lambda n: not n.isdigit()))
def test_numbers_after_no_checkpoint_word_are_never_steps(name: str) -> None:
    assert step_of(name) is None


@pytest.mark.parametrize(
    ("file_name", "stem"),
    [
        ("ckpt-5.index", "ckpt-5"),
        ("ckpt-5.data-00000-of-00001", "ckpt-5"),
        ("model.ckpt-1000.meta", "model.ckpt-1000"),
        ("ckpt-000400.pt", "ckpt-000400"),
        ("model-400.tar.gz", "model-400"),
        ("weights.000400.h5", "weights.000400"),
        ("ckpt-400.v2.pt", "ckpt-400"),
        ("400.orbax-checkpoint-tmp-1700000000", "400"),
        ("400.orbax-checkpoint-tmp", "400"),
        ("ckpt-2.weights.h5", "ckpt-2"),
        ("checkpoint", "checkpoint"),
    ],
)
def test_stem_of(file_name: str, stem: str) -> None:
    assert stem_of(file_name) == stem


def _obj(name: str, minutes: int = 0) -> ListedObject:
    return ListedObject(name, 1, 10, NOW + timedelta(minutes=minutes))


def test_group_listing_splits_prefixes_stems_and_bookkeeping() -> None:
    prefix = "requests/r1/checkpoints/"
    listing = FolderListing(
        prefix,
        files=(
            _obj(prefix + "ckpt-5.index"),
            _obj(prefix + "ckpt-5.data-00000-of-00001"),
            _obj(prefix + "ckpt-000400.pt"),
            _obj(prefix + "checkpoint"),
            _obj(prefix + "README.md"),
            _obj("requests/r1/model/saved.pb"),  # not in the folder: ignored
        ),
        subfolders=(prefix + "step-000100/", prefix + "best/", "requests/r2/checkpoints/x/"),
    )
    grouping = group_listing(listing)
    assert grouping.prefixes == {"step-000100/": 100}
    assert {stem: len(objs) for stem, objs in grouping.stems.items()} == {"ckpt-5": 2, "ckpt-000400": 1}
    assert grouping.tf_index is not None and grouping.tf_index.name.endswith("/checkpoint")
    assert sorted(u.name for u in grouping.unmanaged) == ["README.md", "best/", "checkpoint"]


def test_parse_tf_index_reads_both_fields_and_strips_directories() -> None:
    text = (
        'model_checkpoint_path: "gs://b/requests/r1/checkpoints/ckpt-7"\n'
        'all_model_checkpoint_paths: "ckpt-6"\n'
        'all_model_checkpoint_paths: "gs://b/requests/r1/checkpoints/ckpt-7"\n'
        "all_model_checkpoint_timestamps: 1700000000.5\n"
    )
    assert parse_tf_index(text) == {"ckpt-6", "ckpt-7"}


@pytest.mark.parametrize(
    ("names", "named", "complete"),
    [
        (["ckpt-5.index", "ckpt-5.data-00000-of-00002", "ckpt-5.data-00001-of-00002"], {"ckpt-5"}, True),
        (["ckpt-5.index", "ckpt-5.data-00000-of-00002"], {"ckpt-5"}, False),  # a shard missing
        (["ckpt-5.data-00000-of-00001"], {"ckpt-5"}, False),  # no .index
        (["ckpt-5.index", "ckpt-5.data-00000-of-00001"], {"ckpt-4"}, False),  # not named
        (["ckpt-5.index"], {"ckpt-5"}, False),  # no data at all
    ],
)
def test_tensorflow_stem_completeness(names: list[str], named: set[str], complete: bool) -> None:
    assert tensorflow_stem_complete("ckpt-5", names, frozenset(named)) is complete


def test_order_markers_tries_the_last_hit_first() -> None:
    assert order_markers(MARKERS, "COMMITTED")[0] == "COMMITTED"
    assert order_markers(MARKERS, None) == list(MARKERS)


def test_discover_judges_every_format() -> None:
    store = MemoryStore()
    prefix_checkpoint(store, "r1", "step-000100/", marker="COMMITTED")
    prefix_checkpoint(store, "r1", "step-000200/", marker=None)
    prefix_checkpoint(store, "r1", "300/", marker="commit_success.txt")
    prefix_checkpoint(store, "r1", "checkpoint-400/", marker=".metadata")
    file_checkpoint(store, "r1", "ckpt-000500.pt")
    tf_checkpoint(store, "r1", "ckpt-600")
    tf_checkpoint(store, "r1", "ckpt-700", index=False)
    tf_index(store, "r1", ["ckpt-600"])
    found = discover(store, folder("r1"), MARKERS)
    judged = {(c.name, c.kind, c.step, c.complete) for c in found.checkpoints}
    assert judged == {
        ("step-000100/", Kind.PREFIX, 100, True),
        ("step-000200/", Kind.PREFIX, 200, False),
        ("300/", Kind.PREFIX, 300, True),
        ("checkpoint-400/", Kind.PREFIX, 400, True),
        ("ckpt-000500", Kind.FILES, 500, True),
        ("ckpt-600", Kind.FILES, 600, True),
        ("ckpt-700", Kind.FILES, 700, False),
    }
    assert [c.step for c in found.checkpoints] == [100, 200, 300, 400, 500, 600, 700]
    assert [u.name for u in found.unmanaged] == ["checkpoint"]


def test_discover_never_lists_shards() -> None:
    store = MemoryStore()
    for step in range(10):
        prefix_checkpoint(store, "r1", f"step-{step:06d}/", shards=50)
    calls: list[str] = []
    store.before_list_all = calls.append
    discover(store, folder("r1"), MARKERS)
    assert calls == []
    # One folder listing; the first checkpoint tries the markers in order until COMMITTED hits,
    # then every other checkpoint tries COMMITTED first: one check each.
    assert store.calls()["list"] == 1 + len(MARKERS) + 9
    found = discover(store, folder("r1"), MARKERS, try_first="COMMITTED")
    assert found.marker_hit == "COMMITTED"
    assert store.calls()["list"] == (1 + len(MARKERS) + 9) + (1 + 10)  # another request's hint


def test_equal_steps_order_by_update_time() -> None:
    store = MemoryStore()
    file_checkpoint(store, "r1", "ckpt-000100.pt", at=NOW)
    prefix_checkpoint(store, "r1", "step-000100/", at=NOW - timedelta(hours=1))
    found = discover(store, folder("r1"), MARKERS)
    assert [c.name for c in found.checkpoints] == ["step-000100/", "ckpt-000100"]


# What real frameworks write (tests/unit/framework_layouts.py), judged without the kit's marker.


@pytest.mark.parametrize(
    ("name", "checkpoint"),
    [
        ("ckpt-000400.pt", True),
        ("epoch=3-step=1000.ckpt", True),
        ("ckpt-0002.keras", True),
        ("weights-epoch2.weights.h5", True),
        ("model-step-5.safetensors", True),
        ("params_step_9.msgpack", True),
        ("ckpt-5.index", True),
        ("ckpt-5.data-00000-of-00001", True),
        ("eval_step_1100.json", False),
        ("metrics-step-300.csv", False),
        ("train_step_5.log", False),
        ("step-400.txt", False),
    ],
)
def test_only_files_with_a_checkpoint_extension_are_checkpoints(name: str, checkpoint: bool) -> None:
    assert is_checkpoint_file(name) is checkpoint
    grouping = group_listing(FolderListing("p/", files=(_obj("p/" + name),)))
    assert bool(grouping.stems) is checkpoint
    assert [u.name for u in grouping.unmanaged] == ([] if checkpoint else [name])


def _written(save, cut=None) -> MemoryStore:
    store = MemoryStore()
    write_save(store, "r1", save, cut=cut)
    return store


@pytest.mark.parametrize("save", [hf_trainer(20), hf_trainer_sharded(20)], ids=["single", "sharded"])
def test_hugging_face_checkpoints_are_complete_once_trainer_state_follows_the_model(save) -> None:
    for cut in range(len(save.writes) + 1):
        found = discover(_written(save, cut), folder("r1"), MARKERS)
        judged = [(c.name, c.complete) for c in found.checkpoints]
        assert judged == ([] if cut == 0 else [("checkpoint-20/", cut == len(save.writes))]), cut
    [complete] = discover(_written(save), folder("r1"), MARKERS).checkpoints
    assert complete.evidence == Evidence.HF_TRAINER_STATE
    assert [o.name.rsplit("/", 1)[-1] for o in complete.objects] == ["trainer_state.json"]


@pytest.mark.parametrize(
    ("files", "subfolders", "complete"),
    [
        ({"trainer_state.json", "model.safetensors"}, set(), True),
        ({"trainer_state.json", "adapter_model.safetensors"}, set(), True),  # PEFT
        ({"trainer_state.json", "latest"}, {"global_step20"}, True),  # DeepSpeed ZeRO inside
        ({"trainer_state.json"}, {"pytorch_model_fsdp_0"}, True),  # FSDP sharded state
        ({"trainer_state.json", "model-00001-of-00002.safetensors"}, set(), False),  # a shard missing
        ({"trainer_state.json", "config.json", "optimizer.pt"}, set(), False),  # no weights
        ({"model.safetensors", "optimizer.pt", "scheduler.pt"}, set(), False),  # torn: no state
        ({"trainer_state.json", "model.safetensors", "rng_state_0.pth", "rng_state_1.pth"}, set(), True),
        ({"trainer_state.json", "model.safetensors", "rng_state_0.pth", "rng_state_2.pth"}, set(), False),
    ],
)
def test_hf_checkpoint_complete(files: set[str], subfolders: set[str], complete: bool) -> None:
    assert hf_checkpoint_complete(files, subfolders) is complete


def test_deepspeed_tag_folders_are_complete_when_latest_names_them() -> None:
    store = MemoryStore()
    write_save(store, "r1", deepspeed(100))
    write_save(store, "r1", deepspeed(200))
    write_save(store, "r1", deepspeed(300), cut=3)  # torn: `latest` still names global_step200
    found = discover(store, folder("r1"), MARKERS)
    assert [(c.name, c.complete) for c in found.checkpoints] == [
        ("global_step100/", False),  # no longer named, no kit marker: not provably complete
        ("global_step200/", True),
        ("global_step300/", False),
    ]
    assert "latest" in [u.name for u in found.unmanaged]
    store.put(folder("r1") + "global_step100/COMMITTED")  # the kit's marker
    assert [c.complete for c in discover(store, folder("r1"), MARKERS).checkpoints] == [True, True, False]


def test_a_deepspeed_folder_named_by_latest_needs_its_model_states() -> None:
    """The pruner deletes a DeepSpeed folder's model states first (layout.completion_objects), so
    that what an interrupted delete leaves is incomplete; the rule counted the folder complete
    while `latest` named it, model states or not."""
    store = MemoryStore()
    write_save(store, "r1", deepspeed(100))
    write_save(store, "r1", deepspeed(200))
    del store.objects[f"{folder('r1')}global_step200/mp_rank_00_model_states.pt"]
    found = discover(store, folder("r1"), MARKERS)
    assert [(c.name, c.complete, c.evidence) for c in found.checkpoints] == [
        ("global_step100/", False, Evidence.NO_MARKER),
        ("global_step200/", False, Evidence.DEEPSPEED_INCOMPLETE),
    ]


def test_orbax_folders_with_or_without_tmp_folders() -> None:
    store = MemoryStore()
    write_save(store, "r1", orbax_gcs(10))  # gs:// in place, commit_success.txt last
    write_save(store, "r1", orbax_gcs(20), cut=len(orbax_gcs(20).writes) - 2)  # torn in place
    write_save(store, "r1", orbax_renamed_legacy(30))  # an older Orbax's rename
    write_save(store, "r1", orbax_tmp(40))  # 0.12 caught before its rename, commit file included
    found = discover(store, folder("r1"), MARKERS)
    assert [(c.name, c.step, c.complete, c.evidence) for c in found.checkpoints] == [
        ("10/", 10, True, Evidence.MARKER),
        ("20/", 20, False, Evidence.NO_MARKER),
        ("30/", 30, True, Evidence.ORBAX_METADATA),
        ("40.orbax-checkpoint-tmp/", 40, False, Evidence.ORBAX_TMP),
    ]


@pytest.mark.parametrize("name", ["400.orbax-checkpoint-tmp/", "400.orbax-checkpoint-tmp-1700000000/"])
def test_orbax_tmp_folders_carry_their_step(name: str) -> None:
    assert is_orbax_tmp(name)
    assert group_listing(FolderListing("p/", subfolders=("p/" + name,))).prefixes == {name: 400}


@pytest.mark.parametrize(
    ("text", "committed"),
    [
        (orbax_metadata(True), True),
        (orbax_metadata(False), False),
        ("not json", False),
        ("[]", False),
        (None, False),
    ],
)
def test_orbax_committed(text: str | None, committed: bool) -> None:
    assert orbax_committed(text) is committed


def test_lightning_keras_and_dcp_checkpoints_beside_what_is_never_one() -> None:
    store = MemoryStore()
    for save in (lightning(4), lightning(8), keras_model_checkpoint(2), keras_weights(3), dcp(5)):
        write_save(store, "r1", save)
    write_save(store, "r1", dcp(6), cut=1)  # .metadata not written yet
    for name in NEVER_CHECKPOINTS:
        store.put(folder("r1") + name)
    found = discover(store, folder("r1"), MARKERS)
    assert [(c.name, c.complete) for c in found.checkpoints] == [
        ("ckpt-0002", True),
        ("weights-epoch3", True),
        ("epoch=0-step=4", True),
        ("step-000005/", True),
        ("step-000006/", False),
        ("epoch=0-step=8", True),
    ]
    unmanaged = {u.name for u in found.unmanaged}
    assert unmanaged == {"backup/", "last.ckpt", "zero_to_fp32.py"} | {n for n in NEVER_CHECKPOINTS if "/" not in n}


# A folder holding the kit's marker is complete only while the files it lists are there at their sizes.

KIT_FILES = {"model.ckpt": 300, "default/d/3e73d032": 40, ".metadata": 5}


def _kit_committed(store: MemoryStore, name: str, files: dict[str, int] = KIT_FILES) -> None:
    for relative, size in files.items():
        store.put(f"{folder('r1')}{name}{relative}", size=size)
    store.put(f"{folder('r1')}{name}COMMITTED", text=json.dumps({"v": 1, "step": step_of(name), "files": files}))


@pytest.mark.parametrize(
    ("change", "complete"),
    [
        ("nothing", True),
        ("model.ckpt deleted", False),
        ("default/d/3e73d032 deleted", False),  # a file in a subfolder
        ("model.ckpt resized", False),
        ("a file added", True),  # what the marker does not list is not its business
    ],
)
def test_a_kit_marker_counts_only_while_the_files_it_lists_are_there_at_their_sizes(
    change: str, complete: bool
) -> None:
    store = MemoryStore()
    _kit_committed(store, "step-000100/")
    _kit_committed(store, "step-000200/")
    newest = f"{folder('r1')}step-000200/"
    if change.endswith("deleted"):
        del store.objects[newest + change.split()[0]]
    elif change.endswith("resized"):
        store.put(newest + "model.ckpt", size=299)
    elif change == "a file added":
        store.put(newest + "notes.txt", size=1)
    found = discover(store, folder("r1"), MARKERS)
    judged = {c.name: (c.complete, c.evidence) for c in found.checkpoints}
    assert judged["step-000100/"] == (True, Evidence.MARKER)
    # .metadata (DCP's marker) is found before COMMITTED; the kit's list is checked all the same.
    assert judged["step-000200/"] == ((True, Evidence.MARKER) if complete else (False, Evidence.FILES_MISSING))
    assert newest_complete(found.checkpoints).name == ("step-000200/" if complete else "step-000100/")


def test_a_hugging_face_folder_with_the_kit_marker_is_checked_against_its_list() -> None:
    store = MemoryStore()
    write_save(store, "r1", hf_trainer(20))
    files = {o.name[len(folder("r1") + "checkpoint-20/") :]: o.size for o in store.objects.values()}
    store.put(f"{folder('r1')}checkpoint-20/COMMITTED", text=json.dumps({"v": 1, "step": 20, "files": files}))
    assert [c.complete for c in discover(store, folder("r1"), MARKERS).checkpoints] == [True]
    del store.objects[f"{folder('r1')}checkpoint-20/optimizer.pt"]
    [torn] = discover(store, folder("r1"), MARKERS).checkpoints
    assert (torn.complete, torn.evidence) == (False, Evidence.FILES_MISSING)


def test_an_orbax_metadata_file_alone_is_no_checkpoint() -> None:
    """Issue 28, break 8: a copy cut short after `_CHECKPOINT_METADATA` (it sorts first) was
    judged complete by its commit timestamp, with none of the arrays it commits."""
    store = MemoryStore()
    write_save(store, "r1", orbax_renamed_legacy(300))
    store.put(f"{folder('r1')}400/_CHECKPOINT_METADATA", text=orbax_metadata(True))
    found = discover(store, folder("r1"), MARKERS)
    assert [(c.name, c.complete, c.evidence) for c in found.checkpoints] == [
        ("300/", True, Evidence.ORBAX_METADATA),
        ("400/", False, Evidence.ORBAX_METADATA_ALONE),
    ]


@pytest.mark.parametrize("framework", sorted(SAVES))
@pytest.mark.parametrize("kit_marker", [False, True])
def test_a_copy_in_copy_order_is_complete_only_with_every_data_file(framework: str, kit_marker: bool) -> None:
    """What resubmit writes into the new folder, cut after any object: complete only once
    every file but a redundant commit marker is there (issue 28, break 8)."""
    save = SAVES[framework](400)
    source = _written(save)
    if kit_marker and save.unit.endswith("/"):
        files = {n[len(folder("r1") + save.unit) :]: o.size for n, o in source.objects.items() if save.unit in n}
        source.put(f"{folder('r1')}{save.unit}COMMITTED", text=json.dumps({"v": 1, "step": 400, "files": files}))
    found = discover(source, folder("r1"), MARKERS)
    newest = newest_complete(found.checkpoints)
    if newest is None or newest.kind != Kind.PREFIX:
        return  # torn by construction (Orbax's tmp folder), or a file checkpoint: nothing to order
    contents = source.list_all(folder("r1") + newest.name)
    ordered = copy_order(newest, folder("r1"), contents, MARKERS)
    beside = evidence_beside(newest, found.unmanaged)
    data = {o.name for o in contents if o.name.rsplit("/", 1)[-1] not in MARKERS}
    for cut in range(len(ordered) + len(beside) + 1):
        copy = MemoryStore()
        for obj in ordered[:cut]:
            copy.put(obj.name.replace("/r1/", "/r2/"), size=obj.size, text=source.texts.get(obj.name))
        for name, text in list(beside.items())[: max(0, cut - len(ordered))]:
            copy.put(folder("r2") + name, text=text)
        resumed = newest_complete(discover(copy, folder("r2"), MARKERS).checkpoints)
        if resumed is not None:
            assert {n.replace("/r2/", "/r1/") for n in copy.names()} >= data, (framework, cut)
    assert resumed is not None and (resumed.name, resumed.step) == (newest.name, 400)


def test_the_evidence_beside_a_folder_names_what_was_copied() -> None:
    store = MemoryStore()
    write_save(store, "r1", deepspeed(100))
    tf_checkpoint(store, "r1", "ckpt-7")
    tf_index(store, "r1", ["ckpt-7"])
    found = discover(store, folder("r1"), MARKERS)
    by_name = {c.name: c for c in found.checkpoints}
    assert evidence_beside(by_name["global_step100/"], found.unmanaged) == {"latest": "global_step100"}
    [(name, index)] = evidence_beside(by_name["ckpt-7"], found.unmanaged).items()
    assert name == "checkpoint" and parse_tf_index(index) == {"ckpt-7"}
    assert evidence_beside(by_name["global_step100/"], []) == {}  # no `latest` to carry
