"""`token` parameters: `[system|]code`, `system|`, `|code`; :not, :text (where the target has a text column)."""
from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from sqlalchemy import ColumnElement, and_, false, true

from server.errors import InvalidValue
from server.params.ids import coerce_id
from server.params.types.base import (CompileContext, Form, Match, Through, compiled, compiled_all,
                                      index_range, one_of, one_of_build, one_of_form, successor, text_index_expression, via)


@dataclass(frozen=True)
class TokenTarget:
    code: ColumnElement[Any]
    system: str | ColumnElement[Any] | None = None
    codes: Mapping[str, tuple[Any, ...]] | None = None  # FHIR code -> stored values; closes the value set
    prefix: str = ""  # a value written "<prefix><stored>" (urn:uuid:...) also matches
    through: Through | None = None
    text: ColumnElement[Any] | None = None  # what :text matches (case-insensitive starts-with)


@dataclass(frozen=True)
class TokenValue:
    raw: str
    system: str | None  # None: any system; "": explicitly no system ("|code")
    code: str | None    # None: any code ("system|")


@dataclass(frozen=True)
class TextValue:
    """`:text`: the start of the token's display text."""

    raw: str


class TokenType:
    name: ClassVar[str] = "token"
    target: ClassVar[type] = TokenTarget
    split: ClassVar[bool] = True

    def modifiers(self, targets: Sequence[TokenTarget]) -> frozenset[str]:
        has_text = any(t.text is not None for t in targets)
        return frozenset({"not", "missing", *(["text"] if has_text else [])})

    def parse(self, name: str, targets: Sequence[TokenTarget], modifier: str | None,
              raw: str) -> TokenValue | TextValue:
        if modifier == "text":
            return TextValue(raw)
        if "|" in raw:
            system, _, code = raw.partition("|")
            value = TokenValue(raw, system, code or None)
        else:
            value = TokenValue(raw, None, raw)
        if value.system == "" and value.code is None:
            raise InvalidValue(f"{name}: '|' alone is not a token")
        if value.code is not None and targets and all(t.codes is not None for t in targets):
            allowed = sorted({code for t in targets if t.codes for code in t.codes})
            if value.code not in allowed:
                raise InvalidValue(f"{name}: {value.code!r} is not one of the allowed values {', '.join(allowed)}")
        return value

    def compile(self, target: TokenTarget, modifier: str | None, value: TokenValue | TextValue,
                at: CompileContext) -> Match | None:
        return compiled(self, target, modifier, value)

    def form(self, target: TokenTarget, modifier: str | None, value: TokenValue | TextValue) -> Form:
        """Text: the start of the lower-cased text, as a range ("text", unbounded?) of the lower-cased start and its
        successor; a token: its system's form, then any code ("present"), a code of a closed value set (which
        stored values it names is decided here), a code the column cannot hold ("false"), or the stored code."""
        if isinstance(value, TextValue):
            if target.text is None:
                return Form(None)
            lowered = value.raw.lower()
            above = successor(lowered)
            return Form(("text", above is None), (lowered,) if above is None else (lowered, above))
        system = _system_form(target, value.system)
        if value.code is None:
            return Form(("present", system.key), system.values)
        if target.codes is not None:
            return Form(("codes", system.key, value.code if target.codes.get(value.code) else None), system.values)
        typed = _stored(target, value.code)
        if typed is None:
            return Form(("false", system.key), system.values)
        return Form(("code", system.key), (*system.values, typed))

    def build(self, target: TokenTarget, modifier: str | None, key: Hashable,
              binds: Sequence[ColumnElement[Any]]) -> Match | None:
        if key is None:  # :text on a target without text
            return None
        assert isinstance(key, tuple)
        if key[0] == "text":
            assert target.text is not None
            column = text_index_expression(target.text)
            return via(target.through, index_range(column, binds[0], None if key[1] else binds[1]))
        kind, system_key = key[0], key[1]
        system, rest = _system_build(target, system_key, binds)
        if kind == "present":
            code: ColumnElement[bool] = target.code.is_not(None)
        elif kind == "codes":
            code = _codes(target, key[2])
        elif kind == "false":
            code = false()
        else:
            code = target.code == rest[0]
        return via(target.through, and_(system, code))

    def present(self, target: TokenTarget, at: CompileContext) -> Match:
        return via(target.through, target.code.is_not(None))

    def compile_all(self, target: TokenTarget, modifier: str | None, values: Sequence[TokenValue | TextValue],
                    at: CompileContext) -> list[Match]:
        """What the OR of `values` matches in `target`: the codes of one system as one `IN` (a look-up of thousands
        of codes compiles in milliseconds, not one comparison each), the others each as `compile` does."""
        return compiled_all(self, target, modifier, values)

    def form_all(self, target: TokenTarget, modifier: str | None, values: Sequence[TokenValue | TextValue]) -> Form:
        """The codes grouped by system (each group: its system's form and `one_of`'s), then the other values' forms
        (a code the column cannot hold matches nothing here: left out), each with the number of values it binds."""
        grouped: dict[str | None, list[Any]] = {}
        singles: list[Form] = []
        for value in values:
            if isinstance(value, TokenValue) and value.code is not None and target.codes is None:
                typed = _stored(target, value.code)
                if typed is not None:
                    grouped.setdefault(value.system, []).append(typed)
                continue
            singles.append(self.form(target, modifier, value))
        groups = [(_system_form(target, system), one_of_form(target.code, codes)) for system, codes in grouped.items()]
        return Form((tuple((system.key, len(system.values), codes.key) for system, codes in groups),
                     tuple((single.key, len(single.values)) for single in singles)),
                    (*(v for system, codes in groups for v in (*system.values, *codes.values)),
                     *(v for single in singles for v in single.values)))

    def build_all(self, target: TokenTarget, modifier: str | None, key: Hashable,
                  binds: Sequence[ColumnElement[Any]]) -> list[Match]:
        assert isinstance(key, tuple)
        groups, singles = key
        out: list[Match] = []
        at = 0
        for system_key, taken, codes_key in groups:
            system, _ = _system_build(target, system_key, binds[at:at + taken])
            out.append(via(target.through, and_(system, one_of_build(target.code, codes_key, binds[at + taken]))))
            at += taken + 1
        for single_key, taken in singles:
            if (match := self.build(target, modifier, single_key, binds[at:at + taken])) is not None:
                out.append(match)
            at += taken
        return out


