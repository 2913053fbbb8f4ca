"""The trainer kit (kit/src/spotjobs_kit): agreement with the pruner, runs, lines, Python 3.9."""

from __future__ import annotations

import ast
import io
import json
import os
import signal
import tempfile
from pathlib import Path
from typing import Any

import pytest
import spotjobs_kit
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from spotjobs_kit import Run, parse_kit_line
from spotjobs_kit.layout import DEFAULT_COMMIT_MARKERS, KIT_MARKER
from spotjobs_kit.lines import format_line, is_signed_with
from spotjobs_kit.storage import FileStore

from shared.pruning.plan import plan_request
from shared.settings import Settings
from tests.support.checkpoint_layouts import LAYOUTS, mirror
from tests.support.checkpoint_specs import checkpoint_specs, write
from tests.support.prune_store import LAYOUT, NOW, MemoryStore, policy

KIT_DIR = Path(spotjobs_kit.__file__).parent


def start(root: Path, environ: dict[str, str] | None = None, **kwargs: Any) -> tuple[Run, io.StringIO]:
    out = io.StringIO()
    run = Run.start(str(root), environ=environ or {}, handle_sigterm=False, stream=out, **kwargs)
    return run, out


def kit_lines(out: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line)["spotjobs_kit"] for line in out.getvalue().splitlines()]


# One definition of completeness: the kit resumes from what the pruner never deletes.


def pruner_newest(store: MemoryStore, rid: str) -> tuple[str, int] | None:
    """The complete checkpoint a pruner keeping only one keeps: the newest complete one."""
    plan = plan_request(store, rid, None, layout=LAYOUT, policy=policy(keep_last=1), now=NOW)
    kept = [d.checkpoint for d in plan.verdicts if d.checkpoint.complete and not d.delete]
    assert len(kept) <= 1
    return (kept[0].name, kept[0].step) if kept else None


def kit_newest(root: Path) -> tuple[str, int] | None:
    run, _ = start(root, markers=policy().commit_markers)
    found = run.resume_checkpoint
    return (found.name, found.step) if found else None


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_the_kit_resumes_from_the_checkpoint_the_pruner_keeps(name: str, tmp_path: Path) -> None:
    store = MemoryStore()
    LAYOUTS[name](store, "r1")
    mirror(store, "r1", tmp_path / "checkpoints")
    assert kit_newest(tmp_path / "checkpoints") == pruner_newest(store, "r1")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs=st.lists(checkpoint_specs, max_size=10))
def test_the_kit_and_the_pruner_agree_on_generated_layouts(specs: list[Any]) -> None:
    store = MemoryStore()
    tf_stems = []
    for i, spec in enumerate(specs):  # the prune property test's layouts
        unit, _ = write(store, "r1", i, spec)
        if spec.kind == "tensorflow" and spec.complete:
            tf_stems.append(unit)
    store.put(
        f"{LAYOUT.folder_for('r1')}checkpoint", text="".join(f'all_model_checkpoint_paths: "{s}"\n' for s in tf_stems)
    )
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch) / "checkpoints"
        mirror(store, "r1", root)
        assert kit_newest(root) == pruner_newest(store, "r1")


def test_the_pruner_never_deletes_the_kit_run_objects() -> None:
    store = MemoryStore()
    LAYOUTS["with the kit's run objects"](store, "r1")
    plan = plan_request(store, "r1", None, layout=LAYOUT, policy=policy(keep_last=1), now=NOW)
    assert "_spotjobs_runs/" in {u.name for u in plan.unmanaged}
    assert all(not d.checkpoint.name.startswith("_spotjobs") for d in plan.verdicts)


def test_one_list_of_default_commit_markers() -> None:
    assert Settings.commit_markers == DEFAULT_COMMIT_MARKERS
    assert Settings.from_env({}).commit_markers == DEFAULT_COMMIT_MARKERS


# Runs.


