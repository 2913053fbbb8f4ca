"""The deploy zip works the way Cloud Functions will run it.

Mimics the gen2 Python build and runtime without a cloud account:

1. build the source zip from the allow-list in terraform/functions.tf (local.source_globs) plus
   terraform/source_root/main.py packed as /main.py, exactly the files archive_file packs;
2. unpack it into an empty directory (the buildpack's /workspace);
3. create a fresh virtualenv with the runtime's Python (python312 -> python3.12 when installed)
   and run `pip install -r requirements.txt` inside the unpacked directory, as the buildpack does;
4. import every entry point Terraform deploys the way functions-framework loads them (source
   main.py at the root), with a clean environment: `shared` and `functions` must come from the
   unpacked tree (so must `spotjobs_kit`, packed at the root from kit/src/), devstack must not
   be needed, and each entry point must be registered as an
   HTTP function (@functions_framework.http: Cloud Functions starts an HTTP-triggered function with
   FUNCTION_SIGNATURE_TYPE=http, and the entry points read the raw push body themselves, see
   shared/delivery.py);
5. start `functions-framework --target <entry point>` for each one on a free loopback port and
   check it answers HTTP: a body that is not a Pub/Sub push gets 400 from our handler, and (for
   the maintenance functions, which need no cloud client to answer it) a push of a message with
   attributes and no data, exactly as Pub/Sub sends it, is acknowledged.
6. the zip holds runtime code only: no operator tool (the CLI, explain, dead letters, reports,
   all in `spotjobs/`), so editing one leaves the zip, and so every function's source hash, as
   it was. (The CLI without devstack: tests/functional/test_cli_without_devstack.py.)

Skipped, with the reason, only when pip cannot reach the package registry.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import warnings
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.deploy_zip import pip_failure
from tests.support.imports import devstack_references
from tests.support.terraform import (
    REPO_ROOT,
    TERRAFORM_DIR,
    entry_points,
    module_config,
    topology,
)

pytestmark = pytest.mark.timeout(1800)

# Never let google-auth probe a metadata server from here.
NO_METADATA = {"NO_GCE_CHECK": "true", "GCE_METADATA_HOST": "127.0.0.1:9", "GCE_METADATA_IP": "127.0.0.1:9"}

IMPORT_PROBE = r"""
import json, os, sys
from functions_framework import _function_registry as registry

source = os.environ.get("FUNCTION_SOURCE", "main.py")
module, spec = registry.load_function_module(source)
spec.loader.exec_module(module)
report = {"targets": {}}
for target in sys.argv[1:]:
    function = registry.get_user_function(source, module, target)
    report["targets"][target] = {
        "module": function.__module__,
        # What functions-framework will use when the platform says "http".
        "signature": registry.get_func_signature_type(target, "http"),
        "registered": registry.REGISTRY_MAP.get(target),
    }
import functions, shared, spotjobs_kit
report["shared"] = os.path.realpath(shared.__file__)
report["spotjobs_kit"] = os.path.realpath(spotjobs_kit.__file__)
report["functions"] = os.path.realpath(functions.__file__)
report["devstack_imported"] = sorted(m for m in sys.modules if m.split(".")[0] == "devstack")
print(json.dumps(report))
"""


# ---------------------------------------------------------------------------------------------
# The zip, as terraform/functions.tf builds it
# ---------------------------------------------------------------------------------------------


def source_globs() -> list[str]:
    return module_config().locals["source_globs"]


def entry_module() -> Path:
    expr = module_config().locals["source_entry"]
    assert expr.startswith("${path.module}/"), expr
    return TERRAFORM_DIR / expr.removeprefix("${path.module}/")


def function_source() -> str:
    """The file functions-framework loads: GOOGLE_FUNCTION_SOURCE if Terraform sets it at build
    time (the buildpack turns it into FUNCTION_SOURCE at run time), else main.py at the root."""
    build = module_config().resource("google_cloudfunctions2_function", "functions")["build_config"][0]
    env = build.get("environment_variables") or {}
    if isinstance(env, str):  # an expression: not used by this module
        pytest.fail(f"cannot evaluate build_config.environment_variables = {env}")
    return env.get("GOOGLE_FUNCTION_SOURCE", "main.py")


def strip_prefix() -> str:
    """The folder whose files are packed at the zip's root (terraform: trimprefix)."""
    return module_config().locals["source_strip_prefix"]


