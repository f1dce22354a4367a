"""What Sieve reads out of one OpenAI chat message: its text and its fingerprint."""

from __future__ import annotations

import hashlib
from typing import Any, Mapping

import orjson

from gateway.pruning.memo import TextMemo

SYSTEM_ROLES = frozenset(("system", "developer"))


def content_text(content: Any) -> str:
    """Text of a message content: a string, or the text parts of a part list."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict):
                text = part.get("text")
                if isinstance(text, str):
                    parts.append(text)
        return "".join(parts)
    return str(content)


def tool_call_text(message: Mapping[str, Any]) -> list[str]:
    """Names and argument strings of a message's tool calls (and legacy function_call)."""
    pieces: list[str] = []
    calls = message.get("tool_calls") or ()
    for call in calls if isinstance(calls, list) else ():
        fn = (call or {}).get("function") or {} if isinstance(call, dict) else {}
        pieces.append(str(fn.get("name") or ""))
        args = fn.get("arguments")
        pieces.append(args if isinstance(args, str) else orjson.dumps(args).decode())
    legacy = message.get("function_call")
    if isinstance(legacy, dict):
        pieces.append(str(legacy.get("name") or ""))
        args = legacy.get("arguments")
        pieces.append(args if isinstance(args, str) else orjson.dumps(args).decode())
    return pieces


def message_token_text(message: Mapping[str, Any]) -> str:
    """The text whose tokens count towards the target: content + call names + arguments."""
    text = content_text(message.get("content"))
    if "tool_calls" in message or "function_call" in message:
        return text + "".join(tool_call_text(message))
    return text


def readable_text(message: Mapping[str, Any]) -> str:
    """What a message says, as the scorer and the value reader read it: its content, then
    each call's name and its arguments decoded, each on lines of its own. The counted text
    (``message_token_text``) runs the content into the call's name and keeps the arguments'
    JSON escapes, so a sentence's last word would join the name ("files.bash") and a line of
    a command its escape's letter ("\\nimport" -> "nimport"): values no message holds."""
    if "tool_calls" not in message and "function_call" not in message:
        return content_text(message.get("content"))
    pieces = [content_text(message.get("content"))]
    calls = message.get("tool_calls") or ()
    fns = [(call or {}).get("function") or {} for call in calls if isinstance(call, dict)] \
        if isinstance(calls, list) else []
    legacy = message.get("function_call")
    if isinstance(legacy, dict):
        fns.append(legacy)
    for fn in fns:
        if not isinstance(fn, dict):
            continue
        pieces.append(str(fn.get("name") or ""))
        args = fn.get("arguments")
        pieces.append(_arguments_text(args) if isinstance(args, str) else "\n".join(_value_lines(args)))
    return "\n".join(pieces)


def call_arguments_text(message: Mapping[str, Any]) -> str:
    """The names and decoded arguments of a message's calls, as ``readable_text`` reads
    them ('' for a message without calls)."""
    if not (message.get("tool_calls") or message.get("function_call")):
        return ""
    return readable_text({"tool_calls": message.get("tool_calls"), "function_call": message.get("function_call")})


# A call's arguments as read (``_arguments_text``), by the arguments string: every step of an
# agent's loop reads the same calls again. Bounded like the other per-text memos.
_ARGUMENTS: TextMemo[str] = TextMemo(50_000, 8 * 1024 * 1024)


def _arguments_text(arguments: str) -> str:
    """A call's JSON arguments as lines: each field ``"key": value`` (a key in quotes, as JSON
    names a field), string values as written, without JSON's escapes; arguments that are not
    JSON as they came (memoised)."""
    text = _ARGUMENTS.get(arguments)
    if text is None:
        try:
            text = "\n".join(_value_lines(orjson.loads(arguments)))
        except orjson.JSONDecodeError:
            text = arguments
        _ARGUMENTS.put(arguments, text)
    return text


def _value_lines(value: Any, key: str | None = None) -> list[str]:
    head = f'"{key}": ' if key is not None else ""
    if isinstance(value, dict):
        lines = [f'"{key}":'] if key is not None else []
        for k, v in value.items():
            lines.extend(_value_lines(v, str(k)))
        return lines
    if isinstance(value, list):
        lines = [f'"{key}":'] if key is not None else []
        for v in value:
            lines.extend(_value_lines(v))
        return lines
    return [head + (value if isinstance(value, str) else orjson.dumps(value).decode())]


# Fingerprints of the messages seen lately, by their JSON as sent (its keys in their order):
# an agent resends its whole history every step, and writing it as it is plus one lookup
# costs less than half the canonical form (keys sorted) and its hash. Bounded in bytes, as
# the token counts are; a message seen with its keys in another order is another entry
# with the same fingerprint.
_FINGERPRINTS: TextMemo[str] = TextMemo(200_000, 32 * 1024 * 1024)  # type: ignore[type-var]


def fingerprint(message: Mapping[str, Any]) -> str:
    """Stable identity of a message: a hash of its canonical JSON (sorted keys)."""
    as_sent = orjson.dumps(message)
    found = _FINGERPRINTS.get(as_sent)  # type: ignore[arg-type]
    if found is None:
        canonical = orjson.dumps(message, option=orjson.OPT_SORT_KEYS)
        found = _FINGERPRINTS.put(as_sent, hashlib.blake2b(canonical, digest_size=12).hexdigest())  # type: ignore[arg-type]
    return found


def clear_fingerprint_memo() -> None:
    """Forget the fingerprints seen and the calls' arguments read (benchmarks of a cold process)."""
    _FINGERPRINTS.clear()
    _ARGUMENTS.clear()


def tool_call_ids(message: Mapping[str, Any]) -> list[str]:
    calls = message.get("tool_calls")
    if not isinstance(calls, list):
        return []
    return [c["id"] for c in calls if isinstance(c, dict) and isinstance(c.get("id"), str)]


def tool_names(message: Mapping[str, Any]) -> list[str]:
    names = []
    calls = message.get("tool_calls")
    for call in calls if isinstance(calls, list) else ():
        if isinstance(call, dict):
            name = (call.get("function") or {}).get("name")
            if isinstance(name, str):
                names.append(name)
    legacy = message.get("function_call")
    if isinstance(legacy, dict) and isinstance(legacy.get("name"), str):
        names.append(legacy["name"])
    return names
