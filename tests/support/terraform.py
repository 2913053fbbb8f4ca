"""The Terraform configuration parsed (HCL), for the tests that read it."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import hcl2

REPO_ROOT = Path(__file__).resolve().parents[2]


TERRAFORM_DIR = REPO_ROOT / "terraform"


TOPOLOGY_FILE = REPO_ROOT / "shared" / "topology.json"


def tf_files() -> list[Path]:
    return sorted(p for p in TERRAFORM_DIR.rglob("*.tf") if ".terraform" not in p.parts)


def module_files() -> list[Path]:
    """The module itself (terraform/*.tf), without the examples."""
    return sorted(TERRAFORM_DIR.glob("*.tf"))


def unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == '"' and value[-1] == '"':
        try:
            return json.loads(value)
        except ValueError:
            return value[1:-1]
    return value


def clean(value: Any) -> Any:
    if isinstance(value, dict):
        return {unquote(k): clean(v) for k, v in value.items() if k not in ("__is_block__", "__comments__")}
    if isinstance(value, list):
        return [clean(v) for v in value]
    if isinstance(value, str):
        return unquote(value)
    return value


def comments(value: Any) -> list[str]:
    """Every comment python-hcl2 attached anywhere inside a parsed block."""
    found: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "__comments__":
                found.extend(c["value"] for c in item)
            else:
                found.extend(comments(item))
    elif isinstance(value, list):
        for item in value:
            found.extend(comments(item))
    return found


@dataclass
class Config:
    """A parsed Terraform directory (files of one module)."""

    raw: dict[Path, dict[str, Any]]
    resources: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    data: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    locals: dict[str, Any] = field(default_factory=dict)
    variables: dict[str, dict[str, Any]] = field(default_factory=dict)
    outputs: dict[str, dict[str, Any]] = field(default_factory=dict)
    modules: dict[str, dict[str, Any]] = field(default_factory=dict)
    terraform: list[dict[str, Any]] = field(default_factory=list)
    resource_comments: dict[tuple[str, str], list[str]] = field(default_factory=dict)

    def resource(self, rtype: str, name: str) -> dict[str, Any]:
        assert (rtype, name) in self.resources, f"terraform/ has no resource {rtype}.{name}"
        return self.resources[(rtype, name)]

    def of_type(self, rtype: str) -> dict[str, dict[str, Any]]:
        return {name: body for (t, name), body in self.resources.items() if t == rtype}

    def text(self) -> str:
        return "\n".join(p.read_text() for p in self.raw)


def parse(path: Path) -> dict[str, Any]:
    with path.open() as handle:
        return hcl2.load(handle)


def build_config(paths: list[Path]) -> Config:
    config = Config(raw={p: parse(p) for p in paths})
    for parsed in config.raw.values():
        for block in parsed.get("resource", []):
            for rtype, named in block.items():
                for name, body in named.items():
                    key = (unquote(rtype), unquote(name))
                    assert key not in config.resources, f"duplicate resource {key}"
                    config.resources[key] = clean(body)
                    config.resource_comments[key] = comments(body)
        for block in parsed.get("data", []):
            for dtype, named in block.items():
                for name, body in named.items():
                    config.data[(unquote(dtype), unquote(name))] = clean(body)
        for block in parsed.get("locals", []):
            for name, value in clean(block).items():
                assert name not in config.locals, f"local.{name} defined twice"
                config.locals[name] = value
        for block in parsed.get("variable", []):
            for name, body in block.items():
                config.variables[unquote(name)] = clean(body)
        for block in parsed.get("output", []):
            for name, body in block.items():
                config.outputs[unquote(name)] = clean(body)
        for block in parsed.get("module", []):
            for name, body in block.items():
                config.modules[unquote(name)] = clean(body)
        config.terraform.extend(clean(parsed.get("terraform", [])))
    return config


@cache
def module_config() -> Config:
    return build_config(module_files())


@cache
def topology() -> dict[str, Any]:
    return json.loads(TOPOLOGY_FILE.read_text())


def entry_points() -> list[str]:
    """The Cloud Functions entry points Terraform deploys: one function per local.routes key,
    entry_point = each.key, where local.routes is topology.json's "functions"."""
    config = module_config()
    function = config.resource("google_cloudfunctions2_function", "functions")
    assert function["for_each"] == "${local.routes}"
    assert function["build_config"][0]["entry_point"] == "${each.key}"
    assert config.locals["routes"] == "${local.topology.functions}"
    return sorted(topology()["functions"])