def test_a_run_commits_with_the_marker_last_and_the_next_run_resumes_there(tmp_path: Path) -> None:
    env = {"SPOTJOBS_REQUEST_ID": "r1", "SPOTJOBS_ATTEMPT": "2", "CLOUD_ML_JOB_ID": "123"}
    order: list[str] = []

    class Recording(FileStore):
        def publish(self, name: str, local: str, **kwargs: Any) -> dict[str, int]:
            order.append("publish " + name)
            return super().publish(name, local, **kwargs)

        def write(self, name: str, data: bytes) -> None:
            order.append("write " + name)
            super().write(name, data)

    run, out = start(tmp_path, env, store=Recording(tmp_path))
    assert run.resume_step() is None and run.resume_path() is None and run.restart == 0
    with run.checkpoint(400) as folder:
        Path(folder, "weights.bin").write_bytes(b"w" * 10)
        Path(folder, "sub").mkdir()
        Path(folder, "sub", "opt.bin").write_bytes(b"o" * 5)
    assert order == ["publish step-000400/", "write step-000400/COMMITTED"]
    marker = json.loads((tmp_path / "step-000400" / KIT_MARKER).read_text())
    assert marker["step"] == 400 and marker["files"] == {"sub/opt.bin": 5, "weights.bin": 10}
    started, committed, progress = kit_lines(out)
    assert started == {
        **started,
        "event": "run_started",
        "request_id": "r1",
        "attempt": 2,
        "run": 0,
        "job_id": "123",
        "resumed_step": None,
        "checkpoint": None,
    }
    assert committed["event"] == "checkpoint_committed" and committed["step"] == 400
    assert committed["bytes"] == 15 and committed["seconds"] >= 0
    assert (progress["event"], progress["step"]) == ("progress", 400)  # one at every commit

    again, out = start(tmp_path, env)
    assert again.resume_step() == 400 and again.restart == 1
    assert again.resume_path() == str(tmp_path / "step-000400/")
    assert kit_lines(out)[0]["resumed_step"] == 400 and kit_lines(out)[0]["run"] == 1
    # A new attempt (a new Vertex job) counts its own runs from 0.
    other, _ = start(tmp_path, {**env, "SPOTJOBS_ATTEMPT": "3"})
    assert other.restart == 0
    assert sorted(p.name for p in (tmp_path / "_spotjobs_runs").iterdir()) == [
        "attempt-2-run-0000.json",
        "attempt-2-run-0001.json",
        "attempt-3-run-0000.json",
    ]


def test_a_failed_save_commits_nothing(tmp_path: Path) -> None:
    run, out = start(tmp_path)
    with pytest.raises(RuntimeError), run.checkpoint(7) as folder:
        Path(folder, "half").write_bytes(b"x")
        raise RuntimeError("disk full")
    assert not (tmp_path / "step-000007" / KIT_MARKER).exists()
    assert [line["event"] for line in kit_lines(out)] == ["run_started"]
    again, out = start(tmp_path)
    assert again.resume_step() is None
    assert [(line["event"], line.get("step")) for line in kit_lines(out)] == [
        ("run_started", None),
        ("checkpoint_torn", 7),
    ]


def test_only_the_primary_replica_commits_and_reports(tmp_path: Path) -> None:
    spec = {"cluster": {}, "environment": "cloud", "task": {"type": "workerpool1", "index": 0}}
    run, out = start(tmp_path, {"CLUSTER_SPEC": json.dumps(spec)})
    with run.checkpoint(5) as folder:
        Path(folder, "shard-1").write_bytes(b"x")
    assert out.getvalue() == "" and run.restart is None
    assert not (tmp_path / "step-000005" / KIT_MARKER).exists()
    assert not (tmp_path / "_spotjobs_runs").exists()
    primary = {**spec, "task": {"type": "workerpool0", "index": 0}}
    assert start(tmp_path, {"CLUSTER_SPEC": json.dumps(primary)})[0].identity.primary


def test_gs_uris_go_through_the_fuse_mount_when_there_is_one(tmp_path: Path) -> None:
    (tmp_path / "gcs" / "bucket").mkdir(parents=True)
    run = Run.start(
        "gs://bucket/req/r1/checkpoints/",
        environ={},
        handle_sigterm=False,
        fuse_root=str(tmp_path / "gcs"),
        stream=io.StringIO(),
    )
    assert isinstance(run.store, FileStore)
    assert run.checkpoint_dir == "gs://bucket/req/r1/checkpoints/"
    with run.checkpoint(3) as folder:
        Path(folder, "w").write_bytes(b"x")
    assert (tmp_path / "gcs/bucket/req/r1/checkpoints/step-000003/COMMITTED").exists()


