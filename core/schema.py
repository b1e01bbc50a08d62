"""What a stored result must hold before a view reads it: a small schema per analysis, checked on every result the
results cache or an example store would serve (:func:`core.runner.lookup`).

A schema names every field its view reads, with the value's type, and says where ``None`` is allowed (``Opt``).
Types: :data:`Num` (a finite int or float, not a bool), :data:`Int`, :data:`Str`, :data:`Bool`, :data:`Anything`
(any JSON value), ``Opt(t)``, ``ListOf(t, min=0)``, ``DictOf(t)`` (text keys, any names) and ``Rec({name: t})``
(those fields, others allowed), ``Holds(t, rule)`` (``t`` and a relation between its fields, e.g. a sum that must
equal a logit). :func:`problem` says what is wrong with a value, or None; :func:`paths` lists the
fields a schema names (``rows[].name``, ``methods.*.relevance``), which the tests compare with the fields a view
really reads. A schema lives on its analysis (:attr:`core.analyses.Analysis.schema`; the values in each paper's
``schemas.py``): this module holds the types only, and knows no analysis.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any


class Schema:
    """A type of JSON value; see the module doc."""

    def problem(self, value, where: str) -> str | None:  # pragma: no cover - every subclass says
        raise NotImplementedError

    def paths(self, prefix: str) -> set[str]:
        return set()


@dataclass(frozen=True)
class _Scalar(Schema):
    name: str
    accepts: Any

    def problem(self, value, where: str) -> str | None:
        return None if self.accepts(value) else f"{where} is {_shown(value)}, not {self.name}"


def _shown(value) -> str:
    return "None" if value is None else f"a {type(value).__name__} ({str(value)[:40]})"


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


Num = _Scalar("a finite number", _number)
Int = _Scalar("a whole number", lambda v: isinstance(v, int) and not isinstance(v, bool))
Str = _Scalar("text", lambda v: isinstance(v, str))
Bool = _Scalar("true or false", lambda v: isinstance(v, bool))
Anything = _Scalar("a value", lambda v: True)


@dataclass(frozen=True)
class Opt(Schema):
    """``None`` or ``inner``."""

    inner: Schema

    def problem(self, value, where: str) -> str | None:
        return None if value is None else self.inner.problem(value, where)

    def paths(self, prefix: str) -> set[str]:
        return self.inner.paths(prefix)


@dataclass(frozen=True)
class ListOf(Schema):
    """A list of ``inner`` values, at least ``min`` of them."""

    inner: Schema
    min: int = 0

    def problem(self, value, where: str) -> str | None:
        if not isinstance(value, list):
            return f"{where} is {_shown(value)}, not a list"
        if len(value) < self.min:
            return f"{where} has {len(value)} items, fewer than {self.min}"
        for i, item in enumerate(value):
            found = self.inner.problem(item, f"{where}[{i}]")
            if found:
                return found
        return None

    def paths(self, prefix: str) -> set[str]:
        return self.inner.paths(f"{prefix}[]")


@dataclass(frozen=True)
class DictOf(Schema):
    """A mapping from any text keys to ``inner`` values (``min``: at least that many)."""

    inner: Schema
    min: int = 0

    def problem(self, value, where: str) -> str | None:
        if not isinstance(value, dict):
            return f"{where} is {_shown(value)}, not a mapping"
        if len(value) < self.min:
            return f"{where} has {len(value)} entries, fewer than {self.min}"
        for k, item in value.items():
            found = self.inner.problem(item, f"{where}.{k}")
            if found:
                return found
        return None

    def paths(self, prefix: str) -> set[str]:
        return {f"{prefix}.*"} | self.inner.paths(f"{prefix}.*")


@dataclass(frozen=True)
class Rec(Schema):
    """A mapping with (at least) these ``fields``, each of its type; ``optional`` fields may be absent, but when there
    are of their type. ``same_length``: groups of list fields whose lengths must agree (a view zips them)."""

    fields: dict = field(default_factory=dict)
    optional: dict = field(default_factory=dict)
    same_length: tuple = ()

    def problem(self, value, where: str) -> str | None:
        if not isinstance(value, dict):
            return f"{where} is {_shown(value)}, not a record"
        for name, kind in self.fields.items():
            if name not in value:
                return f"{where}.{name} is missing"
        for name, kind in [*self.fields.items(), *self.optional.items()]:
            found = kind.problem(value[name], f"{where}.{name}") if name in value else None
            if found:
                return found
        for group in self.same_length:
            lengths = {n: len(value[n]) for n in group}
            if len(set(lengths.values())) > 1:
                return f"{where}: {', '.join(f'{n} has {k}' for n, k in lengths.items())} items (they must agree)"
        return None

    def paths(self, prefix: str) -> set[str]:
        out = set()
        for name, kind in [*self.fields.items(), *self.optional.items()]:
            path = f"{prefix}.{name}" if prefix else name
            out |= {path} | kind.paths(path)
        return out


@dataclass(frozen=True)
class Holds(Schema):
    """``inner``, and a relation between its fields that the result must keep: ``rule(value)`` says what is wrong
    (e.g. MambaLRP's relevances no longer summing to its logit: a value edited and sealed again), or None."""

    inner: Schema
    rule: Any

    def problem(self, value, where: str) -> str | None:
        found = self.inner.problem(value, where)
        return found or (None if (broken := self.rule(value)) is None else f"{where}: {broken}")

    def paths(self, prefix: str) -> set[str]:
        return self.inner.paths(prefix)


def close(a: float, b: float, rel: float = 1e-4) -> bool:
    """Whether two stored numbers agree to ``rel`` of the larger of them and 1."""
    return abs(a - b) <= rel * max(1.0, abs(a), abs(b))


def problem(schema: Schema, value) -> str | None:
    """What is wrong with ``value`` for ``schema`` (the first problem, with where it is), or None."""
    return schema.problem(value, "data")


def paths(schema: Schema) -> set[str]:
    """The fields ``schema`` names, as ``a.b``, ``rows[].x``, ``methods.*.y``."""
    return schema.paths("")


__all__ = ["Schema", "Num", "Int", "Str", "Bool", "Anything", "Opt", "ListOf", "DictOf", "Rec", "problem", "paths",
           "Holds", "close"]
