"""The ledger: one JSON record per request in the state bucket, and the moves made on it.

Owns the store (`store`: `LedgerStore`, compare-and-swap on the object generation, the job index
and the active index; its maintenance cursors, `cursors`, and the lines parked for a job not
indexed yet, `parked`), the record (`records`; reading its JSON, `shapes`), the state machine
(`states`), the transitions of an attempt before its job runs (`claims`), ledger retention
(`retention`) and the run lease of a maintenance sweep (`run_lock`).

May import: the foundation and `requests` (a claim refuses an invalid request).
"""
