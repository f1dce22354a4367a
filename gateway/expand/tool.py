"""The ``sieve_expand`` tool in each wire format: its definition, its calls in an answer,
the round Sieve appends, and an answer without the tool's calls (the exchanges pinned
for later requests: ``gateway.expand.pinning``).

The definition is fixed text placed after the client's own tools (their cached
prefix stays whole). What the tool does is ``gateway.expand.restore``; the rounds
are ``gateway.expand.rounds``. One :class:`Codec` per format (``gateway.expand.codecs``;
``gateway.expand.call_filter`` takes the calls out of a stream already relayed):

==============  ======================  ============================  ===========================
                Chat Completions        Anthropic Messages            OpenAI Responses
==============  ======================  ============================  ===========================
a call          ``message.tool_calls``  a ``tool_use`` block          a ``function_call`` item
a stream names  ``delta.tool_calls[]``  ``content_block_start`` of     ``response.output_item``
it              ``.function.name``      a ``tool_use``                ``.added`` (function_call)
the round       assistant turn + tool   assistant turn + user turn    the output items +
appended        messages                of ``tool_result`` blocks     ``function_call_output``
==============  ======================  ============================  ===========================

A stream is decided by its first event that names a tool or carries text: Sieve's
tool first, and the stream is held back (read whole, assembled into the answer a
non-stream call would have given); anything else is relayed as it came.
"""

from __future__ import annotations

from typing import Any, Mapping

from gateway.expand.restore import TOOL_DESCRIPTION, TOOL_NAME, TOOL_PARAMETERS
from gateway.wire import WireFormat

CHAT_TOOL: dict[str, Any] = {"type": "function", "function": {
    "name": TOOL_NAME, "description": TOOL_DESCRIPTION, "parameters": TOOL_PARAMETERS}}
MESSAGES_TOOL: dict[str, Any] = {"name": TOOL_NAME, "description": TOOL_DESCRIPTION, "input_schema": TOOL_PARAMETERS}
RESPONSES_TOOL: dict[str, Any] = {"type": "function", "name": TOOL_NAME, "description": TOOL_DESCRIPTION,
                                  "parameters": TOOL_PARAMETERS, "strict": False}
_TOOLS = {WireFormat.CHAT: CHAT_TOOL, WireFormat.MESSAGES: MESSAGES_TOOL, WireFormat.RESPONSES: RESPONSES_TOOL}


def tool_definition(fmt: WireFormat) -> dict[str, Any]:
    return _TOOLS[fmt]


def with_tool(body: Mapping[str, Any], fmt: WireFormat) -> dict[str, Any]:
    """``body`` with the tool after the client's own (once: a body that has it keeps it as is)."""
    tools = body.get("tools") or []
    if not isinstance(tools, list):
        return dict(body)  # not a list of tools: the provider answers it in its own words
    if any(_tool_name(t) == TOOL_NAME for t in tools) or body.get("functions") is not None:
        return dict(body)  # (legacy ``functions`` cannot go beside ``tools``: no tool then)
    return {**body, "tools": [*tools, tool_definition(fmt)]}


def _tool_name(tool: Any) -> Any:
    if not isinstance(tool, dict):
        return None
    function = tool.get("function")
    return function.get("name") if isinstance(function, dict) else tool.get("name")


__all__ = ["CHAT_TOOL", "MESSAGES_TOOL", "RESPONSES_TOOL", "tool_definition", "with_tool"]