def test_sigterm_runs_the_save_and_reports_the_preemption(tmp_path: Path) -> None:
    out = io.StringIO()
    saved: list[int] = []
    with Run.start(str(tmp_path), environ={}, stream=out) as run:
        with run.checkpoint(10) as folder:
            Path(folder, "w").write_bytes(b"x")
        run.step = 12

        def save() -> None:
            with run.checkpoint(12) as folder:
                Path(folder, "w").write_bytes(b"y")
            saved.append(12)

        run.on_preemption(save, exit_code=None)  # return here instead of exiting
        os.kill(os.getpid(), signal.SIGTERM)
        assert run.preempted and saved == [12]
    assert signal.getsignal(signal.SIGTERM) is not run._on_sigterm  # put back
    events = [(line["event"], line.get("step")) for line in kit_lines(out) if line["event"] != "progress"]
    assert events == [
        ("run_started", None),
        ("checkpoint_committed", 10),
        ("preempted", 12),
        ("checkpoint_committed", 12),
    ]
    preempted = next(line for line in kit_lines(out) if line["event"] == "preempted")
    assert preempted["seconds_since_checkpoint"] >= 0


# Lines.


LINE = format_line(
    "run_started",
    {
        "request_id": "r 1",
        "attempt": 2,
        "run": 1,
        "resumed_step": 400,
        "checkpoint": "step-000400/",
        "time": "2026-11-01T12:00:00.000Z",
    },
)


def test_lines_parse_from_json_payload_with_doubles() -> None:
    payload = json.loads(LINE)
    payload.pop("severity")  # Cloud Logging moves it to the entry
    payload["spotjobs_kit"] = {k: float(v) if isinstance(v, int) else v for k, v in payload["spotjobs_kit"].items()}
    record = parse_kit_line(payload)
    assert record is not None
    assert (record.event, record.attempt, record.run, record.resumed_step) == ("run_started", 2, 1, 400)
    assert isinstance(record.attempt, int) and record.request_id == "r 1"


@pytest.mark.parametrize(
    "text",
    [
        LINE,
        LINE + "\n",
        "partial output of another print" + LINE + "\r\n",
        json.loads(LINE)["message"],
        "2026-11-01 INFO " + json.loads(LINE)["message"],
    ],
)
def test_lines_parse_from_text_payload(text: str) -> None:
    record = parse_kit_line(text)
    assert record is not None
    assert (record.event, record.request_id, record.attempt, record.run, record.resumed_step, record.checkpoint) == (
        "run_started",
        "r 1",
        2,
        1,
        400,
        "step-000400/",
    )
    assert record.dedupe_key() == parse_kit_line(LINE).dedupe_key()  # type: ignore[union-attr]


def test_the_message_alone_is_recognised_in_a_json_payload() -> None:
    record = parse_kit_line({"message": json.loads(LINE)["message"]})
    assert record is not None and record.resumed_step == 400


@pytest.mark.parametrize(
    "payload",
    [
        None,
        3,
        "",
        "plain text",
        '{"event":"checkpoint","step":5}',
        {"event": "resume"},
        {"spotjobs_kit": "nope"},
        {"spotjobs_kit": {}},
        '{"spotjobs_kit": {"event": ',
        "spotjobs-kit",
    ],
)
def test_other_lines_are_not_kit_lines(payload: Any) -> None:
    assert parse_kit_line(payload) is None


# Python 3.9, standard library only.


# What each module may import, inside a function only (lazily): google-cloud-storage for the GCS
# store, and each integration its own framework.
LAZY_IMPORTS = {
    "storage.py": {"google"},
    "hf.py": {"transformers"},
    "lightning.py": {"pytorch_lightning", "lightning"},
    "torch.py": {"torch"},
    "orbax.py": {"jax", "orbax"},
    "keras.py": {"keras"},
}


