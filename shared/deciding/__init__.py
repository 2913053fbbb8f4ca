"""Deciding: what an observation of a job means for its request, and what that sends.

Owns `decide` over the ledger record (`decisions`), the preemption counting rule (`preemptions`),
the log lines and alerts a decision describes (`effects`), reading job-event log entries into
signals (`events`), the outbox that publishes what a decision left pending (`outbox`) and jobs the
ledger does not record (`strays`).

May import: the foundation, `requests`, `ledger` and `wiring` (the `Ports` the outbox publishes
through). Not the adapters: the listed exceptions in tests/unit/test_layering.py are for now.
"""
