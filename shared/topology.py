"""Pub/Sub topology (topics, trigger and reader subscriptions), from shared/topology.json.

The same JSON file is read by terraform/, so the embedded stack and production cannot drift.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TOPOLOGY_FILE = Path(__file__).with_name("topology.json")


@dataclass(frozen=True)
class Topology:
    raw: dict[str, Any]

    def topic_name(self, key: str) -> str:
        return self.raw["topics"][key]["name"]

    @property
    def topic_keys(self) -> list[str]:
        return list(self.raw["topics"])

    @property
    def functions(self) -> dict[str, dict[str, str]]:
        return self.raw["functions"]

    @property
    def trigger_subscription(self) -> dict[str, Any]:
        return self.raw["trigger_subscription"]

    @property
    def pull_subscriptions(self) -> dict[str, dict[str, Any]]:
        return self.raw["pull_subscriptions"]


TOPOLOGY = Topology(json.loads(TOPOLOGY_FILE.read_text()))
