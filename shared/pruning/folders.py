"""Where request folders are, and the bounds no delete may cross: only what is under a request's
`checkpoints/` folder, under the managed bucket and prefix, is ever a candidate."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from spotjobs_kit.layout import CHECKPOINTS_FOLDER

from shared.errors import SpotjobsError

if TYPE_CHECKING:
    from shared.settings import Settings

# Looser than a submitted request id (shared.requests.envelope): folders published by hand, or from before
# the ledger, are pruned too. What matters here is that the name cannot leave its folder.
_REQUEST_FOLDER_NAME = re.compile(r"^[^/\x00-\x1f]+$")


class OutOfScope(SpotjobsError):
    """A delete aimed outside the request's checkpoints folder: a bug, never attempted."""


def is_request_folder_name(request_id: str) -> bool:
    """Whether `request_id` can name one request folder (no "/", no control character, no "..")."""
    return bool(_REQUEST_FOLDER_NAME.match(request_id)) and request_id not in {".", ".."}


@dataclass(frozen=True)
class CheckpointLayout:
    """The managed bucket and the object prefix under which every request's folder lives."""

    bucket: str
    root: str  # "requests/" (ends with "/"), or "" for the whole bucket

    @classmethod
    def from_settings(cls, settings: Settings) -> CheckpointLayout:
        prefix = settings.checkpoint_prefix.strip("/")
        return cls(settings.checkpoint_bucket, f"{prefix}/" if prefix else "")

    def folder_for(self, request_id: str) -> str:
        """Object-name prefix of a request's checkpoints: `<root><request_id>/checkpoints/`."""
        if not is_request_folder_name(request_id):
            raise OutOfScope(f"{request_id!r} cannot name a request folder")
        return f"{self.root}{request_id}/{CHECKPOINTS_FOLDER}"

    def in_scope(self, name: str, folder: str) -> bool:
        return (
            folder.startswith(self.root)
            and folder.endswith(f"/{CHECKPOINTS_FOLDER}")
            and name.startswith(folder)
            and len(name) > len(folder)
        )