def test_kit_sources_are_python_3_9() -> None:
    files = sorted(KIT_DIR.glob("*.py"))
    assert files
    for path in files:
        lazy = LAZY_IMPORTS.get(path.name, set())
        text = path.read_text()
        tree = ast.parse(text, str(path), feature_version=(3, 9))
        assert "from __future__ import annotations" in text or path.name == "__init__.py", path
        for node in ast.walk(tree):
            if isinstance(node, ast.keyword) and node.arg in {"slots", "kw_only"}:
                pytest.fail(f"{path.name}: dataclass {node.arg}= is Python 3.10+")
            if isinstance(node, ast.Import | ast.ImportFrom):
                module = node.module if isinstance(node, ast.ImportFrom) else node.names[0].name
                top = (module or "").split(".")[0]
                assert top in {"__future__", "spotjobs_kit"} | lazy or top in _stdlib(), (path, module)
                if top in lazy:
                    assert node.col_offset > 0, f"{path.name}: {top} imported at module level"


def _stdlib() -> frozenset[str]:
    import sys

    return frozenset(sys.stdlib_module_names)


def test_training_code_that_raises_reports_run_failed(tmp_path: Path) -> None:
    import subprocess
    import sys

    from spotjobs_kit.lines import parse_kit_line

    script = (
        "from spotjobs_kit import Run\n"
        "run = Run.start()\n"
        "run.step = 12\n"
        "raise RuntimeError('a bug in the training code')\n"
    )
    env = {"AIP_CHECKPOINT_DIR": str(tmp_path / "checkpoints"), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60)
    records = [r for r in map(parse_kit_line, done.stdout.splitlines()) if r is not None]
    assert done.returncode == 1 and "RuntimeError" in done.stderr
    assert [r.event for r in records] == ["run_started", "run_failed"]
    assert records[-1].step == 12 and "a bug in the training code" in (records[-1].error or "")


# Never un-commit; commit what a framework wrote; torn checkpoints; progress; SIGTERM ownership.


def test_re_saving_a_committed_step_keeps_it_committed_whatever_happens_during_the_save(tmp_path: Path) -> None:
    run, _ = start(tmp_path)
    with run.checkpoint(5) as folder:
        Path(folder, "weights").write_text("trained to step 5")
    # The documented pattern right after a resume: SIGTERM, on_preemption(save) saves the resumed
    # step again, and the VM is reclaimed halfway through that save.
    resumed, out = start(tmp_path)
    assert resumed.resume_step() == 5
    with pytest.raises(SystemExit), resumed.checkpoint(5) as folder:
        Path(folder, "weights").write_text("half")
        raise SystemExit(143)
    assert start(tmp_path)[0].resume_step() == 5
    assert (tmp_path / "step-000005" / "weights").read_text() == "trained to step 5"
    with resumed.checkpoint(5) as folder:  # a save that completes: a no-op that says so
        Path(folder, "weights").write_text("again")
    assert (tmp_path / "step-000005" / "weights").read_text() == "trained to step 5"
    kept = [line for line in kit_lines(out) if line["event"] == "checkpoint_kept"]
    assert [(k["step"], k["checkpoint"], k["reason"]) for k in kept] == [(5, "step-000005/", "already committed")]


def test_a_folder_the_framework_wrote_is_committed_after_its_files(tmp_path: Path) -> None:
    run, out = start(tmp_path, total_steps=40)
    folder = tmp_path / "checkpoint-20"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"m" * 7)
    assert not run.is_committed("checkpoint-20/")
    assert run.commit("checkpoint-20", 20) is True
    marker = json.loads((folder / KIT_MARKER).read_text())
    assert marker["files"] == {"model.safetensors": 7} and marker["step"] == 20
    assert run.is_committed("checkpoint-20/")
    assert run.commit("checkpoint-20/", 20) is False  # once
    lines = kit_lines(out)
    assert lines[0]["event"] == "run_started" and lines[0]["total_steps"] == 40
    assert [line["event"] for line in lines[1:]] == ["checkpoint_committed", "progress", "checkpoint_kept"]
    assert lines[2]["total_steps"] == 40 and lines[2]["step"] == 20