def zip_name(name: str) -> str:
    return name.removeprefix(strip_prefix())


def source_files(root: Path = REPO_ROOT) -> list[str]:
    """Terraform fileset(root, pattern) for each pattern: files only, relative paths."""
    found: set[str] = set()
    for pattern in source_globs():
        for path in root.glob(pattern):
            if path.is_file():
                found.add(path.relative_to(root).as_posix())
    return sorted(found)


def source_hash(root: Path) -> str:
    """What archive_file's output_md5 depends on: each packed file's zip name and content."""
    digest = hashlib.md5()
    for name in source_files(root):
        digest.update(zip_name(name).encode() + b"\0" + (root / name).read_bytes() + b"\0")
    return digest.hexdigest()


def build_zip(destination: Path) -> list[str]:
    names = []
    with zipfile.ZipFile(destination, "w", zipfile.ZIP_DEFLATED) as archive:
        for name in source_files():
            archive.writestr(zip_name(name), (REPO_ROOT / name).read_text())
            names.append(zip_name(name))
        archive.writestr("main.py", entry_module().read_text())
        names.append("main.py")
    return sorted(names)


def test_zip_holds_only_the_deployable_tree(tmp_path: Path) -> None:
    names = build_zip(tmp_path / "source.zip")
    assert "main.py" in names and "requirements.txt" in names
    assert "functions/main.py" in names and "shared/settings.py" in names
    assert "shared/topology.json" in names, "shared/topology.py reads it at import"
    for name in names:
        top = name.split("/", 1)[0]
        assert top in {"main.py", "requirements.txt", "functions", "shared", "spotjobs_kit"}, name
        assert "__pycache__" not in name and not name.endswith((".pyc", ".pyo")), name
    # Every file the packages ship is in: no .py or .json under functions/ or shared/ left out.
    for package in ("functions", "shared", "kit/src/spotjobs_kit"):
        for path in (REPO_ROOT / package).rglob("*"):
            if path.is_file() and path.suffix in {".py", ".json"} and "__pycache__" not in path.parts:
                assert zip_name(path.relative_to(REPO_ROOT).as_posix()) in names, path


OPERATOR_TOOLS = ("spotjobs/cli/", "spotjobs/explaining/", "spotjobs/deadletters.py", "spotjobs/reporting/")


def test_zip_holds_no_operator_tool(tmp_path: Path) -> None:
    tools = [p.relative_to(REPO_ROOT).as_posix() for p in REPO_ROOT.joinpath("spotjobs").rglob("*.py")]
    assert {prefix for prefix in OPERATOR_TOOLS if any(t.startswith(prefix) for t in tools)} == set(OPERATOR_TOOLS)
    names = build_zip(tmp_path / "source.zip")
    assert [n for n in names if n.startswith("spotjobs/")] == []
    leaf_names = {"cli", "explaining", "deadletters", "reporting", "report_views", "report_html", "advice", "prices"}
    assert [n for n in names if leaf_names & set(Path(n).with_suffix("").parts)] == []


