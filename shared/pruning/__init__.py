"""Checkpoint pruning: frees the storage of checkpoints a request no longer needs.

checkpoints (what a checkpoints folder holds, and which checkpoints are complete), folders (where
request folders live, and the bounds no delete may cross), retention (what to keep), plan (one
request's checkpoints judged), execute (threaded, generation-guarded deletes), report (what
happened), store (the storage a run needs, its GCS adapter and the run cursor), runner (the
handler and the run that the prune_checkpoints function and `spotjobs prune` call).

May import: the foundation, `ledger`, `wiring`, `delivery`, `deciding` (to publish its report alert)
and `fleet` (the hourly run compacts the fleet's observations).
"""
