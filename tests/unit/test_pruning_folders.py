"""The bounds no delete may cross (shared/pruning/folders.py): only an object under a request's
`checkpoints/` folder, under the managed prefix, is ever in scope; and where request folders are,
from the settings."""

from __future__ import annotations

import pytest

from shared.pruning.folders import CheckpointLayout, is_request_folder_name
from tests.support.decisions import make_settings
from tests.support.prune_store import LAYOUT, folder


def test_an_object_under_the_requests_checkpoints_folder_is_in_scope() -> None:
    assert LAYOUT.in_scope(f"{folder('r1')}step-000100/shard-0", folder("r1"))
    assert LAYOUT.in_scope(f"{folder('r1')}ckpt-1.pt", folder("r1"))


@pytest.mark.parametrize(
    ("name", "folder_name"),
    [
        ("requests/r1/checkpoints/", "requests/r1/checkpoints/"),  # the folder itself
        ("requests/r2/checkpoints/ckpt-1.pt", "requests/r1/checkpoints/"),  # another request's
        ("requests/r1/model/weights.bin", "requests/r1/checkpoints/"),  # beside the folder
        ("requests/r1/model/weights.bin", "requests/r1/model/"),  # a folder that holds no checkpoints
        ("other/r1/checkpoints/ckpt-1.pt", "other/r1/checkpoints/"),  # outside the managed prefix
    ],
    ids=["the-folder-itself", "another-request", "beside-it", "not-a-checkpoints-folder", "outside-the-prefix"],
)
def test_nothing_else_is_in_scope(name: str, folder_name: str) -> None:
    assert not LAYOUT.in_scope(name, folder_name)


@pytest.mark.parametrize(("prefix", "root"), [("requests", "requests/"), ("/a/b/", "a/b/"), ("/", "")])
def test_request_folders_live_under_the_configured_prefix(prefix: str, root: str) -> None:
    layout = CheckpointLayout.from_settings(
        make_settings("state", SPOTJOBS_CHECKPOINT_BUCKET="ckpt", SPOTJOBS_CHECKPOINT_PREFIX=prefix)
    )
    assert (layout.bucket, layout.root) == ("ckpt", root)
    assert layout.folder_for("r1") == f"{root}r1/checkpoints/"


@pytest.mark.parametrize(("request_id", "valid"), [("r-1.a_b", True), ("...", True), (".", False), ("a\tb", False)])
def test_a_request_folder_name_cannot_leave_its_folder(request_id: str, valid: bool) -> None:
    assert is_request_folder_name(request_id) is valid
