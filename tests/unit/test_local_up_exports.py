"""`spotjobs local up` prints the exports a shell needs; pasted into a shell, each sets its
variable to the stack's value exactly, whatever characters the value holds."""

from __future__ import annotations

import io
import subprocess
from contextlib import redirect_stdout

from spotjobs.cli.local import print_ready

ENV = {
    "PUBSUB_EMULATOR_HOST": "127.0.0.1:8085",
    "SPOTJOBS_PREEMPTION_PATTERNS": "preempt,spot vm .*reclaimed",
    "SPOTJOBS_STOCKOUT_PATTERNS": "stockout,resources are insufficient",
    "SPOTJOBS_TRAINING_SERVICE_ACCOUNT": "",
    "SPOTJOBS_ODD": "it's $HOME; `x`",
}


def test_the_printed_exports_set_every_value_exactly_in_a_shell() -> None:
    description = {
        "env": ENV,
        "functions": {"submit_job": "http://127.0.0.1:1"},
        "vertex_quotas": {"submissions_per_minute": 60, "crud_per_minute": 600},
        "vertex_endpoint": "http://127.0.0.1:2",
        "vertex_signals": "documented",
        "logs": "/tmp/logs",
    }
    printed = io.StringIO()
    with redirect_stdout(printed):
        print_ready(description, 1.0)
    script = printed.getvalue() + "".join(f'printf "%s\\0" "${name}"\n' for name in ENV)
    shell = subprocess.run(["bash", "-euc", script], capture_output=True, text=True, check=True)
    assert shell.stderr == ""
    assert dict(zip(ENV, shell.stdout.split("\0")[:-1], strict=True)) == ENV
