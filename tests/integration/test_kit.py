"""The trainer kit in real processes: a SIGTERM'd trainer commits within the grace period, and the
kit installs and imports in a bare venv (nothing but the standard library)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import venv
from pathlib import Path

import pytest
from spotjobs_kit import parse_kit_line

from devstack.stack import REPO_ROOT
from tests.support.deploy_zip import pip_failure

KIT_ROOT = REPO_ROOT / "kit"
GRACE_SECONDS = 10.0

# A user's script in the callback style: the save runs from the SIGTERM hook.
TRAINER = textwrap.dedent(
    """
    import pathlib, sys, time
    from spotjobs_kit import Run

    run = Run.start()
    step = run.resume_step() or 0

    def save():
        with run.checkpoint(step) as folder:
            for i in range(3):
                pathlib.Path(folder, f"shard-{i}").write_text(str(step))
                time.sleep(0.05)

    run.on_preemption(save)
    while True:
        step += 1
        run.step = step
        if step % 50 == 0:
            save()
        time.sleep(0.005)
    """
)


def test_sigterm_runs_the_save_commits_it_last_and_reports_it(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(TRAINER)
    checkpoints = tmp_path / "out" / "checkpoints"
    env = {
        **os.environ,
        "AIP_CHECKPOINT_DIR": str(checkpoints),
        "SPOTJOBS_REQUEST_ID": "r1",
        "SPOTJOBS_ATTEMPT": "1",
        "PYTHONPATH": str(KIT_ROOT / "src"),
    }
    process = subprocess.Popen(
        [sys.executable, str(script)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    first = parse_kit_line(process.stdout.readline())
    assert first is not None and first.event == "run_started" and first.run == 0
    deadline = time.monotonic() + 60
    while not any(checkpoints.glob("step-*/COMMITTED")) and time.monotonic() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=GRACE_SECONDS) == 128 + signal.SIGTERM
    records = [parse_kit_line(line) for line in process.stdout.read().splitlines()]
    assert all(records), records
    preempted = next(r for r in records if r.event == "preempted")  # type: ignore[union-attr]
    committed = [r for r in records if r.event == "checkpoint_committed"]  # type: ignore[union-attr]
    assert preempted.step is not None and preempted.seconds_since_checkpoint is not None
    last = committed[-1]
    assert last.step == preempted.step
    # The emergency save commits after the `preempted` line, unless the signal landed right after
    # the loop's own commit of that step: re-saving a committed step is then a no-op that says so.
    kept = [r for r in records if r.event == "checkpoint_kept" and r.step == preempted.step]  # type: ignore[union-attr]
    assert records.index(last) > records.index(preempted) or (
        kept and records.index(kept[0]) > records.index(preempted)
    )
    folder = checkpoints / f"step-{last.step:06d}"
    marker = folder / "COMMITTED"
    shards = sorted(folder.glob("shard-*"))
    assert len(shards) == 3 and json.loads(marker.read_text())["step"] == last.step
    assert all(marker.stat().st_mtime_ns >= shard.stat().st_mtime_ns for shard in shards)

    # The next start resumes there, as the job's second run.
    again = subprocess.Popen(
        [sys.executable, str(script)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert again.stdout is not None
        started = parse_kit_line(again.stdout.readline())
        assert started is not None and (started.resumed_step, started.run) == (last.step, 1)
    finally:
        again.kill()
        again.communicate(timeout=30)


def python_3_9() -> str:
    """The oldest Python the kit promises: pyenv's, else a python3.9 on PATH that runs (pyenv's
    shim is on PATH but fails when no 3.9 is selected)."""
    candidates = [str(p) for p in sorted(Path.home().glob(".pyenv/versions/3.9.*/bin/python3.9"))]
    candidates += [c for c in [shutil.which("python3.9")] if c]
    runs = (c for c in candidates if subprocess.run([c, "--version"], capture_output=True).returncode == 0)
    found = next(runs, None)
    if found is None:
        pytest.fail("no Python 3.9 (python3.9 on PATH, or pyenv's): the kit's oldest Python goes untested")
    return found


@pytest.mark.parametrize("interpreter", ["this one", "3.9"])
def test_the_kit_installs_and_imports_in_a_bare_venv(tmp_path: Path, interpreter: str) -> None:
    # As a user would: `pip install ./kit` in a fresh venv (pip builds it in an isolated build
    # environment, fetching setuptools from the package index; the venv gets the kit only).
    bare = tmp_path / "bare"
    if interpreter == "3.9":
        subprocess.run([python_3_9(), "-m", "venv", "--clear", str(bare)], check=True, timeout=300)
    else:
        venv.EnvBuilder(with_pip=True, clear=True).create(bare)
    python = str(bare / "bin" / "python")
    pip_env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    # From a copy: setuptools builds in the source tree (kit/build/), and both parameters run at
    # once under pytest-xdist ("File exists: build/bdist.../spotjobs_kit-0.1.0.dist-info").
    source = shutil.copytree(KIT_ROOT, tmp_path / "kit", ignore=shutil.ignore_patterns("build", "*.egg-info"))
    install = subprocess.run(
        [python, "-m", "pip", "install", "--disable-pip-version-check", str(source)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**pip_env, "PYTHONNOUSERSITE": "1"},
    )
    if install.returncode != 0:
        pip_failure(install, "pip install ./kit")
    clean = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONNOUSERSITE": "1"}
    probe = textwrap.dedent(
        f"""
        import io, json, sys, sysconfig
        before = set(sys.modules)  # the interpreter's own (site may load a .pth hook)
        import spotjobs_kit
        import spotjobs_kit.hf, spotjobs_kit.lightning, spotjobs_kit.torch, spotjobs_kit.orbax, spotjobs_kit.keras  # no framework until used
        from spotjobs_kit import Run
        run = Run.start({str(tmp_path / "ckpt")!r}, environ={{}}, stream=io.StringIO())
        with run.checkpoint(1) as folder:
            open(folder + "/w", "w").write("x")
        assert Run.start({str(tmp_path / "ckpt")!r}, environ={{}}, stream=io.StringIO()).resume_step() == 1
        # Python 3.9 has no sys.stdlib_module_names: a module is the standard library's when it
        # is built in or lives in the interpreter's stdlib folders (not site-packages).
        stdlib = tuple(sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib"))
        def outside_stdlib(name):
            path = getattr(sys.modules[name], "__file__", None) or ""
            return bool(path) and (not path.startswith(stdlib) or "site-packages" in path)
        loaded = {{m for m in set(sys.modules) - before if outside_stdlib(m)}}
        outside = sorted({{m.split(".")[0] for m in loaded}} - {{"spotjobs_kit"}})
        print(json.dumps({{"file": spotjobs_kit.__file__, "outside": outside, "version": sys.version_info[:2]}}))
        """
    )
    result = subprocess.run(
        [python, "-I", "-c", probe], capture_output=True, text=True, timeout=120, env=clean, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["file"].startswith(str(bare)), report
    assert report["outside"] == [], report
    if interpreter == "3.9":
        assert report["version"] == [3, 9], report
    listed = subprocess.run(
        [python, "-m", "pip", "list", "--format", "json"], capture_output=True, text=True, timeout=120, env=clean
    )
    names = {p["name"].lower() for p in json.loads(listed.stdout)}
    assert names - {"pip", "setuptools"} == {"spotjobs-kit"}, names