def test_editing_a_cli_module_changes_no_function_source_hash(tmp_path: Path) -> None:
    # One zip holds every function's source (archive_file "source"): a copy of the packaged tree,
    # hashed before and after an edit of a CLI module, and of a runtime module as the control.
    tree = tmp_path / "repo"
    for top in ("requirements.txt", "functions", "shared", "kit/src/spotjobs_kit", "spotjobs"):
        source = REPO_ROOT / top
        if source.is_dir():
            shutil.copytree(source, tree / top, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            (tree / top).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(source, tree / top)
    before = source_hash(tree)
    cli = tree / "spotjobs" / "cli" / "__init__.py"
    cli.write_text(cli.read_text() + "\n# a --help text changed\n")
    assert source_hash(tree) == before
    runtime = tree / "shared" / "settings.py"
    runtime.write_text(runtime.read_text() + "\n# a runtime change\n")
    assert source_hash(tree) != before


def test_deployed_packages_do_not_import_the_dev_stack() -> None:
    # The CLI (spotjobs/cli/) is the one exception, and only inside the functions that run `local up`
    # and `demo`: loading any deployed module never imports devstack (tests/unit/test_layering.py).
    for name in source_files():
        if name.endswith(".py"):
            references = devstack_references((REPO_ROOT / name).read_text())
            if name.startswith("spotjobs/cli/"):
                references = [ref for ref in references if ref[2]]  # at module level
            assert references == [], name


# ---------------------------------------------------------------------------------------------
# The buildpack-like install
# ---------------------------------------------------------------------------------------------


@dataclass
class Deployment:
    workspace: Path
    bin_dir: Path
    python_version: str
    home: Path

    def env(self, **extra: str) -> dict[str, str]:
        """A clean runtime environment: nothing from the developer's shell leaks in."""
        return {
            "PATH": f"{self.bin_dir}:/usr/bin:/bin",
            "HOME": str(self.home),
            "LANG": "C.UTF-8",
            **NO_METADATA,
            **function_environment(),
            "FUNCTION_SOURCE": function_source(),
            **extra,
        }


def function_environment() -> dict[str, str]:
    """The infrastructure variables Terraform sets on every function, with stand-in values."""
    names = module_config().locals["infrastructure_env"]
    values = {name: f"test-{name.lower().replace('_', '-')}" for name in names}
    values["GOOGLE_CLOUD_PROJECT"] = "test-project"
    values["SPOTJOBS_LOCATION"] = "us-central1"
    values["SPOTJOBS_RECONCILE_TIMEOUT_SECONDS"] = "300"
    values["SPOTJOBS_SUBMIT_TIMEOUT_SECONDS"] = "60"
    values["SPOTJOBS_TRAINING_CLASSES"] = "vision-=spotjobs-tc-vision@test-project.iam.gserviceaccount.com"
    return values


def runtime_python_version() -> str:
    runtime = module_config().variables["runtime"]["default"]  # e.g. python312
    digits = runtime.removeprefix("python")
    return f"{digits[0]}.{digits[1:]}"


def find_python(version: str) -> tuple[str, str]:
    candidates = [
        shutil.which(f"python{version}"),
        *sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/{version}*/bin/python{version}")), reverse=True),
        f"/usr/local/bin/python{version}",
        f"/usr/bin/python{version}",
    ]
    for candidate in candidates:
        if not candidate or not os.path.exists(candidate):
            continue
        probe = subprocess.run(
            [candidate, "-c", "import sys, venv; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if probe.returncode == 0 and probe.stdout.strip() == version:
            return candidate, version
    found = "{}.{}".format(*sys.version_info[:2])
    warnings.warn(
        f"python{version} (the Cloud Functions runtime) is not installed; the deploy test uses Python {found} instead",
        stacklevel=2,
    )
    return sys.executable, found


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Deployment:
    root = tmp_path_factory.mktemp("deploy")
    archive = root / "source.zip"
    build_zip(archive)
    workspace = root / "workspace"
    workspace.mkdir()
    with zipfile.ZipFile(archive) as unpacked:
        unpacked.extractall(workspace)
    home = root / "home"
    home.mkdir()

    python, version = find_python(runtime_python_version())
    venv = root / "venv"
    subprocess.run([python, "-m", "venv", str(venv)], check=True, timeout=300)
    bin_dir = venv / "bin"
    # The buildpack: `python3 -m pip install --requirement requirements.txt ...` in the source root.
    # The pip configuration of this machine (index, cache) is kept for the download step only.
    # No bytecode: no test here reads it, and compiling it was 38 s of the install's 68 s here.
    install = subprocess.run(
        [
            str(bin_dir / "python"),
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "--no-input",
            "--no-compile",
            "--requirement",
            "requirements.txt",
        ],
        cwd=workspace,
        capture_output=True,
        text=True,
        timeout=1500,
        env={**os.environ, "PIP_NO_INPUT": "1", "PYTHONNOUSERSITE": "1"},
    )
    if install.returncode != 0:
        pip_failure(install, "pip install -r requirements.txt")
    return Deployment(workspace=workspace, bin_dir=bin_dir, python_version=version, home=home)


def test_requirements_install_a_consistent_environment(deployment: Deployment) -> None:
    check = subprocess.run(
        [str(deployment.bin_dir / "python"), "-m", "pip", "check"],
        capture_output=True,
        text=True,
        timeout=300,
        env=deployment.env(),
        cwd=deployment.workspace,
    )
    assert check.returncode == 0, check.stdout + check.stderr


def test_every_entry_point_imports_from_the_unpacked_source(deployment: Deployment) -> None:
    targets = entry_points()
    result = subprocess.run(
        [str(deployment.bin_dir / "python"), "-c", IMPORT_PROBE, *targets],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=deployment.workspace,
        env=deployment.env(),
    )
    assert result.returncode == 0, f"importing the entry points failed:\n{result.stderr[-6000:]}"
    report = json.loads(result.stdout.strip().splitlines()[-1])
    workspace = str(deployment.workspace.resolve())
    assert report["shared"].startswith(workspace + os.sep), report["shared"]
    assert report["functions"].startswith(workspace + os.sep), report["functions"]
    assert report["spotjobs_kit"].startswith(workspace + os.sep), report["spotjobs_kit"]
    assert report["devstack_imported"] == []
    for target in targets:
        info = report["targets"][target]
        assert info["module"].startswith("functions."), info
        assert (info["signature"], info["registered"]) == ("http", "http"), (
            f"{target} is not registered with @functions_framework.http; Terraform deploys it as an "
            "HTTP function fed by a Pub/Sub push subscription, and it reads the raw push body itself "
            "(functions-framework's CloudEvent conversion refuses a message without data)"
        )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _post(url: str, body: bytes) -> int:
    request = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)  # the session this test started, by its id
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=20)


@pytest.mark.parametrize("target", entry_points())
def test_entry_point_starts_and_answers_http(deployment: Deployment, target: str, tmp_path: Path) -> None:
    port = _free_port()
    log_path = tmp_path / f"{target}.log"
    topic = topology()["topics"][topology()["functions"][target]["topic"]]["name"]
    with log_path.open("w") as log:
        # As Cloud Run starts it: the buildpack's web process is `functions-framework`, with
        # FUNCTION_TARGET set, FUNCTION_SIGNATURE_TYPE=http (no event trigger) and FUNCTION_SOURCE.
        process = subprocess.Popen(
            [str(deployment.bin_dir / "functions-framework"), "--host", "127.0.0.1", "--port", str(port)],
            cwd=deployment.workspace,
            env=deployment.env(FUNCTION_TARGET=target, FUNCTION_SIGNATURE_TYPE="http", PORT=str(port)),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        url = f"http://127.0.0.1:{port}/projects/test-project/topics/{topic}"
        deadline = time.monotonic() + 90
        status = None
        while time.monotonic() < deadline:
            if process.poll() is not None:
                pytest.fail(f"{target} exited with {process.returncode}:\n{log_path.read_text()[-6000:]}")
            try:
                status = _post(url, b"{}")
                break
            except (TimeoutError, ConnectionError, urllib.error.URLError):
                time.sleep(0.5)
        assert status is not None, f"{target} never answered on port {port}:\n{log_path.read_text()[-6000:]}"
        assert status == 400, (
            f"{target} answered {status} to a body that is not a Pub/Sub push; the push "
            f"handler answers 400:\n{log_path.read_text()[-6000:]}"
        )
        if topology()["functions"][target]["topic"] == "maintenance":
            # A message with attributes and no data, exactly as a push subscription sends it.
            attributes_only = json.dumps(
                {
                    "message": {
                        "attributes": {"task": "none"},
                        "messageId": "1",
                        "publishTime": "2026-01-01T00:00:00Z",
                    },
                    "subscription": "projects/test-project/subscriptions/s",
                }
            ).encode()
            status = _post(url, attributes_only)
            assert 200 <= status < 300, f"{target} answered {status}:\n{log_path.read_text()[-6000:]}"
    finally:
        _stop(process)