# "Already committed" is judged by the rules discover applies, not by a marker's presence.


def plant(root: Path, files: dict[str, bytes | str]) -> None:
    for relative, body in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(body if isinstance(body, bytes) else body.encode())


def kit_marker(files: dict[str, int]) -> str:
    return json.dumps({"v": 1, "step": 0, "files": files})


ORBAX_COMMITTED = json.dumps({"commit_timestamp_nsecs": 1})


@pytest.mark.parametrize(
    ("name", "files", "committed"),
    [
        ("step-000010/", {"w": b"12345", KIT_MARKER: kit_marker({"w": 5})}, True),
        ("step-000011/", {KIT_MARKER: kit_marker({"w": 5})}, False),  # its file deleted later
        ("step-000012/", {"w": b"123", KIT_MARKER: kit_marker({"w": 5})}, False),  # another size
        ("step-000013/", {".metadata": b"m", KIT_MARKER: kit_marker({".metadata": 1, "__0_0.distcp": 4})}, False),
        ("14/", {"commit_success.txt": b"", "d/x": b"1", KIT_MARKER: kit_marker({"d/x": 1, "d/y": 1})}, False),
        ("15/", {"_CHECKPOINT_METADATA": ORBAX_COMMITTED}, False),  # Orbax's metadata alone
        ("16/", {"_CHECKPOINT_METADATA": ORBAX_COMMITTED, "state/x": b"1"}, True),  # an older Orbax's rename
        ("checkpoint-20/", {"trainer_state.json": "{}", "model.safetensors": b"m"}, True),  # HF, no marker
        ("17.orbax-checkpoint-tmp/", {"commit_success.txt": b""}, False),
    ],
)
def test_a_folder_is_committed_exactly_when_discover_judges_it_complete(
    name: str, files: dict[str, bytes | str], committed: bool, tmp_path: Path
) -> None:
    plant(tmp_path / name, files)
    run, _ = start(tmp_path)
    assert (name in {c.name for c in run.complete_checkpoints()}) is committed  # what resuming judges
    assert run.is_committed(name) is committed


def test_is_committed_names_no_checkpoint_without_a_step(tmp_path: Path) -> None:
    plant(tmp_path / "best", {KIT_MARKER: kit_marker({})})
    run, _ = start(tmp_path)
    assert not run.is_committed("best/")  # discover counts it as no checkpoint either


@pytest.mark.parametrize("commit", [True, False])
def test_a_step_whose_files_were_deleted_is_saved_again_and_committed(commit: bool, tmp_path: Path) -> None:
    run, _ = start(tmp_path)
    with run.checkpoint(3) as folder:
        Path(folder, "w").write_text("step 3")
    with run.checkpoint(5) as folder:
        Path(folder, "w").write_text("step 5")
    (tmp_path / "step-000005" / "w").unlink()  # deleted later: step 5's marker vouches for nothing
    rerun, out = start(tmp_path)
    assert rerun.resume_step() == 3
    with rerun.checkpoint(5, commit=commit) as folder:  # training reaches step 5 again
        Path(folder, "w").write_text("step 5, saved again")  # another size than the marker lists
        if not commit:
            Path(folder, ".metadata").write_text("the framework's own marker")
    events = [(line["event"], line.get("step")) for line in kit_lines(out)]
    assert ("checkpoint_committed", 5) in events and ("checkpoint_kept", 5) not in events
    assert (tmp_path / "step-000005" / "w").read_text() == "step 5, saved again"
    assert start(tmp_path)[0].resume_step() == 5


def test_a_step_saved_again_and_cut_short_is_not_vouched_for_by_its_old_marker(tmp_path: Path) -> None:
    # Seed 177: a step's files have the same sizes at every save, so the old marker (names and
    # sizes) judged a re-save cut after its first file, beside the old save's other file, complete.
    run, _ = start(tmp_path)
    with run.checkpoint(3) as folder:
        Path(folder, "w").write_text("step 3")
    with run.checkpoint(5) as folder:
        Path(folder, "model.pt").write_text("model 5, run 1")
        Path(folder, "optim.pt").write_text("optim 5, run 1")
    (tmp_path / "step-000005" / "optim.pt").unlink()  # a lifecycle rule or a person deletes one file
    rerun, _ = start(tmp_path)
    assert rerun.resume_step() == 3
    with pytest.raises(RuntimeError), rerun.checkpoint(5) as folder:  # training reaches step 5 again
        Path(folder, "optim.pt").write_text("optim 5, run 2")  # the size the old marker lists
        raise RuntimeError("the VM is reclaimed before model.pt is rewritten")
    assert start(tmp_path)[0].resume_step() == 3  # not a mix of run 1's model and run 2's optimizer


