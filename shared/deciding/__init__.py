"""Deciding: what an observation of a job means for its request, and what that sends.

Owns `decide` over the ledger record (`decisions`), what a job's end means for its request
(`job_end`), the deployment's settings they read (`decision_policy`), what reads of a job say of
its waits (`waits`) and when it is stuck (`stuck`), the preemption counting rule (`preemptions`),
the log lines and alerts a decision describes (`effects`), reading job-event log entries into
signals (`events`), the outbox that publishes what a decision left pending (`outbox`), which jobs
the ledger does not record are strays (`strays`) and applying an observation under the ledger's
compare-and-swap (`applying`).

May import: the foundation (a job as plain data is `shared.jobs`), `requests`, `ledger` and
`wiring` (the `Ports` the outbox publishes and the ledger is reached through). Never an adapter or
a client module: listing and cancelling jobs is the shells' (`shared.found_jobs`).
"""
