"""`spotjobs local up --vertex-mode NAME=VALUE`: the Vertex emulator's modes for what Google does
not document (devstack.vertex.modes), checked by name and value before the stack starts, and
handed to the emulator as its own flags."""

from __future__ import annotations

import argparse

import pytest

from devstack.vertex.modes import ReplicaModes, add_mode_arguments, modes_from_args
from spotjobs.cli.local import vertex_mode_flags


def emulator_modes(flags: tuple[str, ...]) -> ReplicaModes:
    parser = argparse.ArgumentParser()
    add_mode_arguments(parser)
    return modes_from_args(parser.parse_args(list(flags)))


def test_each_mode_given_becomes_the_emulators_flag() -> None:
    flags = vertex_mode_flags(["preemption_restarts=job", "rate_reclaims=primary"])
    assert flags == ("--preemption-restarts=job", "--rate-reclaims=primary")
    assert emulator_modes(flags) == ReplicaModes(preemption_restarts="job", rate_reclaims="primary")
    assert vertex_mode_flags([]) == ()


@pytest.mark.parametrize(
    ("pair", "complaint"),
    [
        ("preemption_restarts", "not NAME=VALUE"),
        ("=job", "not NAME=VALUE"),
        ("restarts=job", "unknown field"),
        ("survivor_stop=politely", "survivor_stop must be one of"),
    ],
)
def test_a_mode_that_is_not_one_is_refused_by_name(pair: str, complaint: str) -> None:
    with pytest.raises(ValueError, match=complaint):
        vertex_mode_flags([pair])