def test_a_framework_folder_saved_again_over_a_stale_marker_is_committed_again(tmp_path: Path) -> None:
    run, _ = start(tmp_path)
    folder = tmp_path / "step-000020"
    plant(folder, {"__0_0.distcp": b"old!", ".metadata": b"m"})  # what torch DCP writes
    assert run.commit("step-000020/", 20) is True
    (folder / "__0_0.distcp").unlink()
    rerun, out = start(tmp_path)
    assert not rerun.is_committed("step-000020/")  # saved again, not kept
    (folder / "__0_0.distcp").write_bytes(b"new!")  # the re-save: the same size as before
    assert rerun.commit("step-000020/", 20, started=0.0) is True  # a save preceded: committed afresh
    assert rerun.commit("step-000020/", 20) is False  # then kept
    assert [line["event"] for line in kit_lines(out)][-3:] == ["checkpoint_committed", "progress", "checkpoint_kept"]
    assert start(tmp_path)[0].resume_step() == 20


def test_a_torn_checkpoint_newer_than_the_resume_point_is_skipped_and_reported(tmp_path: Path) -> None:
    run, _ = start(tmp_path)
    with run.checkpoint(10) as folder:
        Path(folder, "w").write_text("10")
    (tmp_path / "step-000020").mkdir()
    (tmp_path / "step-000020" / "w").write_text("half")  # no marker: the save was cut short
    (tmp_path / "step-000005").mkdir()  # older and incomplete: not in the way, not reported
    again, out = start(tmp_path)
    assert again.resume_step() == 10 and [t.step for t in again.torn] == [20]
    torn = [line for line in kit_lines(out) if line["event"] == "checkpoint_torn"]
    assert [(t["step"], t["checkpoint"]) for t in torn] == [(20, "step-000020/")]
    record = parse_kit_line(out.getvalue().splitlines()[-1])
    assert record is not None and (record.event, record.step) == ("checkpoint_torn", 20)


def test_a_committed_folder_missing_a_file_it_lists_is_skipped_for_the_previous_one(tmp_path: Path) -> None:
    """Issue 28, break 15: a committed folder whose files were deleted later was resumed from, and
    the framework raised at every restart: a crash loop instead of the previous checkpoint."""
    run, _ = start(tmp_path)
    for step in (10, 20):
        with run.checkpoint(step) as folder:
            Path(folder, "weights.bin").write_bytes(b"w" * step)
            Path(folder, "opt").mkdir()
            Path(folder, "opt", "state.bin").write_bytes(b"o" * step)
    (tmp_path / "step-000020" / "opt" / "state.bin").unlink()
    again, out = start(tmp_path)
    assert again.resume_step() == 10 and again.resume_path() == str(tmp_path / "step-000010")
    torn = [line for line in kit_lines(out) if line["event"] == "checkpoint_torn"]
    assert [(t["step"], t["checkpoint"]) for t in torn] == [(20, "step-000020/")]


def test_progress_lines_are_at_most_one_a_minute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [1000.0]
    monkeypatch.setattr("spotjobs_kit.run.time.monotonic", lambda: clock[0])
    run, out = start(tmp_path, total_steps=100)
    for step in range(1, 31):
        clock[0] += 1.0  # a step a second
        run.progress(step)
    clock[0] += 31.0
    run.progress(31)  # 61 s after the start: one line
    clock[0] += 1.0
    run.progress(32)
    progress = [line for line in kit_lines(out) if line["event"] == "progress"]
    assert [(p["step"], p["total_steps"]) for p in progress] == [(31, 100)]
    assert progress[0]["steps_per_second"] == pytest.approx(31 / 61, abs=1e-3)
    record = parse_kit_line(out.getvalue().splitlines()[-1])
    assert record is not None and record.steps_per_second == pytest.approx(31 / 61, abs=1e-3)
    assert record.total_steps == 100


