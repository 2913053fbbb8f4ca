"""spotjobs' runtime logic (what the functions' zip ships): pure, typed, clients passed in.

Rooms (docs/ARCHITECTURE.md, "Layout and what each folder may import"; tests/unit/test_layering.py
enforces the table):

- foundation, the modules at the top that every room may import: `settings` (the one frozen
  settings object), `errors` (the hierarchy and `is_retryable`), `log`, `clock`, `topology`,
  `alerts` (the ops alert message), `swap` (the one compare-and-swap loop), `jobs` (a Vertex job
  as plain data: states, snapshot, label names), `image_ref`. They import only each other.
- `requests/`: what a request may be, read and validated. `ledger/`: the state bucket's records
  and the moves on them. `adapters/`: Vertex AI and the Google clients. `deciding/`: what an
  observation means and what to send. `pruning/`, `triggers/`: their own flows.
- `wiring` (the composition root, `Ports`) and `delivery` (a Pub/Sub push in, ack or redeliver out).
- the shells, one per function flow: `submit`, `observe` (on_job_event), `reconcile`; and their
  parts, which shells import and which import no shell: `redeliveries` (what submit does with a
  delivery it has seen before), `found_jobs` (adopting a job found at Vertex, cancelling strays).
  A shell may import every room but not another shell; nothing in a room imports a shell.

Nothing here imports `spotjobs` (the publisher API and the operator's tools) or `devstack`.
"""
