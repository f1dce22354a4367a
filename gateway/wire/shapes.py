"""Body shapes written once: each declaration is both the run-time check and the JSON Schema.

A format declares what Sieve relies on in a body (``gateway.wire.chat``,
``gateway.wire.formats.messages_check``, ``...responses_check``) with the shapes
below. ``compiled(shape, limits)`` turns a declaration into a check of plain
dicts (a 400 naming the field, ``messages[3].tool_calls[0].function.arguments
must be a string (JSON text)``), built once per :class:`WireLimits` as a tree of
closures, so a request pays for the fields it has and nothing else; and
``components(shape)`` gives the JSON Schema the OpenAPI document serves
(``gateway.api.openapi``). Lenient on the wire: unknown fields pass through,
and a field Sieve does not check is described, not constrained::

    BODY = Record("Thing", fields=(Field("model", Text(nonblank=True), required=True),))
    compiled(BODY, WireLimits())(body)        # None, or InvalidRequest (400) naming the field
    components(BODY)                          # {"Thing": {"type": "object", ...}}

The single values are here; arrays, objects, unions and variants are in
:mod:`gateway.wire.structures`. A check returns the characters of text it counted (``counts``), which the message
and request limits bound. The limits are the defaults in the document (its
descriptions say so) and the configured ones at run time.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable

from gateway.errors import InvalidRequest
from gateway.wire.limits import WireLimits

# A field's place, built only when an error names it: (parent, key) down from the body (None).
Path = tuple[Any, str | int] | None
Check = Callable[[Any, Path], int]


def render(path: Path) -> str:
    keys: list[str | int] = []
    while path is not None:
        path, key = path
        keys.append(key)
    out = ""
    for key in reversed(keys):
        out += f"[{key}]" if isinstance(key, int) else (f".{key}" if out else key)
    return out


def fail(path: Path, says: str, code: str | None = None) -> None:
    """A 400 naming the field: a top-level one in quotes (``'model' is required``), a nested one by its path."""
    where = render(path)
    shown = where if "." in where or "[" in where else f"'{where}'"
    raise InvalidRequest(f"{shown} {says}", param=where, code=code)


class Shape(ABC):
    """A JSON value Sieve checks; ``kind``: the Python types it takes (what ``Either`` picks it by)."""

    kind: Any = object
    name: str | None = None
    doc: str = ""

    def schema(self, defs: dict[str, Any]) -> dict[str, Any]:
        """The JSON Schema; a named shape goes into ``defs`` and is referred to."""
        if self.name is not None and self.name in defs:
            return {"$ref": f"#/components/schemas/{self.name}"}
        if self.name is not None:
            defs[self.name] = {}  # a shape that holds itself (a tool result's blocks) refers to it
        own = self.own_schema(defs)
        if self.doc:
            own["description"] = self.doc
        if self.name is None:
            return own
        defs[self.name] = own
        return {"$ref": f"#/components/schemas/{self.name}"}

    @abstractmethod
    def own_schema(self, defs: dict[str, Any]) -> dict[str, Any]:
        """The schema of this shape itself, before its name and description are applied."""

    @abstractmethod
    def compile(self, limits: WireLimits) -> Check | None:
        """The check (None: nothing to check)."""

    def inline(self, at: str, env: dict[str, Any], limits: WireLimits) -> list[str] | None:
        """Lines that check ``x`` in place, in the code an object's check is built from
        (:class:`gateway.wire.structures.Record`), adding its text to ``chars``; ``at``: the
        expression of its place, only evaluated for an error. None: called, not inlined."""
        return None


@dataclass(frozen=True, eq=False)
class Anything(Shape):
    """Any value, passed through; ``counts``: a string here is text the limits count."""

    doc: str = ""
    counts: bool = False

    def own_schema(self, defs: dict[str, Any]) -> dict[str, Any]:
        return {}

    def compile(self, limits: WireLimits) -> Check | None:
        return _length_if_text if self.counts else None

    def inline(self, at: str, env: dict[str, Any], limits: WireLimits) -> list[str] | None:
        return ["if isinstance(x, str): chars += len(x)"] if self.counts else []


def _length_if_text(value: Any, path: Path) -> int:
    return len(value) if isinstance(value, str) else 0


@dataclass(frozen=True, eq=False)
class Const(Shape):
    """The value that tags a variant of ``Tagged`` (checked by it)."""

    value: str

    def own_schema(self, defs: dict[str, Any]) -> dict[str, Any]:
        return {"const": self.value, "type": "string"}

    def compile(self, limits: WireLimits) -> Check | None:
        return None

    def inline(self, at: str, env: dict[str, Any], limits: WireLimits) -> list[str] | None:
        return []


@dataclass(frozen=True, eq=False)
class Text(Shape):
    doc: str = ""
    counts: bool = False
    nonblank: bool = False
    max_length: int | None = None
    # Stated in the document only: what looks the value up checks it (a stored response's id: 404).
    pattern: str | None = None
    says: str = "must be a string"
    total: bool = False  # the whole history as one string: bounded by ``max_request_chars``
    kind: Any = str

    def own_schema(self, defs: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "string"}
        if self.nonblank:
            out["pattern"] = r"\S"
        if self.pattern is not None:
            out["pattern"] = self.pattern
        if self.max_length is not None:
            out["maxLength"] = self.max_length
        return out

    def compile(self, limits: WireLimits) -> Check | None:
        says, counts, nonblank = self.says, self.counts, self.nonblank
        total = limits.max_request_chars if self.total else None

        def check(value: Any, path: Path) -> int:
            if not isinstance(value, str) or (nonblank and not value.strip()):
                fail(path, says)
            if total is not None and len(value) > total:
                fail(path, f"have {len(value)} characters of text together; the limit is {total}",
                     "messages_too_large")
            return len(value) if counts else 0
        return check

    def inline(self, at: str, env: dict[str, Any], limits: WireLimits) -> list[str] | None:
        if self.total:
            return None
        blank = " or not x.strip()" if self.nonblank else ""
        return [f"if not isinstance(x, str){blank}: fail({at}, {self.says!r})",
                *(["chars += len(x)"] if self.counts else [])]


@dataclass(frozen=True, eq=False)
class Flag(Shape):
    doc: str = ""
    kind: Any = bool

    def own_schema(self, defs: dict[str, Any]) -> dict[str, Any]:
        return {"type": "boolean"}

    def compile(self, limits: WireLimits) -> Check | None:
        def check(value: Any, path: Path) -> int:
            if not isinstance(value, bool):
                fail(path, "must be a boolean")
            return 0
        return check

    def inline(self, at: str, env: dict[str, Any], limits: WireLimits) -> list[str] | None:
        return [f"if not isinstance(x, bool): fail({at}, 'must be a boolean')"]


@dataclass(frozen=True, eq=False)
class Whole(Shape):
    """An integer in ``[low, high]``; JSON has one number type, so ``100.0`` is the integer 100
    (JSON Schema agrees) and is forwarded as sent; ``100.5`` and ``true`` are not integers."""

    low: int
    high: int
    says: str
    doc: str = ""

    def own_schema(self, defs: dict[str, Any]) -> dict[str, Any]:
        return {"type": "integer", "minimum": self.low, "maximum": self.high}

    def compile(self, limits: WireLimits) -> Check | None:
        low, high, says = self.low, self.high, self.says

        def check(value: Any, path: Path) -> int:
            if not is_whole_in(value, low, high):
                fail(path, says)
            return 0
        return check

    def inline(self, at: str, env: dict[str, Any], limits: WireLimits) -> list[str] | None:
        return [f"if not is_whole_in(x, {self.low!r}, {self.high!r}): fail({at}, {self.says!r})"]


def is_whole_in(value: Any, low: int, high: int) -> bool:
    if isinstance(value, float):
        return value.is_integer() and low <= value <= high
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


@dataclass(frozen=True, eq=False)
class Null(Shape):
    """Only null (or nothing): a field that belongs to other variants (``says`` where it does)."""

    says: str
    doc: str = ""

    def own_schema(self, defs: dict[str, Any]) -> dict[str, Any]:
        return {"type": "null"}

    def compile(self, limits: WireLimits) -> Check | None:
        says = self.says

        def check(value: Any, path: Path) -> int:
            fail(path, says)
            return 0
        return check

    def inline(self, at: str, env: dict[str, Any], limits: WireLimits) -> list[str] | None:
        return [f"fail({at}, {self.says!r})"]


@dataclass(frozen=True, eq=False)
class Choice(Shape):
    """One of a few strings (a turn's ``role``)."""

    values: tuple[str, ...]
    doc: str = ""
    kind: Any = str

    @property
    def says(self) -> str:
        return f"must be one of {', '.join(self.values)}"

    def own_schema(self, defs: dict[str, Any]) -> dict[str, Any]:
        return {"type": "string", "enum": list(self.values)}

    def compile(self, limits: WireLimits) -> Check | None:
        values, says = frozenset(self.values), self.says

        def check(value: Any, path: Path) -> int:
            if not isinstance(value, str) or value not in values:
                fail(path, f"{says}; got {value!r}")
            return 0
        return check

    def inline(self, at: str, env: dict[str, Any], limits: WireLimits) -> list[str] | None:
        values = "{" + ", ".join(map(repr, self.values)) + "}"  # a constant set, made once by the compiler
        return [f"if not isinstance(x, str) or x not in {values}: fail({at}, {self.says!r} + '; got ' + repr(x))"]


def nothing(value: Any, path: Path) -> int:
    return 0


@lru_cache(maxsize=64)
def check_of(shape: Shape, limits: WireLimits) -> Check:
    """The check of ``shape`` (with its place) under ``limits``, built once per pair."""
    return shape.compile(limits) or nothing


@lru_cache(maxsize=32)
def compiled(shape: Shape, limits: WireLimits) -> Callable[[Any], int]:
    """The check of a body of ``shape`` under ``limits`` (built once per pair)."""
    check = check_of(shape, limits)
    return lambda body: check(body, None)


def components(*shapes: Shape) -> dict[str, Any]:
    """The named JSON Schemas of ``shapes`` and of every named shape inside them."""
    defs: dict[str, Any] = {}
    for shape in shapes:
        shape.schema(defs)
    return defs


__all__ = ["Anything", "Check", "Choice", "Const", "Flag", "Null", "Path", "Shape", "Text", "Whole", "check_of", "compiled",
           "components", "fail", "is_whole_in", "nothing", "render"]
