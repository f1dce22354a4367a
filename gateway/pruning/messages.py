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
    """Forget the fingerprints seen (benchmarks of a cold process)."""
    _FINGERPRINTS.clear()


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
