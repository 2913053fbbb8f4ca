"""The request allowlist, table-driven over every field path of the aiplatform_v1 CustomJob schema.

The table of paths is walked from the installed proto, so a library upgrade that adds a field
fails `test_every_schema_path_is_classified` until the field is classified in shared/requests/job_fields.py.
Then each path is set in a valid request and must be refused, naming its path, unless the
allowlist (or an opt-in the operator set) allows it.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any

import pytest

from shared.requests.envelope import read_request
from shared.requests.job_fields import ALLOWED, FIELDS, OPT_INS, OUTPUT_ONLY, REFUSED, check_fields
from shared.requests.job_schema import schema_paths, set_fields
from shared.requests.policy import check_policy, describe_policy
from shared.settings import Settings
from tests.conftest import load_event

PATHS = schema_paths()
BASE_JOB: dict[str, Any] = json.loads(load_event("requests/bare_docs.json"))
# Every opt-in switched on, with a value that admits the samples below.
OPTED_IN = dataclasses.replace(
    Settings.from_env({}),
    **{name: True if name == "allow_web_access" else ("x",) for name in OPT_INS},
)


def _descriptor_at(path: str) -> Any:
    """The FieldDescriptor a schema path names."""
    from google.cloud.aiplatform_v1.types import CustomJob

    descriptor, field = CustomJob.pb().DESCRIPTOR, None
    for part in path.split("."):
        if field is not None:
            message = field.message_type
            if message.GetOptions().map_entry:
                message = message.fields_by_name["value"].message_type
            descriptor = message
        name = part.rstrip("[]{}")
        field = next(f for f in descriptor.fields if f.json_name == name)
    return field


def _sample(field: Any) -> Any:
    """A JSON value the schema accepts for one element of `field`."""
    from google.protobuf.descriptor import FieldDescriptor as F

    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        return {"k": "v"}
    if field.enum_type is not None:
        return field.enum_type.values[-1].name
    if field.message_type is not None:
        return {
            "google.protobuf.Duration": "60s",
            "google.protobuf.Timestamp": "2024-01-01T00:00:00Z",
        }.get(field.message_type.full_name, {})
    if field.type == F.TYPE_BOOL:
        return True
    if field.type == F.TYPE_STRING:
        return "x"
    return 1


def job_setting(path: str) -> tuple[dict[str, Any], str]:
    """A valid job with `path` set (worker pool 0 for pool fields), and the concrete path."""
    job = copy.deepcopy(BASE_JOB)
    if ".pythonPackageSpec" in path:  # a oneof with containerSpec
        del job["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]
    node: Any = job
    concrete = "custom_job"
    parts = path.split(".")
    for depth, part in enumerate(parts):
        name, last = part.rstrip("[]{}"), depth == len(parts) - 1
        repeated = part.endswith("[]")
        concrete += f".{name}"
        if last:
            field = _descriptor_at(path)
            value = _sample(field)
            node[name] = [value] if repeated else value
            return job, concrete
        if repeated:
            node = node.setdefault(name, [{}])[0]
            concrete += "[0]"
        else:
            node = node.setdefault(name, {})
    raise AssertionError(path)


def test_every_schema_path_is_classified() -> None:
    unclassified = sorted(set(PATHS) - set(FIELDS))
    assert not unclassified, f"classify these CustomJob fields in shared/requests/job_fields.py: {unclassified}"
    assert not sorted(set(FIELDS) - set(PATHS)), "FIELDS names paths the schema no longer has"


@pytest.mark.parametrize("path", PATHS)
def test_each_field_is_allowed_or_refused_by_its_path(path: str) -> None:
    job, concrete = job_setting(path)
    body = json.dumps({"request_id": "r1", "custom_job": job}).encode()
    request, read_violations = read_request(body, attributes={}, max_bytes=10**6)
    kind = FIELDS[path]
    if kind == OUTPUT_ONLY:  # refused while reading already
        assert [v.path for v in read_violations] == [concrete]
        return
    assert read_violations == [] and request.custom_job is not None
    refused = [v.path for v in check_fields(request.custom_job, "custom_job", Settings.from_env({}))]
    if kind == ALLOWED:
        assert refused == []
        return
    # Refused by its own path, or by the nearest enclosing field the allowlist refuses.
    assert len(refused) == 1 and concrete.startswith(refused[0]), (refused, concrete)
    schema_of = {concrete: schema for concrete, schema, _, _ in set_fields(request.custom_job, "custom_job")}
    assert FIELDS[schema_of[refused[0]]] == kind
    assert refused[0] in [v.path for v in check_policy(request, Settings.from_env({}))]
    opted_in = [v.path for v in check_fields(request.custom_job, "custom_job", OPTED_IN)]
    assert opted_in == ([] if kind in OPT_INS else refused)


def test_the_effective_policy_shows_every_allowed_and_opt_in_field() -> None:
    shown = describe_policy(Settings.from_env({}))["custom_job"]
    opt_in = {p for group in shown["opt_in_fields"].values() for p in group["fields"]}
    assert set(shown["allowed_fields"]) == {p for p, k in FIELDS.items() if k == ALLOWED}
    assert opt_in == {p for p, k in FIELDS.items() if k in OPT_INS}
    assert {k for k in FIELDS.values()} <= {ALLOWED, REFUSED, OUTPUT_ONLY, *OPT_INS}
