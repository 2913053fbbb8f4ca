"""Every resource type, argument and nested block used in terraform/ exists in the provider schema.

This stands in for `terraform validate`, which cannot run here (no Terraform binary, no provider
download). The schemas are the google and google-beta providers' own, as carried by the pinned
prebuilt CDKTF bindings (tools/provider_schemas.py extracts them; `make test` fetches them once):
the lowest and the highest provider version of the allowed range that a binding exists for.

What it checks, for the module and the examples: each `resource`/`data` type exists for the
provider the block uses (`provider = google-beta` or the type's prefix); each argument name and
each nested block name (including `dynamic` blocks) exists at that place in the schema; a name
the schema has as a nested block is written as a block, and an argument is not written as one.
What it does not check (a real `terraform validate`/`plan` does): argument types and values,
required arguments, conflicting arguments, expressions.
"""

from __future__ import annotations

import json
import os
import re
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from tests.support.terraform import TERRAFORM_DIR, parse, tf_files, unquote
from tools import provider_schemas

META_ARGUMENTS = {"count", "for_each", "depends_on", "provider", "lifecycle", "provisioner", "connection"}
SCHEMA_PROVIDERS = ("google", "google-beta")
# Majors versions.tf allows that no prebuilt binding exists for (see tools/provider_schemas.py).
# Listed on purpose: widening versions.tf to another major without a schema fails below.
UNCHECKED_MAJORS: set[int] = set()


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


@cache
def schema(provider: str, version: str) -> dict[str, Any]:
    path = provider_schemas.schema_path(provider, version)
    if not path.exists():
        message = f"{path} missing: run `make test` or `.venv/bin/python tools/provider_schemas.py fetch`"
        if _in_ci():
            pytest.fail(message)
        pytest.skip(message)
    return json.loads(path.read_text())


def pinned() -> list[tuple[str, str]]:
    return [(provider, pin[2]) for provider in SCHEMA_PROVIDERS for pin in provider_schemas.PINS[provider]]


def _block_bodies(value: Any) -> list[dict[str, Any]] | None:
    """The bodies of a nested block as python-hcl2 parses it, or None for an argument."""
    if isinstance(value, list) and value and all(isinstance(v, dict) and v.get("__is_block__") for v in value):
        return value
    return None


def check_body(body: dict[str, Any], tree: dict[str, Any], where: str) -> list[str]:
    problems: list[str] = []
    attributes, blocks = set(tree["attributes"]), tree["blocks"]
    for key, value in body.items():
        name = unquote(key)
        if name.startswith("__") or name in META_ARGUMENTS:  # python-hcl2 markers, meta-arguments
            continue
        if name == "dynamic":
            for dynamic in value:
                for label, spec in dynamic.items():
                    label = unquote(label)
                    if label not in blocks:
                        problems.append(f"{where}: no nested block {label!r} (dynamic)")
                        continue
                    for content in spec.get("content", []):
                        problems += check_body(content, blocks[label], f"{where}.{label}")
            continue
        bodies = _block_bodies(value)
        if bodies is not None:
            if name not in blocks:
                kind = "an argument, not a block" if name in attributes else "unknown"
                problems.append(f"{where}: {name!r} is {kind}")
                continue
            for nested in bodies:
                problems += check_body(nested, blocks[name], f"{where}.{name}")
        elif name in blocks:
            problems.append(f"{where}: {name!r} is a nested block, written as an argument")
        elif name not in attributes:
            problems.append(f"{where}: no argument {name!r}")
    return problems


def _provider_of(rtype: str, body: dict[str, Any]) -> str:
    explicit = unquote(str(body.get("provider", ""))).strip("${}")
    if explicit:
        return explicit.split(".")[0]
    return "google" if rtype.startswith("google_") else rtype.split("_")[0]


def blocks_in(path: Path) -> list[tuple[str, str, str, dict[str, Any]]]:
    """(kind, provider, type, body) of every resource, data source and provider block."""
    parsed = parse(path)
    found = []
    for kind, section in (("resources", "resource"), ("data_sources", "data")):
        for block in parsed.get(section, []):
            for rtype, named in block.items():
                for body in named.values():
                    rtype = unquote(rtype)
                    found.append((kind, _provider_of(rtype, body), rtype, body))
    for block in parsed.get("provider", []):
        for name, body in block.items():
            found.append(("provider_config", unquote(name), unquote(name), body))
    return found


def every_block() -> list[tuple[Path, str, str, str, dict[str, Any]]]:
    return [(path, *found) for path in tf_files() for found in blocks_in(path)]


