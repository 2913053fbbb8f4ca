"""The state bucket's Object Lifecycle Management rules as terraform/storage.tf declares them, and
whether one deletes a live object at a given time
(https://cloud.google.com/storage/docs/lifecycle: a rule acts when all its conditions hold; `age`
counts days from the object's creation, `days_since_custom_time` from its Custom-Time, and an
object without a Custom-Time never meets the latter)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cached_property
from typing import Any

from tests.support.terraform import module_config


@dataclass(frozen=True)
class Rule:
    action: str
    condition: dict[str, Any]

    @cached_property
    def for_live_objects(self) -> bool:
        """Rules on noncurrent versions only (the state bucket keeps them a while) never touch a
        live object."""
        return self.condition.get("with_state") not in ("ARCHIVED",) and "days_since_noncurrent_time" not in (
            self.condition
        )

    def matches(self, name: str) -> bool:
        prefixes = self.condition.get("matches_prefix")
        suffixes = self.condition.get("matches_suffix")
        return (not prefixes or name.startswith(tuple(prefixes))) and (not suffixes or name.endswith(tuple(suffixes)))

    def deletes(self, name: str, *, created: datetime, custom_time: datetime | None, now: datetime) -> bool:
        if self.action != "Delete" or not self.for_live_objects or not self.matches(name):
            return False
        age = self.condition.get("age")
        if age is not None and now < created + timedelta(days=age):
            return False
        days = self.condition.get("days_since_custom_time")
        return days is None or (custom_time is not None and now >= custom_time + timedelta(days=days))


def _resolved(value: Any) -> Any:
    """A `${var.name}` reference as the variable's default (what a deployment gets unless it says)."""
    if isinstance(value, str) and value.startswith("${var.") and value.endswith("}"):
        return module_config().variables[value[len("${var.") : -1]]["default"]
    return value


def state_bucket_rules() -> list[Rule]:
    bucket = module_config().resource("google_storage_bucket", "state")
    rules = []
    for rule in bucket.get("lifecycle_rule", []):
        condition = {key: _resolved(value) for key, value in rule["condition"][0].items()}
        rules.append(Rule(rule["action"][0]["type"], condition))
    return rules


def deleted_by_lifecycle(name: str, *, created: datetime, custom_time: datetime | None, now: datetime) -> bool:
    return any(rule.deletes(name, created=created, custom_time=custom_time, now=now) for rule in state_bucket_rules())
