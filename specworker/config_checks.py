"""Value and type checks for the config dataclasses; each failure is a ConfigError naming the key path.

Kept apart from config.py so that file holds only the schema and the loader. Imports no paddle.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from typing import Any

__all__ = ["ConfigError", "show", "invalid", "check", "check_choice", "check_at_least", "check_types", "key_path"]


class ConfigError(ValueError):
    """A configuration mistake. The message names the source file, the YAML key path, the value and
    what is allowed: `configs/x.yaml: scheduler.block_size = 24: not a power of two; allowed: ...`."""

    def __init__(self, message: str, *, key: str | None = None, source: str | None = None):
        self.message, self.key, self.source = message, key, source
        super().__init__(f"{source}: {message}" if source else message)

    def in_source(self, source: str) -> ConfigError:
        return self if self.source else ConfigError(self.message, key=self.key, source=source)


def show(value: Any) -> str:
    """A value as the user wrote it in YAML."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)


def invalid(key: str, value: Any, allowed: str, why: str = "not allowed") -> ConfigError:
    return ConfigError(f"{key} = {show(value)}: {why}; allowed: {allowed}", key=key)


def check(ok: bool, key: str, value: Any, allowed: str, why: str = "not allowed") -> None:
    if not ok:
        raise invalid(key, value, allowed, why)


def check_choice(key: str, value: Any, choices: typing.Iterable[str]) -> None:
    choices = tuple(choices)
    check(value in choices, key, value, ", ".join(map(repr, choices)), "unknown value")


def check_at_least(key: str, value: int, low: int) -> None:
    check(value >= low, key, value, f"an integer >= {low}", "out of range")


def key_path(obj: Any, name: str) -> str:
    return f"{obj.SECTION}.{name}" if obj.SECTION else name


@functools.cache
def _field_types(cls: type) -> dict[str, tuple[type, bool]]:
    """Field name -> (base type, accepts None), from the annotations."""
    out = {}
    for name, hint in typing.get_type_hints(cls).items():
        args = typing.get_args(hint)
        base = next((a for a in args if a is not type(None)), hint)
        out[name] = (base, type(None) in args)
    return out


_TYPE_NAMES = {bool: "true or false", int: "an integer", float: "a number", str: "a string", tuple: "a mapping"}


def check_types(obj: Any) -> None:
    """Reject wrong field types; bool is not an int, an int is accepted (and stored) as a float."""
    for f in dataclasses.fields(obj):
        base, optional = _field_types(type(obj))[f.name]
        value = getattr(obj, f.name)
        if value is None and optional:
            continue
        if base is float and isinstance(value, int) and not isinstance(value, bool):
            object.__setattr__(obj, f.name, float(value))
            continue
        ok = isinstance(value, base) and (base is bool or not isinstance(value, bool))
        if ok:
            continue
        allowed = _TYPE_NAMES.get(base, f"a {base.__name__}") + (" or null" if optional else "")
        why = f"wrong type {type(value).__name__}"
        if isinstance(value, bool) and base in (int, float):
            why += " (true/false is not a number)"
        if isinstance(value, bool) and base is str:
            why += " (YAML reads yes/no/on/off as booleans; quote the string)"
        if base is float and isinstance(value, str) and _parses_as_float(value):
            why += f" (YAML 1.1 reads {value} as a string; write it with a dot, e.g. 1.0e-6)"
        raise invalid(key_path(obj, f.name), value, allowed, why)


def _parses_as_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
