"""What is left of a request's checkpoints in the stack's bucket."""

from __future__ import annotations


def checkpoint_children(stack, request_id: str) -> set[str]:
    base = f"{stack.settings.output_dir_for(request_id)}checkpoints/".split("/", 3)[3]
    bucket = stack.storage().bucket(stack.settings.checkpoint_bucket)
    return {blob.name[len(base) :].split("/")[0] for blob in bucket.list_blobs(prefix=base)}


def checkpoint_steps(stack, request_id: str) -> set[str]:
    """The checkpoints left: every child but the trainer kit's run objects (`_spotjobs_runs/`)."""
    return {name for name in checkpoint_children(stack, request_id) if name != "_spotjobs_runs"}
