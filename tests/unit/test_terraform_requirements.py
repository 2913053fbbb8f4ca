"""requirements.txt (the deploy lock the Cloud Functions buildpack installs) is current and sound.

It must be exactly what tools/lock_requirements.py generates from pyproject.toml and the installed
environment, so the deployed functions run the versions the tests ran with.
"""

from __future__ import annotations

import re
import tomllib

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.support.terraform import REPO_ROOT, module_config
from tools import lock_requirements

PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;#]+)$")


def _pins() -> dict[str, Version]:
    pins: dict[str, Version] = {}
    for line in (REPO_ROOT / "requirements.txt").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = PIN.match(line)
        assert match, f"requirements.txt line is not an exact pin: {line!r}"
        name = canonicalize_name(match.group(1))
        assert name not in pins, f"{name} pinned twice"
        pins[name] = Version(match.group(2))
    return pins


def test_requirements_txt_is_what_the_lock_tool_generates() -> None:
    current = (REPO_ROOT / "requirements.txt").read_text()
    generated = lock_requirements.generate()
    assert current == generated, (
        "requirements.txt is stale (pyproject.toml or the installed versions changed): "
        "run .venv/bin/python tools/lock_requirements.py and commit the result"
    )


def test_every_runtime_dependency_is_pinned_within_its_pyproject_range() -> None:
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    pins = _pins()
    for line in pyproject["project"]["dependencies"]:
        requirement = Requirement(line)
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{requirement.name} (pyproject) is not pinned in requirements.txt"
        assert requirement.specifier.contains(pins[name], prereleases=True), (
            f"requirements.txt pins {name}=={pins[name]}, outside pyproject's {requirement}"
        )


def test_requirements_install_no_local_project() -> None:
    # Installing the project itself (".", "-e .") would put a copy of shared/ in site-packages, and
    # the buildpack caches that layer by the requirements file's content: a code change with an
    # unchanged requirements.txt would then deploy stale code. The root main.py makes the source
    # tree importable instead (terraform/source_root/main.py).
    for line in (REPO_ROOT / "requirements.txt").read_text().splitlines():
        stripped = line.strip()
        assert not stripped.startswith(("-e", ".", "/", "file:", "-r", "-c", "--")), stripped


def test_lock_targets_the_deployed_runtime() -> None:
    runtime = module_config().variables["runtime"]["default"]
    assert runtime == "python" + lock_requirements.TARGET_PYTHON.replace(".", "")


def test_lock_tool_check_mode_passes() -> None:
    assert lock_requirements.main(["--check"]) == 0


# The resolver itself, on made-up distributions.


class _FakeDist:
    def __init__(self, name: str, version: str, requires: list[str]) -> None:
        self.metadata = {"Name": name}
        self.version = version
        self.requires = requires


def _fake(dists: dict[str, _FakeDist]):
    def distribution(name: str) -> _FakeDist:
        try:
            return dists[canonicalize_name(name)]
        except KeyError:
            raise lock_requirements.metadata.PackageNotFoundError(name) from None

    return distribution


def _resolve(roots: list[str], dists: dict[str, _FakeDist]) -> dict[str, str]:
    nodes = lock_requirements.resolve(
        [Requirement(r) for r in roots], lock_requirements.target_environment("3.12"), _fake(dists)
    )
    return {name: str(node.version) for name, node in nodes.items()}


def test_resolver_follows_markers_for_the_target_python_and_requested_extras() -> None:
    dists = {
        "app": _FakeDist(
            "app",
            "1.0",
            [
                "lib>=1",
                'old-backport; python_version < "3.10"',
                'new-only; python_version >= "3.12"',
                'extra-dep; extra == "fast"',
            ],
        ),
        "lib": _FakeDist("lib", "1.5", ['grpc-thing; extra == "grpc"']),
        "new-only": _FakeDist("new-only", "2.0", []),
        "extra-dep": _FakeDist("extra-dep", "3.0", []),
        "grpc-thing": _FakeDist("grpc-thing", "4.0", []),
    }
    assert _resolve(["app"], dists) == {"app": "1.0", "lib": "1.5", "new-only": "2.0"}
    assert _resolve(["app[fast]", "lib[grpc]"], dists) == {
        "app": "1.0",
        "lib": "1.5",
        "new-only": "2.0",
        "extra-dep": "3.0",
        "grpc-thing": "4.0",
    }


def test_resolver_rejects_an_installed_version_outside_a_range() -> None:
    dists = {"app": _FakeDist("app", "1.0", ["lib<1.5"]), "lib": _FakeDist("lib", "1.5", [])}
    with pytest.raises(lock_requirements.LockError, match="lib==1.5 does not satisfy"):
        _resolve(["app"], dists)


def test_resolver_reports_a_missing_distribution() -> None:
    with pytest.raises(lock_requirements.LockError, match="not installed"):
        _resolve(["app"], {"app": _FakeDist("app", "1.0", ["ghost"])})
