"""The subset of the `customJobs.list` filter language the emulator understands.

Terms joined by ` AND `, each `FIELD=VALUE` or `FIELD!=VALUE` where FIELD is `labels.KEY`,
`state` or `display_name`, and VALUE is `"quoted"` (with `\\"` escapes) or a bare word. Anything
else is refused with INVALID_ARGUMENT rather than silently matching too much.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from google.cloud import aiplatform_v1

_AND = re.compile(r"\s+AND\s+")
_TERM = re.compile(
    r"""^\s*(?P<field>labels\.[^\s=!"]+|state|display_name)\s*
        (?P<operator>!=|=)\s*
        (?P<value>"(?:[^"\\]|\\.)*"|[^\s"]+)\s*$""",
    re.VERBOSE,
)


@dataclass(frozen=True)
class FilterTerm:
    field: str
    value: str
    negated: bool

    def matches(self, job: aiplatform_v1.CustomJob) -> bool:
        return (self._actual(job) == self.value) != self.negated

    def _actual(self, job: aiplatform_v1.CustomJob) -> str | None:
        if self.field.startswith("labels."):
            labels: dict[str, str] = dict(job.labels)
            return labels.get(self.field.removeprefix("labels."))
        if self.field == "state":
            return str(aiplatform_v1.JobState(job.state).name)
        return str(job.display_name)


def parse_filter(text: str) -> tuple[FilterTerm, ...]:
    """Raises ValueError naming the term it cannot read."""
    if not text.strip():
        return ()
    return tuple(_parse_term(term) for term in _AND.split(text.strip()))


def _parse_term(term: str) -> FilterTerm:
    match = _TERM.match(term)
    if match is None:
        raise ValueError(f"Unsupported filter term: {term!r}")
    value = match["value"]
    if value.startswith('"'):
        value = re.sub(r"\\(.)", r"\1", value[1:-1])
    return FilterTerm(field=match["field"], value=value, negated=match["operator"] == "!=")


def matches_all(job: aiplatform_v1.CustomJob, terms: tuple[FilterTerm, ...]) -> bool:
    return all(term.matches(job) for term in terms)
