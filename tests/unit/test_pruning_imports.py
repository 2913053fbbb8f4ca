"""Importing the pruner costs a cold start no Cloud Storage library: google.cloud.storage loads on
a run's first call (shared/pruning/store.py). test_prune.py checks the whole function in a fresh
interpreter; this checks the room's modules in this one, with the library made unimportable."""

from __future__ import annotations

import importlib
import importlib.abc
import sys

import pytest

import shared.pruning
import shared.pruning.journal
import shared.pruning.runner
import shared.pruning.store

LAZY = "google.cloud.storage"
MODULES = ("shared.pruning.store", "shared.pruning.journal", "shared.pruning.runner")


class _Unimportable(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: object, target: object = None) -> None:
        if name == LAZY or name.startswith(LAZY + "."):
            raise ImportError(f"{name} must load on first use, not at import")


@pytest.mark.parametrize("module", MODULES)
def test_the_pruners_modules_import_without_the_storage_library(monkeypatch: pytest.MonkeyPatch, module: str) -> None:
    for name in [n for n in sys.modules if n == LAZY or n.startswith(LAZY + ".")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.delitem(sys.modules, module)
    leaf = module.rsplit(".", 1)[-1]
    monkeypatch.setattr(shared.pruning, leaf, getattr(shared.pruning, leaf))  # restored afterwards
    monkeypatch.setattr(sys, "meta_path", [_Unimportable(), *sys.meta_path])
    importlib.import_module(module)
