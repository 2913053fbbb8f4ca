"""Terraform provider schemas for tests/unit/test_terraform_schema.py, without Terraform.

No Terraform binary or provider download is possible here, but the prebuilt CDK for Terraform
bindings on PyPI (cdktf-cdktf-provider-google, -google-beta) are generated from the provider's own
schema (`terraform providers schema -json`). Each wheel carries its jsii assembly
(`_jsii/provider-*.jsii.tgz` -> `package/.jsii`, a JSON document) in which:

* every resource / data source class says which Terraform type it binds, e.g. the docs summary
  `Represents a {@link https://registry.terraform.io/providers/hashicorp/google/6.1.0/docs/resources/pubsub_subscription google_pubsub_subscription}`
  (which also names the provider version the binding was generated from);
* its `...Config` struct has one property per argument and nested block, and each property's docs
  link to the registry anchor of the Terraform name (`...#push_config PubsubSubscription#push_config`);
* a nested block's property has the type of another struct (directly, or as a list of it).

`fetch` downloads the pinned wheels (`pip download --no-deps`, nothing installed), reduces each
assembly to a compact tree of names, `{"attributes": [...], "blocks": {name: tree}}` per resource,
data source and provider configuration, and writes it to `.venv-tools/provider-schemas/` (about
1 MB per provider version; the wheels themselves, 35-50 MB each, are deleted).

Which bindings exist (checked when pinning, README line "CDKTF prebuilt bindings for
hashicorp/google provider version X"): cdktf-cdktf-provider-google 13.x binds google 5.x,
14.0.0 binds 6.1.0 (the first 6.x binding; none binds 6.0.x), 15.0.0 binds 6.38.0 and 16.12.1, the
last release, binds 6.50.0. The same numbers hold for google-beta. No binding of google 7.x exists
(on PyPI or npm), so versions.tf stops below 7.0: see terraform/README.md.

    .venv/bin/python tools/provider_schemas.py fetch    # what `make test` runs once
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
SCHEMA_DIR = REPO_ROOT / ".venv-tools" / "provider-schemas"

# provider -> [(PyPI package, package version, provider version it binds)], lowest first.
PINS: dict[str, list[tuple[str, str, str]]] = {
    "google": [
        ("cdktf-cdktf-provider-google", "14.0.0", "6.1.0"),
        ("cdktf-cdktf-provider-google", "16.12.1", "6.50.0"),
    ],
    "google-beta": [
        ("cdktf-cdktf-provider-google-beta", "14.0.0", "6.1.0"),
        ("cdktf-cdktf-provider-google-beta", "16.12.1", "6.50.0"),
    ],
}

REPRESENTS = re.compile(
    r"registry\.terraform\.io/providers/hashicorp/(?P<provider>[a-z-]+)/(?P<version>[0-9.]+)/docs"
    r"(?:/(?P<kind>resources|data-sources)/(?P<page>\w+))? (?P<name>[\w-]+)\}"
)
ANCHOR = re.compile(r"registry\.terraform\.io/providers/hashicorp/[a-z-]+/[0-9.]+/docs[^#\s]*#(\w+) ")


def schema_path(provider: str, version: str) -> Path:
    return SCHEMA_DIR / f"{provider}-{version}.json"


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


def _struct_fqns(type_ref: Any) -> list[str]:
    if isinstance(type_ref, dict):
        found = [type_ref["fqn"]] if "fqn" in type_ref else []
        for value in type_ref.values():
            if isinstance(value, (dict, list)):
                found.extend(_struct_fqns(value))
        return found
    if isinstance(type_ref, list):
        return [fqn for item in type_ref for fqn in _struct_fqns(item)]
    return []


def _tree(types: dict[str, Any], fqn: str, seen: tuple[str, ...] = ()) -> dict[str, Any]:
    """Argument and nested-block names of a Config (or nested block) struct."""
    attributes: set[str] = set()
    blocks: dict[str, Any] = {}
    struct = types[fqn]
    properties = list(struct.get("properties", []))
    for parent in struct.get("interfaces", []):
        if parent in types:  # cdktf.TerraformMetaArguments (count, for_each, ...) lives elsewhere
            properties.extend(types[parent].get("properties", []))
    for prop in properties:
        docs = prop.get("docs", {})
        match = ANCHOR.search(f"{docs.get('summary', '')} {docs.get('remarks', '')}")
        name = match.group(1) if match else _snake(prop["name"])
        nested = [f for f in _struct_fqns(prop["type"]) if types.get(f, {}).get("datatype")]
        if nested and nested[0] not in seen:
            blocks[name] = _tree(types, nested[0], (*seen, fqn))
        else:
            attributes.add(name)
    return {"attributes": sorted(attributes), "blocks": blocks}


def compact(assembly: dict[str, Any]) -> dict[str, Any]:
    types = assembly["types"]
    out: dict[str, Any] = {"resources": {}, "data_sources": {}, "provider_config": None}
    versions: set[str] = set()
    for entry in types.values():
        if entry.get("kind") != "class":
            continue
        match = REPRESENTS.search(entry.get("docs", {}).get("summary", ""))
        initializer = entry.get("initializer", {}).get("parameters", [])
        if not match or len(initializer) < 3:
            continue
        config_fqn = initializer[2]["type"].get("fqn")
        if config_fqn not in types:
            continue
        versions.add(match.group("version"))
        tree = _tree(types, config_fqn)
        if match.group("kind") == "resources":
            out["resources"][match.group("name")] = tree
        elif match.group("kind") == "data-sources":
            out["data_sources"][match.group("name")] = tree
        else:
            out["provider"] = match.group("provider")
            out["provider_config"] = tree
    assert len(versions) == 1, f"bindings of several provider versions in one assembly: {versions}"
    out["version"] = versions.pop()
    out["package_version"] = assembly["version"]
    return out


def read_assembly(wheel: Path) -> dict[str, Any]:
    with zipfile.ZipFile(wheel) as archive:
        [tgz] = [n for n in archive.namelist() if n.endswith(".jsii.tgz")]
        with tarfile.open(fileobj=io.BytesIO(archive.read(tgz)), mode="r:gz") as tar:
            member = tar.extractfile("package/.jsii")
            assert member is not None
            return json.load(member)


def fetch(force: bool = False) -> list[Path]:
    SCHEMA_DIR.mkdir(parents=True, exist_ok=True)
    written = []
    for provider, pins in PINS.items():
        for package, package_version, provider_version in pins:
            target = schema_path(provider, provider_version)
            if target.exists() and not force:
                continue
            with tempfile.TemporaryDirectory() as tmp:
                subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "pip",
                        "download",
                        "--quiet",
                        "--no-deps",
                        f"{package}=={package_version}",
                        "--dest",
                        tmp,
                    ],
                    check=True,
                )
                [wheel] = Path(tmp).glob("*.whl")
                schema = compact(read_assembly(wheel))
            assert schema["provider"] == provider, (package, schema["provider"])
            assert schema["version"] == provider_version, (
                f"{package}=={package_version} binds {provider} {schema['version']}, pinned as {provider_version}"
            )
            target.write_text(json.dumps(schema, sort_keys=True, separators=(",", ":")))
            written.append(target)
            print(
                f"{target.relative_to(REPO_ROOT)}: {len(schema['resources'])} resources, "
                f"{len(schema['data_sources'])} data sources ({package}=={package_version})"
            )
    return written


def main(argv: list[str]) -> int:
    if argv[:1] != ["fetch"]:
        print(__doc__)
        return 2
    fetch(force="--force" in argv)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
