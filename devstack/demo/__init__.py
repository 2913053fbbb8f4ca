"""`spotjobs demo`: one scripted scenario through the real functions on the embedded stack.

The demo starts the embedded stack, registers a preemption plan per request with the Vertex AI
emulator, publishes seven job requests to `job-requests`, lands a burst of objects for a retraining
trigger, and then watches (acting once more only to reclaim the two-node job's primary as it
trains, which no plan can add to the worker's): the ledger, the emulator's record of each job's runs (the
trainer's JSON lines say where each run started and which checkpoints it committed), the checkpoint
bucket, the ops-alerts topic and the functions' decision logs. When every request has ended it asks for a prune pass, waits for the checkpoints to
be pruned, stops the stack and reports per request and in total, with an estimated cost on Spot
and on demand and the goodput (useful training steps / steps computed).

Scenarios (request ids, plans and training data follow `--seed`):

- few-preemptions: preempted a few times, succeeds within attempt 1;
- requeued: preempted 7 times (past Vertex's 6 restarts), re-queued, succeeds on attempt 2
  starting from the last complete checkpoint of attempt 1;
- fallback: the same, with `fallback: {after_spot_attempts: 1, strategy: STANDARD}`;
- duplicate: the same request published twice, one job;
- invalid: rejected with its reasons and an alert, no job;
- code-bug: the trainer fails at a step, an alert, no re-queue;
- new-data: a burst of objects in the data bucket, one request per trigger window;
- two-node: worker pools 0 and 1 (the worker a stand-in that trains nothing, `worker`); the
  worker's VM is reclaimed, then the primary's; each time the whole job restarts
  (`restartJobOnWorkerRestart`) and resumes from the primary's checkpoint; the report lists each
  replica's reclaims and runs.

Progress goes to stderr (a live table on a terminal, plain lines otherwise); the report goes to
stdout, as text or, with `--json`, as one JSON document. The exit status is 0 only when every
scenario ended as designed; otherwise it is 1 and the report says what differed.

Modules: `scenarios` (what is played and expected), `traces` (what happened), `cost` (steps and
dollars), `report` (checks and the report), `observer` (reading the stack), `runner` (playing
the scenario), `view` (the live table and the report as text), `html` (the HTML page), `worker`
(the two-node scenario's stand-in worker), `cli` (`spotjobs demo`).
"""