@pytest.mark.parametrize("provider,version", pinned(), ids=lambda v: str(v))
def test_terraform_uses_only_names_the_provider_schema_has(provider: str, version: str) -> None:
    tree_of = schema(provider, version)
    checked, problems = 0, []
    for path, kind, block_provider, rtype, body in every_block():
        if block_provider != provider:
            continue
        where = f"{path.relative_to(TERRAFORM_DIR)}: {rtype}"
        if kind == "provider_config":
            tree = tree_of["provider_config"]
        else:
            tree = tree_of[kind].get(rtype)
            if tree is None:
                problems.append(f"{where}: {provider} {version} has no {kind[:-1].replace('_', ' ')} {rtype}")
                continue
        problems += check_body(body, tree, where)
        checked += 1
    assert checked, f"nothing in terraform/ uses {provider}"
    assert not problems, f"not in {provider} {version}:\n" + "\n".join(problems)


def test_every_resource_is_checked_against_some_schema() -> None:
    """A block of a provider the schemas do not cover must be a deliberate exception."""
    not_covered = {
        (block_provider, rtype)
        for _, _, block_provider, rtype, _ in every_block()
        if block_provider not in SCHEMA_PROVIDERS
    }
    # archive_file (hashicorp/archive) and time_sleep (hashicorp/time): tiny schemas, covered by
    # the attribute assertions in test_terraform.py instead.
    assert not_covered <= {("archive", "archive_file"), ("time", "time_sleep")}, not_covered


def test_the_beta_provider_is_used_only_where_needed() -> None:
    """google-beta blocks must use types the GA provider lacks (else they belong to google)."""
    ga = schema("google", provider_schemas.PINS["google"][-1][2])
    for path, kind, block_provider, rtype, _ in every_block():
        if block_provider == "google-beta" and kind != "provider_config":
            assert rtype not in ga[kind], f"{path}: {rtype} is in the GA provider; drop provider = google-beta"


def _bounds(constraint: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    lower = re.search(r">=\s*([0-9.]+)", constraint)
    upper = re.search(r"<\s*([0-9.]+)", constraint)
    assert lower and upper, constraint
    return tuple(map(int, lower.group(1).split("."))), tuple(map(int, upper.group(1).split(".")))


@pytest.mark.parametrize("provider", SCHEMA_PROVIDERS)
def test_pinned_schemas_span_the_version_range_versions_tf_allows(provider: str) -> None:
    text = (TERRAFORM_DIR / "versions.tf").read_text()
    block = re.search(rf'\b{re.escape(provider)}\s*=\s*\{{[^}}]*version\s*=\s*"([^"]+)"', text)
    assert block, f"versions.tf has no version constraint for {provider}"
    lower, upper = _bounds(block.group(1))
    versions = [tuple(map(int, pin[2].split("."))) for pin in provider_schemas.PINS[provider]]
    assert all(lower <= v < upper for v in versions), (versions, block.group(1))
    allowed_majors = set(range(lower[0], upper[0] if upper[1:] in ((), (0,), (0, 0)) else upper[0] + 1))
    pinned_majors = {v[0] for v in versions}
    assert lower[0] in pinned_majors, "the lowest allowed major must be checked"
    assert allowed_majors - pinned_majors == UNCHECKED_MAJORS, (
        f"{provider}: allowed majors {sorted(allowed_majors)}, schema-checked {sorted(pinned_majors)}; "
        "pin a binding for each new major or list it in UNCHECKED_MAJORS and terraform/README.md"
    )
    # The lowest pin is the first binding of the lowest major (nothing older of that major exists).
    assert min(versions) == (6, 1, 0)


def test_schema_check_catches_a_wrong_name() -> None:
    """The checker itself: a misspelt argument and a block written as an argument are reported."""
    tree = schema("google", provider_schemas.PINS["google"][0][2])["resources"]["google_pubsub_subscription"]
    good = {"name": "s", "topic": "t", "push_config": [{"push_endpoint": "u", "__is_block__": True}]}
    assert check_body(good, tree, "x") == []
    assert check_body({"filtr": "a"}, tree, "x") == ["x: no argument 'filtr'"]
    assert check_body({"push_config": {"push_endpoint": "u"}}, tree, "x") == [
        "x: 'push_config' is a nested block, written as an argument"
    ]
    assert check_body({"push_config": [{"oidc": [{"__is_block__": True}], "__is_block__": True}]}, tree, "x") == [
        "x.push_config: 'oidc' is unknown"
    ]
