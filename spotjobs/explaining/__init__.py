"""`spotjobs explain`'s logic, offline: what on_job_event would make of captured log entries.

`reading` reads the input (LogEntries, a described job), `entries` explains each entry as
on_job_event would act on it, `replay` runs the decision on a made-up ledger record for a
described job. The command and its printing are spotjobs/cli/explain.py.
"""
