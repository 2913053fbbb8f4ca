"""Reading a request's `capacity` (shared/requests/capacity.py) at its edges, each pinned where a
slip in the code would change the answer: the most alternatives a request may list, how much of
an unknown machine value a violation repeats, and an alternative with an unknown strategy."""

from __future__ import annotations

from typing import Any

from shared.requests.capacity import MACHINES, MAX_ALTERNATIVES, machine_spec, read_capacity
from shared.requests.pricing import table


def read(value: object) -> tuple[tuple[Any, ...], list[str]]:
    found: list[Any] = []
    alternatives = read_capacity(value, found)
    return alternatives, [str(v) for v in found]


def test_a_request_may_list_eight_alternatives_not_nine() -> None:
    assert MAX_ALTERNATIVES == 8  # the limit its violation names
    machines = list(MACHINES)[:9]
    eight, problems = read([{"machine": m, "strategies": ["SPOT"]} for m in machines[:8]])
    assert problems == [] and [a.machine for a in eight] == machines[:8]
    nine, problems = read([{"machine": m, "strategies": ["SPOT"]} for m in machines])
    assert nine == () and problems[0].startswith("capacity: expected a list of 1 to 8 alternatives")


def test_an_unknown_machine_is_repeated_whole_up_to_forty_characters_then_cut() -> None:
    forty = "x" * 38  # its repr, quotes included, is 40 characters
    _, problems = read([{"machine": forty, "strategies": ["SPOT"]}])
    assert problems[0].startswith(f"capacity[0].machine: is {forty!r}; known machine types: ")
    longer = "x" * 39
    _, problems = read([{"machine": longer, "strategies": ["SPOT"]}])
    assert problems[0].startswith(f"capacity[0].machine: is {longer!r:.20}...; known machine types: ")


def test_an_alternative_with_an_unknown_strategy_is_not_read_and_only_that_strategy_is_named() -> None:
    alternatives, problems = read([{"machine": "a3-highgpu-8g", "strategies": ["spot", "spot"]}])
    assert alternatives == ()
    assert problems == [
        "capacity[0].strategies[0]: is 'spot'; expected one of SPOT, STANDARD, FLEX_START",
        "capacity[0].strategies[1]: is 'spot'; expected one of SPOT, STANDARD, FLEX_START",
    ]


def test_an_alternative_with_an_unknown_machine_or_no_strategy_is_not_read() -> None:
    assert read([{"machine": "n1-standard-8", "strategies": ["SPOT"]}])[0] == ()
    assert read([{"machine": "a3-highgpu-8g", "strategies": []}])[0] == ()


def test_every_alternative_after_one_that_is_no_object_is_still_judged() -> None:
    _, problems = read(["a3-highgpu-8g", {"machine": "a3-highgpu-8g", "strategies": ["spot"]}])
    assert [p.split(":")[0] for p in problems] == ["capacity[0]", "capacity[1].strategies[0]"]


def test_every_priced_machine_gets_the_accelerators_the_price_table_names() -> None:
    # Through `machine_spec`, as a job on an alternative gets them: a test that only reads MACHINES
    # runs no line of the module, so the mutation runner never asks it about the table's entries.
    for machine, priced in table()["machine_types"].items():
        count = priced["accelerator"].split(" x ")[0]
        spec = machine_spec(machine)
        assert spec["machineType"] == machine
        assert spec["acceleratorCount"] == int(count), machine