def test_sigterm_handlers_are_chained_and_reasserted(tmp_path: Path) -> None:
    calls: list[str] = []
    before = signal.signal(signal.SIGTERM, lambda s, f: calls.append("user's"))
    try:
        with Run.start(str(tmp_path), environ={}, stream=io.StringIO()) as run:
            run.install_exit_hook = lambda: None  # type: ignore[method-assign]
            framework = signal.signal(signal.SIGTERM, lambda s, f: calls.append("framework's"))
            run.reassert_sigterm()  # the framework replaced the kit's without chaining it
            assert signal.getsignal(signal.SIGTERM) == run._on_sigterm and callable(framework)
            run.on_preemption(None, exit_code=None)
            os.kill(os.getpid(), signal.SIGTERM)
            assert run.preempted and calls == ["user's", "framework's"]
            run.finish()  # this test's process must not exit 143
    finally:
        signal.signal(signal.SIGTERM, before)


@pytest.mark.parametrize(
    "ending",
    [
        "pass",
        "raise SystemExit()",
        "raise SystemExit(0)",
        "run.exit_preempted()",
        "run.close(); import sys; sys.exit(0)",
    ],
)
def test_a_preempted_process_exits_143_whatever_the_training_code_does(tmp_path: Path, ending: str) -> None:
    import subprocess
    import sys

    script = (
        "import atexit, os, signal\n"
        "from spotjobs_kit import Run\n"
        "atexit.register(print, 'an earlier exit hook ran')\n"
        "run = Run.start()\n"
        "os.kill(os.getpid(), signal.SIGTERM)  # then the framework returns cleanly\n"
        f"{ending}\n"
    )
    env = {"AIP_CHECKPOINT_DIR": str(tmp_path / "checkpoints"), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60)
    events = [r.event for r in map(parse_kit_line, done.stdout.splitlines()) if r is not None]
    assert events == ["run_started", "preempted"]
    assert done.returncode == (0 if "close" in ending else 143), done.stderr
    # The kit's own way out leaves the exit status to SystemExit: every exit hook still runs.
    assert ("an earlier exit hook ran" in done.stdout) == (ending != "pass" and "SystemExit" not in ending)