def _system_form(target: TokenTarget, system: str | None) -> Form:
    """What a value's system requires of `target`: nothing (any system, or the target's own), nothing matches
    (another system), or its system column to hold it."""
    if system is None:
        return Form("any")
    if target.system is None:
        return Form("any" if system == "" else "none")
    if isinstance(target.system, str):
        return Form("any" if target.system == system else "none")
    return Form("column", (system,))


def _system_build(target: TokenTarget, key: Hashable,
                  binds: Sequence[ColumnElement[Any]]) -> tuple[ColumnElement[bool], Sequence[ColumnElement[Any]]]:
    """The system's condition (its form `key`), and the binds after those it takes."""
    if key == "any":
        return true(), binds
    if key == "none":
        return false(), binds
    assert isinstance(target.system, ColumnElement)
    return target.system == binds[0], binds[1:]


def shown(target: TokenTarget) -> tuple[ColumnElement[Any], ...]:
    """What `shows` reads of a row for `target`: its stored code, and its system where a column holds it."""
    return (target.code, target.system) if isinstance(target.system, ColumnElement) else (target.code,)


def shows(target: TokenTarget, held: Sequence[Any], system: str | None) -> tuple[str, ...]:
    """The token values (`value`, or `system|value` when `system` is given) that a row holding `held` (what `shown`
    selects) matches through `target`, as they are written: its code, and with the target's prefix (urn:uuid:...);
    the inverse of `form` (`_system_form` and `_stored`) for a code. () for a closed value set (its FHIR codes are
    not what is stored). A value matched by another spelling (a number with leading zeros) is not among them: a
    look-up's batch (server.engine.lookup) asks for it again."""
    if target.codes is not None or held[0] is None:
        return ()
    if system is not None and (held[1] if isinstance(target.system, ColumnElement) else target.system) != system:
        return ()
    code = str(held[0])
    return (code, target.prefix + code) if target.prefix else (code,)


def _codes(target: TokenTarget, code: str | None) -> ColumnElement[bool]:
    """The stored values a code of a closed value set names (None: it names none), constants of its form."""
    stored = target.codes.get(code) if target.codes is not None and code is not None else None
    return one_of(target.code, stored) if stored else false()


def _stored(target: TokenTarget, code: str) -> Any:
    """The code as the column holds it (without the target's prefix), None when the column cannot hold it."""
    return coerce_id(target.code, code[len(target.prefix):] if target.prefix and code.startswith(target.prefix)
                     else code)


TYPE = TokenType()
