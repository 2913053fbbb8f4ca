"""A record part read from its JSON: the fields its class knows, each checked against the type
the class declares, and the others kept under `newer_fields` (`known_fields`), then the object
built (`built`). Any dataclass whose fields are JSON values or record parts; the record's classes
are `shared.ledger.records`, which reads every document through these.
"""

from __future__ import annotations

import functools
import types
import typing
from collections.abc import Callable
from dataclasses import fields, is_dataclass
from enum import Enum
from typing import Any, TypeVar

_T = TypeVar("_T")


def built(cls: type[_T], known: dict[str, Any]) -> _T:
    """`cls(**known)`, without the call when `known` names every field in order (as this version
    writes a document): its `__init__` only assigns them, and an attempt's 40 keywords cost more
    than its JSON's parse."""
    if tuple(known) != _init_order(cls):
        return cls(**known)
    built: _T = object.__new__(cls)
    built.__dict__ = known
    return built


@functools.cache
def _init_order(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls))


def known_fields(cls: type, data: Any) -> dict[str, Any]:
    """The fields `cls` knows, each checked against its type (`_shape_checks`), and the others
    under `newer_fields`: during a rolling deploy an older instance rewrites a record a newer one
    wrote, and must not drop what it cannot read."""
    if not isinstance(data, dict):
        raise TypeError(f"a {cls.__name__} is {_shown(data)}, not an object")
    checks = _shape_checks(cls)
    plain = _plain_types(cls)
    known: dict[str, Any] = {}
    newer: dict[str, Any] = {}
    for name, value in data.items():
        types_accepted = plain.get(name)
        if types_accepted is None:
            newer[name] = value
        # Most fields are a scalar or null: a set lookup decides them, the check the others.
        elif type(value) in types_accepted or checks[name](value):
            known[name] = value
        else:
            raise TypeError(f"{cls.__name__}.{name} is {_shown(value)}, not {_hints(cls)[name]}")
    known["newer_fields"] = newer
    return known


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


@functools.cache
def _shape_checks(cls: type) -> dict[str, Callable[[Any], bool]]:
    """For each field of `cls`, whether a JSON value has the field's declared type."""
    return {name: _accepts(_hints(cls)[name]) for name in _field_names(cls)}


@functools.cache
def _plain_types(cls: type) -> dict[str, frozenset[type]]:
    """For each field of `cls`, the JSON types whose every value its shape check accepts (a scalar
    field's, null where it may be null); other values go to the check itself."""
    return {name: _plain_types_of(_hints(cls)[name]) for name in _field_names(cls)}


def _plain_types_of(hint: Any) -> frozenset[type]:
    if typing.get_origin(hint) in (types.UnionType, typing.Union):
        return frozenset().union(*(_plain_types_of(arg) for arg in typing.get_args(hint)))
    plain: dict[Any, frozenset[type]] = {
        type(None): frozenset({type(None)}),
        bool: frozenset({bool}),
        int: frozenset({int}),
        float: frozenset({float, int}),
        str: frozenset({str}),
    }
    return plain.get(hint, frozenset())


def _accepts(hint: Any) -> Callable[[Any], bool]:
    """Whether a JSON value has type `hint`. A record part (a dataclass) needs an object here;
    its own fields are checked when it is built. Every read of a record runs these, so the common
    shapes (`X | None`, containers of anything) take the shortest path."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return _anything
    if hint is type(None):
        return _is_none
    if origin in (types.UnionType, typing.Union):
        options = tuple(_accepts(arg) for arg in args if arg is not type(None))
        if type(None) in args and len(options) == 1:
            (only,) = options
            return lambda value: value is None or only(value)
        return lambda value: any(accepts(value) for accepts in options) or (value is None and type(None) in args)
    if origin is list:
        member = _accepts(args[0])
        if member is _anything:
            return lambda value: isinstance(value, list)
        return lambda value: isinstance(value, list) and all(map(member, value))
    if origin is dict:
        member = _accepts(args[1])  # JSON keys are strings
        if member is _anything:
            return lambda value: isinstance(value, dict)
        return lambda value: isinstance(value, dict) and all(map(member, value.values()))
    if isinstance(hint, type) and issubclass(hint, Enum):
        names = frozenset(member.value for member in hint)
        return lambda value: isinstance(value, str) and value in names
    if hint is bool:
        return lambda value: value is True or value is False
    if hint is int:
        return lambda value: type(value) is int
    if hint is float:
        return lambda value: type(value) is float or type(value) is int
    if hint is str:
        return lambda value: type(value) is str
    if is_dataclass(hint):
        return lambda value: isinstance(value, dict)
    raise TypeError(f"no shape check for a field of type {hint!r}")  # a new kind of field: add one


def _anything(_value: Any) -> bool:
    return True


def _is_none(value: Any) -> bool:
    return value is None


@functools.cache
def _field_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in fields(cls)) - {"newer_fields"}
