"""The `customJobs.list` filter, as the API documents it.

Source: https://cloud.google.com/vertex-ai/docs/reference/rest/v1/projects.locations.customJobs/list
(the same text is `ListCustomJobsRequest.filter` in google/cloud/aiplatform/v1/job_service.proto):

    * `displayName` supports `=`, `!=` comparisons, and `:` wildcard.
    * `state` supports `=`, `!=` comparisons.
    * `createTime` supports `=`, `!=`,`<`, `<=`,`>`, `>=` comparisons. `createTime` must be in
      RFC 3339 format.
    * `labels` supports general map functions that is: `labels.key=value` - key:value equality
      `labels.key:* - key existence
    e.g. state="JOB_STATE_SUCCEEDED" AND displayName:"my_job_*", NOT displayName="my_job",
    createTime>"2021-05-18T00:00:00Z", labels.keyA=valueA, labels.keyB:*

The grammar is Google's list filter (https://google.aip.dev/160), the subset those fields need:

    filter      := [expression]
    expression  := sequence {"AND" sequence}
    sequence    := factor {factor}                       (juxtaposition is AND)
    factor      := term {"OR" term}                      (OR binds tighter than AND, as in AIP-160)
    term        := ["NOT" | "-"] simple
    simple      := "(" expression ")" | field comparator value
    field       := displayName | display_name | state | createTime | create_time
                 | labels.KEY | labels."KEY"
    comparator  := = | != | < | <= | > | >= | :
    value       := "quoted" (\\ escapes) | bare word

Field names are accepted in camelCase (REST) and snake_case (proto). Any other field (including
`updateTime`, which the API does not list), a comparator a field does not support, an unknown
state or a time that is not RFC 3339 is refused with ValueError, which the service turns into
400 INVALID_ARGUMENT, as the API refuses them, rather than silently matching too much.

Matching: `=`/`!=` compare exactly; `:` on displayName or a label value is a wildcard match in
which `*` stands for any run of characters (without `*` it is equality); `labels.KEY:*` is true
when the key exists; `labels.KEY!=V` is true when the key is absent or holds another value.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from google.cloud import aiplatform_v1

_COMPARATORS = ("<=", ">=", "!=", "=", "<", ">", ":")
_FIELD_ALIASES = {
    "displayName": "display_name",
    "display_name": "display_name",
    "state": "state",
    "createTime": "create_time",
    "create_time": "create_time",
}
_ALLOWED = {
    "display_name": frozenset({"=", "!=", ":"}),
    "state": frozenset({"=", "!="}),
    "create_time": frozenset({"=", "!=", "<", "<=", ">", ">="}),
    "labels": frozenset({"=", "!=", ":"}),
}
_KEYWORDS = ("AND", "OR", "NOT")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
_LABEL_KEY = re.compile(r"[A-Za-z0-9_-]+")
_BARE_VALUE = re.compile(r"[^\s()\"]+")
_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})")

Predicate = Callable[[aiplatform_v1.CustomJob], bool]


@dataclass(frozen=True)
class JobFilter:
    """A parsed filter; `text` is what it was parsed from."""

    text: str
    predicate: Predicate

    def matches(self, job: aiplatform_v1.CustomJob) -> bool:
        return self.predicate(job)


def parse_filter(text: str) -> JobFilter:
    """Raises ValueError saying what it cannot read."""
    if not text.strip():
        return JobFilter(text, lambda job: True)
    parser = _Parser(text)
    predicate = parser.expression()
    parser.skip_space()
    if not parser.at_end():
        raise ValueError(f"Invalid filter: unexpected {parser.rest()!r} in {text!r}")
    return JobFilter(text, predicate)


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    # ---- lexing helpers ----

    def skip_space(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1

    def at_end(self) -> bool:
        return self.pos >= len(self.text)

    def rest(self) -> str:
        return self.text[self.pos :][:40]

    def peek_keyword(self, keyword: str) -> bool:
        self.skip_space()
        end = self.pos + len(keyword)
        if self.text[self.pos : end] != keyword:
            return False
        return end >= len(self.text) or self.text[end].isspace() or self.text[end] == "("

    def take_keyword(self, keyword: str) -> bool:
        if self.peek_keyword(keyword):
            self.pos += len(keyword)
            return True
        return False

    def take(self, literal: str) -> bool:
        self.skip_space()
        if self.text.startswith(literal, self.pos):
            self.pos += len(literal)
            return True
        return False

    def fail(self, what: str) -> ValueError:
        return ValueError(f"Invalid filter: expected {what} at {self.rest()!r} in {self.text!r}")

    # ---- grammar ----

    def expression(self) -> Predicate:
        parts = [self.sequence()]
        while self.take_keyword("AND"):
            parts.append(self.sequence())
        return _all(parts)

    def sequence(self) -> Predicate:
        parts = [self.factor()]
        while True:
            self.skip_space()
            if self.at_end() or self.text[self.pos] == ")" or self.peek_keyword("AND"):
                return _all(parts)
            if self.peek_keyword("OR"):
                raise self.fail("a restriction before OR")
            parts.append(self.factor())

    def factor(self) -> Predicate:
        parts = [self.term()]
        while self.take_keyword("OR"):
            parts.append(self.term())
        return _any(parts)

    def term(self) -> Predicate:
        if self.take_keyword("NOT") or self.take("-"):
            inner = self.simple()
            return lambda job: not inner(job)
        return self.simple()

    def simple(self) -> Predicate:
        if self.take("("):
            inner = self.expression()
            if not self.take(")"):
                raise self.fail("')'")
            return inner
        return self.restriction()

    def restriction(self) -> Predicate:
        field, label_key = self.field()
        comparator = self.comparator()
        value = self.value()
        if comparator not in _ALLOWED[field]:
            shown = f"labels.{label_key}" if label_key is not None else field
            raise ValueError(
                f"Invalid filter: {shown} does not support {comparator!r} (supported: {sorted(_ALLOWED[field])})"
            )
        if field == "labels":
            assert label_key is not None
            return _label_predicate(label_key, comparator, value)
        if field == "display_name":
            return _string_predicate(lambda job: str(job.display_name), comparator, value)
        if field == "state":
            return _state_predicate(comparator, value)
        return _time_predicate(comparator, value)

    def field(self) -> tuple[str, str | None]:
        self.skip_space()
        match = _IDENTIFIER.match(self.text, self.pos)
        if match is None or match.group() in _KEYWORDS:
            raise self.fail("a field")
        name = match.group()
        # `labels.key` and the like: the identifier stops at the dot.
        if name == "labels" and self.text.startswith(".", match.end()):
            self.pos = match.end() + 1
            if self.text.startswith('"', self.pos):
                return "labels", self.quoted()
            key = _LABEL_KEY.match(self.text, self.pos)
            if key is None:
                raise self.fail("a label key")
            self.pos = key.end()
            return "labels", key.group()
        dotted = re.compile(r"[A-Za-z0-9_.]*").match(self.text, match.end())
        full = name + (dotted.group() if dotted else "")
        if full not in _FIELD_ALIASES:
            raise ValueError(
                f"Invalid filter: unsupported field {full!r} (supported: displayName, state, createTime, labels.KEY)"
            )
        self.pos = match.end() + (len(dotted.group()) if dotted else 0)
        return _FIELD_ALIASES[full], None

    def comparator(self) -> str:
        self.skip_space()
        for comparator in _COMPARATORS:
            if self.text.startswith(comparator, self.pos):
                self.pos += len(comparator)
                return comparator
        raise self.fail("a comparator (=, !=, <, <=, >, >=, :)")

    def value(self) -> str:
        self.skip_space()
        if self.text.startswith('"', self.pos):
            return self.quoted()
        match = _BARE_VALUE.match(self.text, self.pos)
        if match is None:
            raise self.fail("a value")
        self.pos = match.end()
        return match.group()

    def quoted(self) -> str:
        assert self.text[self.pos] == '"'
        out: list[str] = []
        index = self.pos + 1
        while index < len(self.text):
            char = self.text[index]
            if char == "\\" and index + 1 < len(self.text):
                out.append(self.text[index + 1])
                index += 2
                continue
            if char == '"':
                self.pos = index + 1
                return "".join(out)
            out.append(char)
            index += 1
        raise ValueError(f"Invalid filter: unterminated string in {self.text!r}")


# ---- predicates ----


def _all(parts: list[Predicate]) -> Predicate:
    return parts[0] if len(parts) == 1 else (lambda job: all(part(job) for part in parts))


def _any(parts: list[Predicate]) -> Predicate:
    return parts[0] if len(parts) == 1 else (lambda job: any(part(job) for part in parts))


def _wildcard(pattern: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(piece) for piece in pattern.split("*")), re.DOTALL)


def _string_predicate(
    actual: Callable[[aiplatform_v1.CustomJob], str | None], comparator: str, value: str
) -> Predicate:
    if comparator == ":":
        pattern = _wildcard(value)
        return lambda job: (text := actual(job)) is not None and bool(pattern.fullmatch(text))
    if comparator == "=":
        return lambda job: actual(job) == value
    return lambda job: actual(job) != value


def _label_predicate(key: str, comparator: str, value: str) -> Predicate:
    if comparator == ":" and value == "*":
        return lambda job: key in job.labels
    return _string_predicate(lambda job: dict(job.labels).get(key), comparator, value)


def _state_predicate(comparator: str, value: str) -> Predicate:
    try:
        state = aiplatform_v1.JobState[value]
    except KeyError:
        raise ValueError(f"Invalid filter: {value!r} is not a JobState") from None
    if comparator == "=":
        return lambda job: aiplatform_v1.JobState(job.state) == state
    return lambda job: aiplatform_v1.JobState(job.state) != state


def _time_predicate(comparator: str, value: str) -> Predicate:
    if not _RFC3339.fullmatch(value):
        raise ValueError(f"Invalid filter: createTime must be in RFC 3339 format: {value!r}")
    moment = datetime.fromisoformat(value.upper().replace("Z", "+00:00"))
    compare: dict[str, Callable[[datetime, datetime], bool]] = {
        "=": lambda a, b: a == b,
        "!=": lambda a, b: a != b,
        "<": lambda a, b: a < b,
        "<=": lambda a, b: a <= b,
        ">": lambda a, b: a > b,
        ">=": lambda a, b: a >= b,
    }
    check = compare[comparator]

    def predicate(job: aiplatform_v1.CustomJob) -> bool:
        created = job.create_time
        if not created:
            return False
        if created.tzinfo is None:
            created = created.replace(tzinfo=UTC)
        return check(created, moment)

    return predicate
