"""Policy settings fail closed (issue 32 item 7): an empty allowlist allows none of what it guards,
whichever field names the value. The walk covers every opt-in list setting; a new one fails the
coverage assertion until it has a row here."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from shared.errors import InvalidRequest
from shared.requests.job_fields import OPT_INS
from shared.requests.policy import validate_request
from shared.settings import Settings
from tests.conftest import load_event

TRAINER = "trainer@corp.iam.gserviceaccount.com"
IMAGE = "us-docker.pkg.dev/corp/train/trainer:1"
SPEC = "custom_job.jobSpec"
POOL = f"{SPEC}.workerPoolSpecs[0]"
NETWORK = "projects/1/global/networks/train"
PEERED = "projects/other/global/networks/theirs"

# Every list setting, what it allows in EVERY_FIELD, and the paths it guards there.
ALLOWS: dict[str, tuple[tuple[str, ...], list[str]]] = {
    "allowed_networks": ((NETWORK, PEERED), [f"{SPEC}.network", f"{SPEC}.pscInterfaceConfig.dnsPeeringConfigs[0]"]),
    "allowed_network_attachments": (
        ("projects/1/regions/us-central1/networkAttachments/a",),
        [f"{SPEC}.pscInterfaceConfig"],
    ),
    "allowed_persistent_resources": (("pr-1",), [f"{SPEC}.persistentResourceId"]),
    "allowed_tensorboards": (("projects/1/locations/us-central1/tensorboards/7",), [f"{SPEC}.tensorboard"]),
    "allowed_experiments": (("exp",), [f"{SPEC}.experiment"]),
    "allowed_kms_keys": (
        ("projects/1/locations/us-central1/keyRings/r/cryptoKeys/k",),
        ["custom_job.encryptionSpec"],
    ),
    "allowed_models": (("projects/1/locations/us-central1/models/m",), [f"{SPEC}.models"]),
    "allowed_mount_servers": (("10.0.0.2",), [f"{POOL}.nfsMounts"]),
    "allowed_reservations": (
        ("projects/1/zones/us-central1-a/reservations/r",),
        [f"{POOL}.machineSpec.reservationAffinity"],
    ),
}


def every_field() -> dict[str, Any]:
    job = json.loads(load_event("requests/bare_docs.json"))
    spec = job["jobSpec"]
    pool = spec["workerPoolSpecs"][0]
    pool["containerSpec"]["imageUri"] = IMAGE
    spec.update(
        network=NETWORK,
        pscInterfaceConfig={
            "networkAttachment": "projects/1/regions/us-central1/networkAttachments/a",
            "dnsPeeringConfigs": [{"domain": "corp.", "targetProject": "other", "targetNetwork": "theirs"}],
        },
        persistentResourceId="pr-1",
        tensorboard="projects/1/locations/us-central1/tensorboards/7",
        experiment="exp",
        models=["projects/1/locations/us-central1/models/m"],
    )
    job["encryptionSpec"] = {"kmsKeyName": "projects/1/locations/us-central1/keyRings/r/cryptoKeys/k"}
    pool["nfsMounts"] = [{"server": "10.0.0.2", "path": "/d", "mountPoint": "d"}]
    pool["machineSpec"]["reservationAffinity"] = {
        "reservationAffinityType": "SPECIFIC_RESERVATION",
        "key": "compute.googleapis.com/reservation-name",
        "values": ["projects/1/zones/us-central1-a/reservations/r"],
    }
    return {"request_id": "r1", "custom_job": job}


ALL_ALLOWED = dataclasses.replace(
    Settings.from_env(
        {
            "SPOTJOBS_ALLOWED_IMAGE_PREFIXES": "us-docker.pkg.dev/corp/train/",
            "SPOTJOBS_ALLOWED_SERVICE_ACCOUNTS": TRAINER,
            "SPOTJOBS_TRAINING_SERVICE_ACCOUNT": TRAINER,
        }
    ),
    **{setting: allowed for setting, (allowed, _) in ALLOWS.items()},
)


def violation_paths(settings: Settings) -> list[str]:
    try:
        validate_request(json.dumps(every_field()).encode(), attributes={}, settings=settings)
    except InvalidRequest as exc:
        return [v.path for v in exc.violations]
    return []


def test_the_walk_covers_every_opt_in_list_and_all_allowed_passes() -> None:
    lists = {s for s in OPT_INS if isinstance(getattr(ALL_ALLOWED, s), tuple)}
    assert lists == set(ALLOWS)
    assert violation_paths(ALL_ALLOWED) == []


@pytest.mark.parametrize("setting", sorted(ALLOWS))
def test_an_empty_allowlist_allows_none_of_what_it_guards(setting: str) -> None:
    found = violation_paths(dataclasses.replace(ALL_ALLOWED, **{setting: ()}))
    for guarded in ALLOWS[setting][1]:
        assert any(path.startswith(guarded) for path in found), (guarded, found)
