"""The OpenAI Responses request shape: checked where Sieve relies on it, lenient elsewhere.

Sieve reads ``model``, ``instructions`` and ``input`` (a string or a list of
items), and in the items what makes tool chains: messages' roles and content,
``function_call`` / ``custom_tool_call`` and their outputs by ``call_id``. A
violation is a 400 naming the field (``input[4].call_id must be a string``);
every other field and item type passes through untouched. Declared once
(``RESPONSES_BODY``, :mod:`gateway.wire.shapes`): the check and the OpenAPI
document's ``OpenAIResponsesRequest`` both come from it::

    check_responses_body(body, WireLimits())   # or InvalidRequest (400) naming the field
"""

from __future__ import annotations

from typing import Any, Mapping

from gateway.wire.chat import LIMITS, MODEL, STREAM, TOKEN_COUNT
from gateway.wire.limits import WireLimits
from gateway.wire.shapes import Anything, Choice, Const, Text, compiled
from gateway.wire.structures import Either, Field, Many, Record, Tagged

ROLES = ("user", "assistant", "system", "developer")
CALLS = ("function_call", "custom_tool_call")
OUTPUTS = ("function_call_output", "custom_tool_call_output")
# A stored response's or conversation's id, as the provider makes them (gateway.exchange.stored_responses).
RESPONSE_ID_CHARS = r"[A-Za-z0-9_-]{1,256}"
STORED_ID = "^" + RESPONSE_ID_CHARS + "$"
PART_LIST = "must be a string or an array of content parts"
PARTS = Many(Record(fields=(Field("type", Text(), null_checked=True), Field("text", Anything(counts=True))),
                    says="must be a content part object"),
             says=PART_LIST, limit="max_content_parts", noun="parts", code="too_many_content_parts")
CONTENT = Either((Text(counts=True), PARTS), says=PART_LIST)
A_STRING = {"required": True, "missing": "must be a string"}
CALL_ID = Field("call_id", Text(), **A_STRING, doc="The call it answers: the two are pruned together.")


def _call(kind: str, name: str, said: str, doc: str = "") -> Record:
    return Record(name, (Field("type", Const(kind), required=True), Field("call_id", Text(), **A_STRING),
                         Field("name", Text(), **A_STRING), Field(said, Text(counts=True), **A_STRING, doc=doc)), char_limit=True)


def _output(kind: str) -> Record:
    return Record(f"{''.join(p.capitalize() for p in kind.split('_'))}Item", (
        Field("type", Const(kind), required=True), CALL_ID,
        Field("output", CONTENT, required=True, missing=PART_LIST)), char_limit=True)


ITEM = Tagged("type", {
    "message": Record("MessageItem", (
        Field("type", Const("message"), null_checked=True, doc="Optional: an item with a `role` is a message."),
        Field("role", Choice(ROLES), required=True, missing=f"must be one of {', '.join(ROLES)}; got None"),
        Field("content", CONTENT, required=True, missing=PART_LIST,
              doc="A string or content parts (`input_text`, `output_text`, `input_image`, ...).")), char_limit=True),
    "function_call": _call("function_call", "FunctionCallItem", "arguments", "The arguments as JSON text."),
    "custom_tool_call": _call("custom_tool_call", "CustomToolCallItem", "input"),
    **{kind: _output(kind) for kind in OUTPUTS},
}, name="InputItem", tag_says="must be a string", other="OtherItem",
    other_doc="Any other item (`reasoning`, `compaction`, `web_search_call`, `item_reference`, ...): passed "
              "through as sent; `reasoning` items are never edited.",
    untagged=lambda item: "message" if "role" in item else None, needs="needs a 'type' (or a 'role', for a message)")
STORED = Text(pattern=STORED_ID)
RESPONSES_BODY = Record("OpenAIResponsesRequest", (
    MODEL,
    Field("instructions", Text(), doc="The system prompt: never pruned."),
    # It decides whether Sieve prunes at all; whose it is, gateway.exchange.stored_responses checks (404).
    Field("previous_response_id", STORED, doc=(
        "The history is kept at the provider: the request is forwarded unpruned. A response the caller's org made "
        "through Sieve (else 404, unless its policy sets `allow_unmanaged_response_ids`); its stored size is "
        "reserved on the budget.")),
    Field("conversation", Either((STORED, Record(fields=(Field("id", STORED, **A_STRING),))),
                                 says="must be a conversation id, or an object with a string 'id'"),
          doc="A conversation the provider keeps (its id, or an object with its `id`): the caller's org's only, "
              "as `previous_response_id`."),
    # Without input the history must be the provider's (a previous response or a conversation).
    Field("input", Either((Text(counts=True, total=True),
                           Many(ITEM, limit="max_messages", noun="items", code="too_many_messages", total=True)),
                          says="must be a string or an array of input items"),
          required=True, unless=("previous_response_id", "conversation"),
          missing="is required (unless previous_response_id or conversation names the history)", doc=(
              "A string, or items: a `function_call` and its `function_call_output` (by `call_id`) are pruned "
              "together, `reasoning` items are never edited and stay with the call they precede.")),
    STREAM,
    Field("max_output_tokens", TOKEN_COUNT),
), doc="An OpenAI Responses request; every field Sieve does not check passes through (`prompt_cache_key`, `store`, "
       "`include`, `reasoning`, `tools`, ...).", says="the request body must be a JSON object")


def check_responses_body(body: Mapping[str, Any], limits: WireLimits = LIMITS) -> None:
    compiled(RESPONSES_BODY, limits)(body)


__all__ = ["CALLS", "ITEM", "OUTPUTS", "RESPONSES_BODY", "RESPONSE_ID_CHARS", "ROLES", "STORED_ID",
           "check_responses_body"]
