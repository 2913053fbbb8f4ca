"""The shape check of a record's field where no plain type decides it (shared/ledger/shapes.py,
`known_fields`): a boolean inside a container, a kind of field no record part has yet, is judged by the
check itself, which takes true and false and nothing else."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from shared.ledger.shapes import known_fields


@dataclass
class _Flags:
    flags: list[bool] = field(default_factory=list)
    newer_fields: dict[str, Any] = field(default_factory=dict)


@pytest.mark.parametrize("flags", [[True], [False], [True, False], []])
def test_a_list_of_booleans_takes_true_and_false(flags: list[bool]) -> None:
    assert known_fields(_Flags, {"flags": flags})["flags"] == flags


@pytest.mark.parametrize("flags", [[1], [0], ["true"], [None], [True, 1]])
def test_a_list_of_booleans_refuses_anything_else(flags: list[Any]) -> None:
    with pytest.raises(TypeError, match=r"^_Flags\.flags is "):
        known_fields(_Flags, {"flags": flags})
