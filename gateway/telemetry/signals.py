"""What a request's history says about how the agent is doing: its length and repeated tool calls.

Read from the history the client sends (the chat view; every wire format has
one), so it costs no state and no extra call::

    signals = conversation_signals(call.body["messages"])
    signals.steps, signals.tool_calls, signals.repeated_tool_calls

- ``steps``: the assistant turns in the history, how far the conversation has
  gone (0 on its first request). A pruned agent that lost a fact tends to take
  more steps to finish the same kind of task.
- ``tool_calls`` / ``repeated_tool_calls``: the tool calls of the model's newest
  turn (its answer to the previous request, the one the previous forward led
  to), and how many of them repeat an earlier call of the conversation with the
  same name and the same arguments. Calling a tool again for what it already
  returned is the usual sign that the model no longer sees the answer. Each
  turn is the newest exactly once in a conversation, so each call is counted
  once. Arguments compare as JSON values (key order and spacing do not matter),
  or as text when they are not JSON.
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import orjson

__all__ = ["ConversationSignals", "conversation_signals"]


@dataclass(frozen=True, slots=True)
class ConversationSignals:
    steps: int = 0
    tool_calls: int = 0
    repeated_tool_calls: int = 0


def conversation_signals(messages: Sequence[Mapping[str, Any]]) -> ConversationSignals:
    # ``type(m) is dict`` first: a message off the wire is a dict, and isinstance against the
    # abstract Mapping costs ten times as much (0.5 ms of a 100k-token warm step's accounting).
    assistant = [i for i, m in enumerate(messages)
                 if (type(m) is dict or isinstance(m, Mapping)) and m.get("role") == "assistant"]
    if not assistant:
        return ConversationSignals()
    newest = list(_calls(messages[assistant[-1]]))
    if not newest:
        return ConversationSignals(steps=len(assistant))
    # Only earlier calls of a tool the newest turn calls are canonicalised: a long history
    # of other tools costs a name comparison each.
    names = {name for name, _ in newest}
    earlier = {(name, _canonical(args)) for i in assistant[:-1] for name, args in _calls(messages[i])
               if name in names}
    repeats = sum((name, _canonical(args)) in earlier for name, args in newest)
    return ConversationSignals(steps=len(assistant), tool_calls=len(newest), repeated_tool_calls=repeats)


def _calls(message: Mapping[str, Any]) -> Iterable[tuple[str, Any]]:
    for call in message.get("tool_calls") or ():
        function = call.get("function") if isinstance(call, Mapping) else None
        if isinstance(function, Mapping) and isinstance(function.get("name"), str):
            yield function["name"], function.get("arguments")


def _canonical(arguments: Any) -> bytes:
    if isinstance(arguments, str):
        try:
            arguments = orjson.loads(arguments)
        except orjson.JSONDecodeError:
            return b"text:" + arguments.strip().encode()
    try:
        return orjson.dumps(arguments, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        return repr(arguments).encode()
