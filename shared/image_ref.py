"""Container image references, parsed, and matched against an allowlist at path boundaries.

A plain string prefix is not an allowlist: `us-docker.pkg.dev/corp/train` is a prefix of
`us-docker.pkg.dev/corp/train-evil/x`, and `.../train/../../evil/x` starts with `.../train/`.
So a reference is parsed with the distribution reference grammar (what registries and Docker
accept: lowercase path components of letters and digits joined by `.`, `_`, `__` or dashes, an
optional tag and digest) and compared component by component. Anything that does not parse, such
as a `..` or empty component, uppercase, or whitespace, is refused before any comparison.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_COMPONENT = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$")
_HOST = re.compile(
    r"^(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*"
    r"(?::[0-9]+)?$"
)
_TAG = re.compile(r"^[\w][\w.-]{0,127}$")
_DIGEST = re.compile(r"^[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}$")
DEFAULT_REGISTRY = "docker.io"


@dataclass(frozen=True)
class ImageRef:
    registry: str  # lowercased host[:port]
    path: tuple[str, ...]  # repository path components, the image name last
    tag: str | None = None
    digest: str | None = None


class BadReference(ValueError):
    pass


def parse_image(reference: str) -> ImageRef:
    """`host[:port]/a/b/name[:tag][@digest]`; without a host, Docker Hub (as Docker reads it)."""
    if not isinstance(reference, str) or not reference or reference != reference.strip():
        raise BadReference("is not an image reference")
    name, digest = reference, None
    if "@" in name:
        name, digest = name.split("@", 1)
        if not _DIGEST.fullmatch(digest):
            raise BadReference(f"has a malformed digest {digest!r}")
    tag = None
    last_slash = name.rfind("/")
    if ":" in name[last_slash + 1 :]:
        name, tag = name.rsplit(":", 1)
        if not _TAG.fullmatch(tag):
            raise BadReference(f"has a malformed tag {tag!r}")
    parts = name.split("/")
    if len(parts) > 1 and (
        "." in parts[0] or ":" in parts[0] or parts[0] == "localhost" or parts[0] != parts[0].lower()
    ):
        registry, path = parts[0], parts[1:]
        if not _HOST.fullmatch(registry):
            raise BadReference(f"has a malformed registry {registry!r}")
    else:
        registry, path = DEFAULT_REGISTRY, (["library", *parts] if len(parts) == 1 else parts)
    for component in path:
        if not _COMPONENT.fullmatch(component):
            raise BadReference(
                f"has the path component {component!r}; components are lowercase letters and "
                "digits joined by '.', '_', '__' or '-' (no '..', no empty component)"
            )
    return ImageRef(registry.lower(), tuple(path), tag, digest)


@dataclass(frozen=True)
class ImagePrefix:
    """An allowlist entry: a registry and zero or more leading path components."""

    registry: str
    path: tuple[str, ...]
    text: str

    def allows(self, image: ImageRef) -> bool:
        return image.registry == self.registry and image.path[: len(self.path)] == self.path


def parse_prefix(entry: str) -> ImagePrefix:
    """`us-docker.pkg.dev/corp/train/` (or without the trailing slash): registry, then whole
    components. Raises BadReference for an entry that is not one."""
    text = entry.strip()
    parts = text.rstrip("/").split("/")
    registry, path = parts[0], parts[1:]
    if (
        not registry
        or not _HOST.fullmatch(registry)
        or "." not in registry
        and ":" not in registry
        and registry != "localhost"
    ):
        raise BadReference(f"allowed image prefix {entry!r} must start with a registry host")
    for component in path:
        if not _COMPONENT.fullmatch(component):
            raise BadReference(f"allowed image prefix {entry!r} has the component {component!r}")
    return ImagePrefix(registry.lower(), tuple(path), text)
