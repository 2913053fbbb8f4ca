"""Helpers the tests share (fakes, builders, readers). A test module imports helpers from here or
from a conftest.py, never from another test module (tests/unit/test_layering.py checks it)."""