def test_a_finished_run_exits_as_it_likes_after_a_late_sigterm(tmp_path: Path) -> None:
    import subprocess
    import sys

    script = (
        "import os, signal\n"
        "from spotjobs_kit import Run\n"
        "run = Run.start()\n"
        "os.kill(os.getpid(), signal.SIGTERM)\n"
        "run.finish(10)  # the training was done: its end is not a preemption\n"
    )
    env = {"AIP_CHECKPOINT_DIR": str(tmp_path / "checkpoints"), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr


def test_a_sigterm_after_run_finished_is_no_preemption(tmp_path: Path) -> None:
    calls: list[str] = []

    def users(signum: int, frame: Any) -> None:
        calls.append("user's")

    before = signal.signal(signal.SIGTERM, users)
    try:
        out = io.StringIO()
        with Run.start(str(tmp_path), environ={}, stream=out) as run:
            signal.signal(signal.SIGTERM, lambda s, f: calls.append("framework's"))
            run.reassert_sigterm()  # the framework's is chained
            run.on_preemption(lambda: calls.append("save"))  # then exit 143
            signal.signal(signal.SIGTERM, users)  # its training over, the framework put back what it found
            run.finish(10)
            assert signal.getsignal(signal.SIGTERM) == run._on_sigterm  # the kit's is back on top
            os.kill(os.getpid(), signal.SIGTERM)  # no SystemExit: the process goes on to its end
        assert calls == ["user's"] and not run.preempted  # no save, and the framework's is done
        assert [line["event"] for line in kit_lines(out)] == ["run_started", "run_finished"]
    finally:
        signal.signal(signal.SIGTERM, before)


def test_a_checkpoint_limit_retires_only_older_committed_checkpoints(tmp_path: Path) -> None:
    from spotjobs_kit._integration import retire_old_checkpoints

    run, _ = start(tmp_path)
    for step in (10, 20):
        with run.checkpoint(step) as folder:
            Path(folder, "w").write_text(str(step))
    (tmp_path / "step-000030").mkdir()  # torn: newer than every committed one
    assert retire_old_checkpoints(run, 1, ours=lambda c: c.name.startswith("step-")) == ["step-000010/"]
    assert sorted(p.name for p in tmp_path.glob("step-*")) == ["step-000020", "step-000030"]
    assert retire_old_checkpoints(run, 1, ours=lambda c: True) == []  # the newest complete one stays
    assert start(tmp_path)[0].resume_step() == 20


def test_a_loop_saves_at_sigterm_and_exits_143_unless_it_was_the_last_step(tmp_path: Path) -> None:
    import time

    from spotjobs_kit._integration import LoopCheckpoints

    class Saves(LoopCheckpoints):
        def save(self, step: int, state: object) -> None:
            with self.run.checkpoint(step) as folder:
                Path(folder, "state").write_text(json.dumps(state))

    run, out = start(tmp_path, total_steps=3)
    loop = Saves(run, every=10)
    loop.step_done(1, lambda: {"step": 1})
    assert run.last_committed is None  # neither a tenth step nor a SIGTERM
    run.preempted_at = time.monotonic()  # what the SIGTERM handler sets
    with pytest.raises(SystemExit) as exited:
        loop.step_done(2, lambda: {"step": 2})
    assert exited.value.code == 143 and run.last_committed == (2, "step-000002/")
    loop.step_done(3, lambda: {"step": 3})  # the last planned step: saved, and the run may finish
    loop.finish(3)
    assert run.finished and run.last_committed == (3, "step-000003/")
    assert [line["event"] for line in kit_lines(out)][-1] == "run_finished"


KIT_KEY = "k" * 64


def test_a_run_with_its_attempts_key_signs_each_line_and_every_transport_verifies(tmp_path: Path) -> None:
    """The JSON line, its jsonPayload (numbers as doubles) and its message text alone all verify."""
    environ = {"SPOTJOBS_REQUEST_ID": "r1", "SPOTJOBS_ATTEMPT": "2", "SPOTJOBS_KIT_KEY": KIT_KEY}
    run, out = start(tmp_path, environ)
    with run.checkpoint(10) as folder:
        Path(folder, "w.bin").write_bytes(b"x")
    run.finish(10)
    lines = out.getvalue().splitlines()
    events = {json.loads(line)["spotjobs_kit"]["event"] for line in lines}
    assert events >= {"run_started", "checkpoint_committed", "progress", "run_finished"}
    assert KIT_KEY not in out.getvalue() and KIT_KEY not in repr(run.identity)
    for line in lines:
        payload = json.loads(line)
        doubles = {k: float(v) if type(v) is int else v for k, v in payload["spotjobs_kit"].items()}
        for form in (line, {**payload, "spotjobs_kit": doubles}, payload["message"]):
            record = parse_kit_line(form)
            assert record is not None and record.sig and is_signed_with(record, KIT_KEY), form
            assert not is_signed_with(record, "another attempt's key")


@pytest.mark.parametrize("field, value", [("run", 7), ("request_id", "victim"), ("attempt", 3), ("event", "preempted")])
def test_a_signed_line_with_any_field_changed_does_not_verify(field: str, value: object) -> None:
    fields = {"request_id": "r1", "attempt": 2, "run": 0, "step": 5, "time": "2026-12-02T00:00:00.000Z"}
    payload = json.loads(format_line("run_finished", fields, key=KIT_KEY))
    payload["spotjobs_kit"][field] = value
    record = parse_kit_line(payload)
    assert record is not None and not is_signed_with(record, KIT_KEY)


def test_a_line_without_a_key_is_unsigned() -> None:
    record = parse_kit_line(format_line("run_finished", {"request_id": "r1", "attempt": 1, "run": 0}))
    assert record is not None and record.sig is None and not is_signed_with(record, KIT_KEY)
