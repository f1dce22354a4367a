"""Shapes made of shapes: arrays, unions, objects and their fields, variants by a tag.

The vocabulary's single values and how a declaration is compiled and described are in
:mod:`gateway.wire.shapes`::

    MESSAGE = Tagged("role", {"user": Record("UserMessage", (Field("content", Text(counts=True), required=True),))})
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from gateway.errors import InvalidRequest
from gateway.wire.limits import WireLimits
from gateway.wire.shapes import Check, Path, Shape, Text, check_of, fail, is_whole_in, nothing, render


@dataclass(frozen=True, eq=False)
class Later(Shape):
    """A named shape declared further down (a tool result holds blocks): checked through it."""

    target: Callable[[], Shape]
    kind: Any = object

    def own_schema(self, defs: dict[str, Any]) -> dict[str, Any]:
        return self.target().schema(defs)  # unnamed and undescribed: the target's schema as it is

    def compile(self, limits: WireLimits) -> Check | None:
        target, resolved = self.target, []

        def check(value: Any, path: Path) -> int:
            if not resolved:  # on first use: the shape refers to itself through here
                resolved.append(check_of(target(), limits))
            return resolved[0](value, path)
        return check


@dataclass(frozen=True, eq=False)
class Many(Shape):
    """An array of ``item``. ``limit``: the :class:`WireLimits` field that bounds its length
    (``noun`` and ``code`` name the excess); ``total``: its text together is bounded by
    ``max_request_chars``."""

    item: Shape
    says: str = "must be an array"
    nonempty: bool = False
    limit: str | None = None
    noun: str = "items"
    code: str | None = None
    total: bool = False
    doc: str = ""
    name: str | None = None
    kind: Any = list

    def own_schema(self, defs: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "array", "items": self.item.schema(defs)}
        if self.nonempty:
            out["minItems"] = 1
        return out

    def compile(self, limits: WireLimits) -> Check | None:
        # A shape holding itself (``Later``) is resolved on the first array checked, then called directly.
        later = self.item.target if isinstance(self.item, Later) else None
        items: list[Check] = [] if later is not None else [self.item.compile(limits) or nothing]
        says, nonempty, noun, code = self.says, self.nonempty, self.noun, self.code
        cap = getattr(limits, self.limit) if self.limit else None
        total = limits.max_request_chars if self.total else None

        def check(value: Any, path: Path) -> int:
            if not isinstance(value, list) or (nonempty and not value):
                fail(path, says)
            if cap is not None and len(value) > cap:
                fail(path, f"has {len(value)} {noun}; the limit is {cap}", code)
            if not items:
                items.append(check_of(later(), limits))  # type: ignore[misc]
            each, chars = items[0], 0
            for i, element in enumerate(value):
                chars += each(element, (path, i))
            if total is not None and chars > total:
                fail(path, f"have {chars} characters of text together; the limit is {total}", "messages_too_large")
            return chars
        return check


@dataclass(frozen=True, eq=False)
class Either(Shape):
    """One of ``shapes``, picked by the value's type (a string, an array, an object: no two of
    them take the same type), else a 400 that says what it may be."""

    shapes: tuple[Shape, ...]
    says: str
    doc: str = ""
    name: str | None = None

    @property
    def kind(self) -> Any:  # type: ignore[override]
        return tuple(t for s in self.shapes for t in (s.kind if isinstance(s.kind, tuple) else (s.kind,)))

    def own_schema(self, defs: dict[str, Any]) -> dict[str, Any]:
        return {"anyOf": [shape.schema(defs) for shape in self.shapes]}

    def compile(self, limits: WireLimits) -> Check | None:
        choices = [(shape.kind, shape.compile(limits) or nothing) for shape in self.shapes]
        says = self.says

        def check(value: Any, path: Path) -> int:
            for kind, chosen in choices:
                if isinstance(value, kind):
                    return chosen(value, path)
            fail(path, says)
            return 0
        return check

    def inline(self, at: str, env: dict[str, Any], limits: WireLimits) -> list[str] | None:
        # The usual case, a string, in place; any other value through the whole check.
        text = next((s for s in self.shapes if isinstance(s, Text)), None)
        if text is None or text.total or text.nonblank or self.shapes[0] is not text:
            return None
        lines = ["if isinstance(x, str): chars += len(x)" if text.counts else "if isinstance(x, str): pass"]
        for shape in self.shapes[1:]:
            name = f"choice{len(env)}"
            env[name], env[name + "_kind"] = shape.compile(limits) or nothing, shape.kind
            lines.append(f"elif isinstance(x, {name}_kind): chars += {name}(x, {at})")
        return [*lines, f"else: fail({at}, {self.says!r})"]


@dataclass(frozen=True, slots=True)
class Field:
    """A field of a ``Record``. Null and absent are alike (the wire's ``body.get``) unless
    ``null_checked``: a required field missing says ``missing``."""

    name: str
    shape: Shape
    required: bool = False
    missing: str = "is required"
    doc: str = ""
    null_checked: bool = False
    unless: tuple[str, ...] = ()  # required unless one of these fields is there (with ``required``)

    def schema(self, defs: dict[str, Any]) -> dict[str, Any]:
        own = self.shape.schema(defs)
        if (not self.required or self.unless) and not self.null_checked and own and own.get("type") != "null":
            own = {"anyOf": [own, {"type": "null"}]}
        return {**own, "description": self.doc} if self.doc else own


@dataclass(frozen=True, eq=False)
class Record(Shape):
    """An object with ``fields`` (others pass through). ``char_limit``: its text is bounded by
    ``max_message_chars``; ``says``: what a non-object is told (the body itself: no field named)."""

    name: str | None = None
    fields: tuple[Field, ...] = ()
    doc: str = ""
    says: str = "must be an object"
    char_limit: bool = False
    schema_extra: Callable[[dict[str, Any]], None] | None = None
    kind: Any = dict

    def own_schema(self, defs: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "object", "properties": {f.name: f.schema(defs) for f in self.fields},
                               "additionalProperties": True}
        required = [f.name for f in self.fields if f.required and not f.unless]
        if required:
            out["required"] = required
        for f in self.fields:
            if f.required and f.unless:  # one of them at least, and not null
                out["anyOf"] = [{"required": [name], "properties": {name: {"not": {"type": "null"}}}}
                                for name in (f.name, *f.unless)]
        if self.schema_extra is not None:
            self.schema_extra(out)
        return out

    def compile(self, limits: WireLimits) -> Check | None:
        """The check as straight-line code, built once (as fastjsonschema builds its validators):
        a field's check in place where it is a single value, a call where it is made of shapes,
        and its place built only for an error."""
        env: dict[str, Any] = {"fail": fail, "is_whole_in": is_whole_in, "InvalidRequest": InvalidRequest}
        lines = ["def check(value, path):", "    if not isinstance(value, dict):",
                 f"        raise InvalidRequest({self.says!r}) if path is None else fail(path, {self.says!r})",
                 "    chars = 0"]
        for k, f in enumerate(self.fields):
            lines += _field_lines(k, f, env, limits)
        if self.char_limit:
            cap = limits.max_message_chars
            lines += [f"    if chars > {cap}:", f"        fail(path, f'has {{chars}} characters of text; the limit is "
                                                   f"{cap}', 'message_too_large')"]
        exec("\n".join([*lines, "    return chars"]), env)  # noqa: S102 - code made from the declaration
        return env["check"]


def _field_lines(k: int, f: Field, env: dict[str, Any], limits: WireLimits) -> list[str]:
    at = f"(path, {f.name!r})"
    code = f.shape.inline(at, env, limits)
    if code is None:
        env[f"c{k}"] = f.shape.compile(limits)
        code = [f"chars += c{k}(x, {at})"]
    if not code and not f.required:
        return []  # described, not checked
    present = f"x is not None or {f.name!r} in value" if f.null_checked else "x is not None"
    lines = [f"    x = value.get({f.name!r})", f"    if {present}:", *("        " + line for line in code or ["pass"])]
    if f.required and f.unless:
        lines += [f"    elif {' and '.join(f'value.get({u!r}) is None' for u in f.unless)}:",
                  f"        fail({at}, {f.missing!r})"]
    elif f.required:
        lines += ["    else:", f"        fail({at}, {f.missing!r})"]
    return lines


@dataclass(frozen=True, eq=False)
class Tagged(Shape):
    """An object whose ``key`` picks its variant (a chat message by its ``role``). ``other``: the
    document's name for any other tag, which passes unchecked (a block or item Sieve does not
    read); else an unknown tag is a 400. ``untagged``: the tag of an object without one (a
    Responses item with a ``role`` is a message), None: a 400 saying ``needs``."""

    key: str
    variants: Mapping[str, Record]
    name: str | None = None
    doc: str = ""
    says: str = "must be an object"
    tag_says: str | None = None  # what a tag that is no string is told (None: as an unknown one)
    other: str | None = None
    other_doc: str = ""
    untagged: Callable[[Mapping[str, Any]], str | None] | None = None
    needs: str = ""
    kind: Any = dict

    def own_schema(self, defs: dict[str, Any]) -> dict[str, Any]:
        refs = {value: record.schema(defs) for value, record in self.variants.items()}
        if self.other is None:
            return {"oneOf": list(refs.values()),
                    "discriminator": {"propertyName": self.key,
                                      "mapping": {value: ref["$ref"] for value, ref in sorted(refs.items())}}}
        # Any other tag: a schema whose tag is none of the variants', so a body that fits the document
        # is one the check accepts (and one that does not, one it refuses).
        other = {"type": "object", "description": self.other_doc, "additionalProperties": True, "required": [self.key],
                 "properties": {self.key: {"type": "string",
                                           "pattern": r"^(?!(?:" + "|".join(self.variants) + r")$)"}}}
        defs[self.other] = other
        return {"anyOf": [*refs.values(), {"$ref": f"#/components/schemas/{self.other}"}]}

    def compile(self, limits: WireLimits) -> Check | None:
        checks = {value: record.compile(limits) or nothing for value, record in self.variants.items()}
        key, choices, says, tag_says = self.key, ", ".join(self.variants), self.says, self.tag_says
        open_, untagged, needs = self.other is not None, self.untagged, self.needs

        def check(value: Any, path: Path) -> int:
            # The usual case first: an object whose tag is one of the variants.
            if isinstance(value, dict):
                tag = value.get(key)
                chosen = checks.get(tag) if isinstance(tag, str) else None
                if chosen is not None:
                    return chosen(value, path)
            return _slow(value, path)

        def _slow(value: Any, path: Path) -> int:
            if not isinstance(value, dict):
                fail(path, says)
            tag = value.get(key)
            if tag is None and untagged is not None and (key not in value or tag_says is None):
                tag = untagged(value)
                if tag is None:
                    raise InvalidRequest(f"{render(path)} {needs}", param=render((path, key)))
            if not isinstance(tag, str) and tag_says is not None:
                fail(path if tag_says == says else (path, key), tag_says)
            chosen = checks.get(tag) if isinstance(tag, str) else None
            if chosen is None:
                if open_ and isinstance(tag, str):
                    return 0
                fail((path, key), f"must be one of {choices}; got {tag!r}")
            return chosen(value, path)  # type: ignore[misc]
        return check


__all__ = ["Either", "Field", "Later", "Many", "Record", "Tagged"]
