"""Entry module of the spotjobs Cloud Functions deployment (packed as /main.py by terraform/functions.tf).

The repository keeps the entry points in functions/main.py, which imports the `functions` and
`shared` packages. Cloud Functions' Python runtime starts `functions-framework`, which loads its
source file and appends *that file's directory* to sys.path. Pointed at functions/main.py
(GOOGLE_FUNCTION_SOURCE), only functions/ would be importable and `import shared` would fail.
Loaded from the source root, this module puts the root on sys.path; it then forwards every entry
point name to functions/main.py lazily, so each function instance still imports only its own
module (functions/main.py resolves entry points on first access, PEP 562).
"""

from __future__ import annotations

from typing import Any

import functions.main as _entry_points

__all__ = list(_entry_points.__all__)


def __getattr__(name: str) -> Any:
    return getattr(_entry_points, name)


def __dir__() -> list[str]:
    return sorted(__all__)
