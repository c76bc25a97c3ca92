"""The field types of a plugin's declarations, checked when a start-up hook returns them: a value of the wrong kind
(a str where a tuple or a mapping is declared: `TokenTarget(codes="owner")`) is refused at start-up and by
`check-config`, naming the declaration, the field and the type it declares, rather than failing every request that
reaches it (an `IN` over the letters of "owner").

The check follows each declaration dataclass's own annotations (their source text is what the message shows) into
the declarations it holds (a provider's search parameters, their targets, its tenancy...). It is deliberately
shallow where a type cannot be told cheaply: a callable is only checked to be callable, an SQL expression to be one
(any SQLAlchemy clause), `Any` accepts everything, and a declared tuple accepts any sequence but text (a list works
as well as a tuple)."""
from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Callable, Mapping, Sequence, Set
from types import NoneType, UnionType
from typing import Any, Literal, Union

from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.selectable import FromClause, Select

SQL = (ColumnElement, FromClause, Select)  # declared as one of these: any SQLAlchemy clause is taken
MAX_ITEMS = 200  # the items of one container checked (a declaration's tuples are short; a mapping may be long)


def problem(declaration: object) -> str | None:
    """What is mistyped in `declaration` (a dataclass), as `<where>: <field> must be <type>, got <value>`, or None."""
    return _dataclass(declaration, _label(declaration), frozenset())


@functools.cache
def _hints(cls: type) -> dict[str, Any] | None:
    """The dataclass's resolved annotations (None when they cannot be resolved: then it is not checked)."""
    try:
        return typing.get_type_hints(cls)
    except Exception:  # noqa: BLE001 - a name only a type checker sees: that class is left unchecked
        return None


def _label(value: object) -> str:
    """How a declaration is named in a message: its class and its name when it has one."""
    name = getattr(value, "name", None) or getattr(value, "resource_type", None)
    return f"{type(value).__name__} {name!r}" if isinstance(name, str) else type(value).__name__


def _dataclass(value: object, where: str, seen: frozenset[int]) -> str | None:
    cls = type(value)
    hints = _hints(cls)
    if hints is None or id(value) in seen:
        return None
    inside = seen | {id(value)}
    for field in dataclasses.fields(value):  # type: ignore[arg-type]
        if not field.init or field.name not in hints:
            continue
        found = _value(getattr(value, field.name), hints[field.name], f"{where}.{field.name}", inside)
        if found is not None:
            shown = field.type if isinstance(field.type, str) else getattr(field.type, "__name__", str(field.type))
            return found.replace("\0EXPECTED", shown)  # a nested declaration's message is already whole
    return None


def _value(value: Any, hint: Any, where: str, seen: frozenset[int]) -> str | None:
    """None when `value` fits `hint`; else the message (`\0EXPECTED` standing for the field's declared type when the
    mismatch is the field's own, a nested declaration's message as it is)."""
    if _fits(value, hint):
        return _inner(value, hint, where, seen)
    return f"{where} must be \0EXPECTED, got {_shown(value)}"


def _shown(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 60 else text[:57] + '...'}"


def _fits(value: Any, hint: Any) -> bool:
    """Whether `value` is of the kind `hint` declares, at the top level (its items are `_inner`'s)."""
    if hint is Any or hint is object:
        return True
    origin = typing.get_origin(hint)
    if origin in (Union, UnionType):
        return any(_fits(value, arm) for arm in typing.get_args(hint))
    if hint is None or hint is NoneType:
        return value is None
    if origin is Literal:
        return value in typing.get_args(hint)
    if isinstance(hint, typing.TypeVar):
        return True
    kind = origin if origin is not None else hint
    if not isinstance(kind, type):
        return True  # a form this check does not know: accepted
    if issubclass(kind, SQL):
        return isinstance(value, ClauseElement)
    if kind is tuple or (issubclass(kind, Sequence) and kind not in (str, bytes)):
        return isinstance(value, Sequence) and not isinstance(value, str | bytes)
    if kind is frozenset or issubclass(kind, Set):
        return isinstance(value, Set)
    if issubclass(kind, Mapping):
        return isinstance(value, Mapping)
    if kind is Callable:  # typing.Callable[...] and collections.abc.Callable[...] alike
        return callable(value)
    if kind is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


def _inner(value: Any, hint: Any, where: str, seen: frozenset[int]) -> str | None:
    """The items of a container that fits, and the fields of a nested declaration."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _dataclass(value, f"{where} ({_label(value)})", seen) if _declaration(value) else None
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (Union, UnionType):
        arm = next((a for a in args if _fits(value, a)), None)
        return None if arm is None else _inner(value, arm, where, seen)
    if not args or isinstance(value, str | bytes):
        return None
    if origin is tuple or (isinstance(origin, type) and issubclass(origin, Sequence | Set)):
        items = list(value)[:MAX_ITEMS]
        for n, item in enumerate(items):
            item_hint = args[0] if origin is not tuple or (len(args) == 2 and args[1] is Ellipsis) else (
                args[n] if n < len(args) else Any)
            found = _item(item, item_hint, f"{where}[{n}]", seen)
            if found is not None:
                return found
    elif isinstance(origin, type) and issubclass(origin, Mapping) and len(args) == 2:
        for key, item in list(value.items())[:MAX_ITEMS]:
            found = _item(key, args[0], f"{where} key {key!r}", seen) or \
                _item(item, args[1], f"{where}[{key!r}]", seen)
            if found is not None:
                return found
    return None


def _item(value: Any, hint: Any, where: str, seen: frozenset[int]) -> str | None:
    """An item of a container: its own message names the type it should be."""
    if _fits(value, hint):
        return _inner(value, hint, where, seen)
    return f"{where} must be {_named(hint)}, got {_shown(value)}"


def _named(hint: Any) -> str:
    """A type as its annotation reads (`tuple[Any, ...]`, `str | None`, `SearchParam`)."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (Union, UnionType):
        return " | ".join(_named(arm) for arm in args)
    if hint is None or hint is NoneType:
        return "None"
    if hint is Any:
        return "Any"
    if hint is Ellipsis:
        return "..."
    if origin is Literal:
        return " | ".join(map(repr, args))
    if origin is not None:
        return f"{getattr(origin, '__name__', str(origin))}[{', '.join(_named(a) for a in args)}]"
    return getattr(hint, "__name__", str(hint))


def _declaration(value: object) -> bool:
    """A dataclass of the plugin surface (the engine's declarations, a plugin's own not): checked field by field."""
    return type(value).__module__.startswith("server.")
