"""Fixtures the Vertex emulator's integration tests share, defined in tests/support/vertex_emulator.py."""

from tests.support.vertex_emulator import make_emulator, pubsub_emulator  # noqa: F401 (fixtures, found by name)
