"""The framework venv's interpreter, for the kill-and-resume tests and the kit's."""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from spotjobs_kit.lines import KitRecord

REPO = Path(__file__).resolve().parents[2]


FRAMEWORK_PYTHON = REPO / ".venv-frameworks" / "bin" / "python"


def framework_python() -> str:
    if not FRAMEWORK_PYTHON.exists():
        pytest.fail(f"{FRAMEWORK_PYTHON.relative_to(REPO)} is missing: `make .venv-frameworks` (run by `make test`)")
    return str(FRAMEWORK_PYTHON)


# The kit of this checkout, ahead of the copy installed in the venv (a worktree's own changes).
KIT_SOURCE = REPO / "kit" / "src"


def framework_env(home: Path) -> dict[str, str]:
    """The environment a framework script starts from: a PATH, `home`, and this checkout's kit."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "PYTHONPATH": str(KIT_SOURCE)}


# The training scripts the snippets of docs/kit.md ("Your framework") are appended to.
CHILDREN = REPO / "tests" / "frameworks" / "children"

KIT_PAGE = REPO / "docs" / "kit.md"
TORN_STEP = 999


@dataclass(frozen=True)
class Case:
    script: str
    torn: tuple[str, str]  # (folder, file) planted as a torn checkpoint
    edit: Callable[[str], str] = field(default=lambda text: text)


CASES = {
    "hf-trainer": Case("hf_trainer.py", (f"checkpoint-{TORN_STEP}", "model.safetensors")),
    "hf-accelerate": Case("hf_accelerate.py", (f"step-{TORN_STEP:06d}", "model.safetensors")),
    "lightning": Case("lightning_fit.py", (f"step-{TORN_STEP:06d}", "model.ckpt")),
    "torch-save": Case("torch_loop.py", (f"step-{TORN_STEP:06d}", "state.pt")),
    "torch-dcp": Case("torch_loop.py", (f"step-{TORN_STEP:06d}", "__0_0.distcp")),
    "orbax": Case("orbax_loop.py", (str(TORN_STEP), "_sharding")),
    "keras": Case("keras_fit.py", (f"step-{TORN_STEP:06d}", "model.weights.h5")),
}


def kit_snippet(name: str) -> str:
    """The code block under `<!-- snippet: NAME -->` in docs/kit.md, exactly."""
    found = re.search(rf"<!-- snippet: {re.escape(name)} -->\n```python\n(.*?)```\n", KIT_PAGE.read_text(), re.S)
    assert found, f"docs/kit.md has no snippet {name!r}"
    return found.group(1)


@dataclass
class Outcome:
    returncodes: list[int]  # one per process
    records: list[KitRecord]
    steps: list[int]  # the STEP lines: steps computed in this run
    stdout: list[str]  # rank 0's
    stderr: str

    def events(self, event: str) -> list[KitRecord]:
        return [r for r in self.records if r.event == event]

    @property
    def started(self) -> KitRecord:
        (started,) = self.events("run_started")
        return started

    @property
    def committed(self) -> int | None:
        """The newest step this run committed (or found committed: a kept re-save)."""
        saved = [r.step for r in self.records if r.event in ("checkpoint_committed", "checkpoint_kept")]
        return max((s for s in saved if s is not None), default=self.started.resumed_step)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
