"""`tools/mutants.py --outside`: a file of shared/ outside the rooms, judged as a room of its own (a
pass over the code changed since the last one, docs/simulator.md "Mutation testing")."""

from __future__ import annotations

import argparse

import pytest

from tools.mutants import main, outside_argument, room_files


def test_a_file_of_shared_outside_the_rooms_is_taken_as_a_room_of_one_file() -> None:
    assert outside_argument("shared/submit.py") == "shared/submit.py"
    assert outside_argument("shared/adapters/../attempt_lookup.py") == "shared/attempt_lookup.py"
    assert room_files(outside_argument("shared/adapters/vertex.py")) == ["shared/adapters/vertex.py"]


@pytest.mark.parametrize(
    "wrong",
    ["shared/pacing.py", "shared/ledger/claims.py", "shared/absent.py", "shared/../tools/mutants.py", "shared/fleet"],
)
def test_a_file_of_a_room_or_anything_but_a_file_of_shared_is_refused_naming_the_rooms(wrong: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="shared/pacing.py"):
        outside_argument(wrong)


def test_the_option_refuses_a_file_of_a_room_before_any_run(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--outside", "shared/ledger/claims.py"])
    assert "outside the rooms" in capsys.readouterr().err
