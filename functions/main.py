"""The file Cloud Functions loads: every entry point, by name.

Entry points are resolved on first access (PEP 562), so a function instance imports only its own
module and a cold start never pays for another function's libraries.
"""

from __future__ import annotations

import importlib
from typing import Any

ENTRY_POINTS = {
    "submit_job": "functions.submit",
    "on_job_event": "functions.events",
    "reconcile": "functions.reconcile",
    "prune_checkpoints": "functions.prune",
    "on_trigger": "functions.triggers",
}

__all__ = list(ENTRY_POINTS)


def __getattr__(name: str) -> Any:
    module = ENTRY_POINTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no entry point {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(__all__)
