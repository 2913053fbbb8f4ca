"""The CLI installed without `devstack/`, as the package installs it outside a checkout.

A fresh virtualenv sees this venv's libraries (as a plain path: the editable install's finder,
which would map `devstack` back to the checkout, is not loaded) and a copy of `spotjobs/`,
`shared/` and `functions/` on PYTHONPATH, and runs from a directory outside the repository. There `validate`
works, and `local up` and `demo` say in one line how to get the local stack and exit 2.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import pytest

from spotjobs.cli import local
from tests.conftest import EVENTS_DIR

REPO_ROOT = Path(__file__).resolve().parents[2]
VALID_REQUEST = EVENTS_DIR / "requests" / "bare_docs.json"  # valid under the default policy


def console_script_target() -> str:
    """`module:function` of the `spotjobs` console script in pyproject.toml."""
    with (REPO_ROOT / "pyproject.toml").open("rb") as handle:
        return tomllib.load(handle)["project"]["scripts"]["spotjobs"]


class Install:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.tree = root / "site"
        self.python = root / "venv" / "bin" / "python"

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.python), *args],
            cwd=self.root,
            env={
                "PATH": "/usr/bin:/bin",
                "HOME": str(self.root),
                "LANG": "C.UTF-8",
                "PYTHONPATH": str(self.tree),
                "PYTHONDONTWRITEBYTECODE": "1",
            },
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    def spotjobs(self, how: str, *args: str) -> subprocess.CompletedProcess[str]:
        if how == "python -m spotjobs.cli":
            return self.run("-m", "spotjobs.cli", *args)
        module, function = console_script_target().split(":")
        # What the generated `spotjobs` wrapper does.
        return self.run("-c", f"import sys; from {module} import {function}; sys.exit({function}())", *args)


@pytest.fixture(scope="module")
def install(tmp_path_factory: pytest.TempPathFactory) -> Install:
    install = Install(tmp_path_factory.mktemp("no-devstack"))
    ignore = shutil.ignore_patterns("__pycache__")
    # What the package installs: everything but devstack/.
    for source in ("spotjobs", "shared", "functions", "kit/src/spotjobs_kit"):
        target = install.tree / Path(source).name
        shutil.copytree(REPO_ROOT / source, target, ignore=ignore)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(install.root / "venv")], check=True, timeout=120)
    site_packages = subprocess.run(
        [str(install.python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()
    libraries = dict.fromkeys(sysconfig.get_paths()[key] for key in ("purelib", "platlib"))
    Path(site_packages, "libraries.pth").write_text("".join(f"{path}\n" for path in libraries))
    return install


def test_the_install_has_shared_and_functions_but_no_devstack(install: Install) -> None:
    probe = install.run(
        "-c",
        "import json, importlib.util, shared, functions\n"
        "print(json.dumps({'shared': shared.__file__, 'functions': functions.__file__,\n"
        "  'devstack': importlib.util.find_spec('devstack') is not None}))",
    )
    assert probe.returncode == 0, probe.stderr
    found = json.loads(probe.stdout)
    assert found["shared"].startswith(str(install.tree)), found
    assert found["functions"].startswith(str(install.tree)), found
    assert found["devstack"] is False


HOW = ["python -m spotjobs.cli", "console script"]


@pytest.mark.parametrize("how", HOW)
def test_validate_works(install: Install, how: str) -> None:
    result = install.spotjobs(how, "validate", str(VALID_REQUEST))
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    out = json.loads(result.stdout)
    assert out["strategy"] == "SPOT" and out["custom_job"]["displayName"] == "spot-training-job"


@pytest.mark.parametrize("how", HOW)
def test_help_still_offers_the_local_commands(install: Install, how: str) -> None:
    result = install.spotjobs(how, "--help")
    assert result.returncode == 0, result.stderr
    assert "local" in result.stdout and "demo" in result.stdout


@pytest.mark.parametrize(
    ("command", "make_target"), [(("local", "up"), "up"), (("local", "up", "--json"), "up"), (("demo",), "demo")]
)
@pytest.mark.parametrize("how", HOW)
def test_local_commands_say_how_to_get_the_stack(
    install: Install, how: str, command: tuple[str, ...], make_target: str
) -> None:
    result = install.spotjobs(how, *command)
    name = " ".join(arg for arg in command if not arg.startswith("-"))
    assert (result.returncode, result.stdout) == (local.EXIT_NO_LOCAL_STACK, "")
    assert result.stderr == (
        f"spotjobs {name}: the local stack is not installed: run from a checkout of the "
        f"repository (`make {make_target}`)\n"
    )


# The guard, in process: only the absence of the devstack package itself counts.


def test_an_absent_devstack_package_is_reported(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "devstack", None)  # makes `import devstack` fail as if absent
    assert local.local_stack_missing("demo", "demo") is True
    assert capsys.readouterr().err.count("\n") == 1


def test_a_module_missing_inside_devstack_is_a_real_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from spotjobs.cli import main

    monkeypatch.setitem(sys.modules, "devstack.stack", None)
    with pytest.raises(ModuleNotFoundError) as raised:
        main(["local", "up"])
    assert raised.value.name == "devstack.stack"
