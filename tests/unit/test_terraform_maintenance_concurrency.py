"""The maintenance functions accept a tick while a run is in progress (no 429 from Cloud Run), and
concurrency above 1 comes with the vCPU it needs."""

from __future__ import annotations

from tests.support.terraform import module_config


def test_reconcile_and_prune_serve_a_second_request_during_a_run() -> None:
    builtin = module_config().locals["function_builtin"]
    for function in ("reconcile", "prune_checkpoints"):
        assert builtin[function]["max_instances"] == 1, function  # one instance; the lease orders runs
        assert builtin[function]["concurrency"] >= 2, (
            f"{function}: with concurrency 1 a tick pushed during a run gets 429 and is dead-lettered"
        )


def test_concurrency_above_one_requires_a_whole_vcpu() -> None:
    config = module_config()
    function = config.resource("google_cloudfunctions2_function", "functions")
    [precondition] = function["lifecycle"][0]["precondition"]
    assert "concurrency == 1" in precondition["condition"]
    assert "cpu" in precondition["condition"] and ">= 1" in precondition["condition"]
    assert config.variables["function_defaults"]["type"]  # cpu defaults to "1" (variables.tf)
