"""The wire layer: what arrives and leaves, as data, below every other layer but the pure core.

* :mod:`gateway.wire.body`    reading and parsing a request body
* :mod:`gateway.wire.chat`    the Chat Completions body, checked where Sieve relies on it
* :mod:`gateway.wire.shapes` body shapes declared once: the run-time check and the OpenAPI schema
* :mod:`gateway.wire.headers` the ``x-sieve-*`` request and response headers
* :mod:`gateway.wire.sse`     the server-sent-events relay that reads usage on the way
* :mod:`gateway.wire.call`    one parsed, authorized request (``ModelCall``) and its ``Identity``

Nothing here knows the web framework or does I/O of its own: the routes in
``gateway.api`` hand it bytes and header mappings.
"""

from gateway.wire.body import parse_body, read_body
from gateway.wire.call import ANONYMOUS, Identity, IdentityKind, ModelCall
from gateway.wire.chat import CHAT_BODY, MAX_COMPLETION_TOKENS, MAX_CHOICES, WireLimits, check_chat_body
from gateway.wire.continuation import more_steps_follow
from gateway.wire.error_shapes import anthropic_error_body, anthropic_error_type
from gateway.wire.formats import FORMAT_HEADER, ChatView, messages_check, responses_check
from gateway.wire.formats.messages_check import MESSAGES_BODY
from gateway.wire.formats.responses_check import RESPONSES_BODY, RESPONSE_ID_CHARS
from gateway.wire.formats.detect import AmbiguousFormat, detect_format
from gateway.wire.formats.reasoning import (
    Carrier,
    Scope,
    Verdict,
    carriers,
    chain,
    input_transformations,
    judge,
    strippable,
)
from gateway.wire.formats.registry import adapter_for
from gateway.wire.formats.view import WireFormat, parse_format
from gateway.wire.headers import (
    MAX_CONVERSATION_ID_BYTES,
    MAX_GOAL_CHARS,
    MAX_TARGET_TOKENS,
    REASONING_HEADER,
    SieveHeaders,
    parse_sieve_headers,
    response_headers,
)
from gateway.wire.ingress import INGRESSES, Ingress, chat_answer_chars
from gateway.wire.keys import client_provider_key, presented_key
from gateway.wire.shapes import components
from gateway.wire.sse import SSEUsageTap, event_data, split_events

__all__ = [
    "ANONYMOUS",
    "AmbiguousFormat",
    "CHAT_BODY",
    "Carrier",
    "ChatView",
    "FORMAT_HEADER",
    "INGRESSES",
    "Identity",
    "IdentityKind",
    "Ingress",
    "MAX_CHOICES",
    "MAX_COMPLETION_TOKENS",
    "MAX_CONVERSATION_ID_BYTES",
    "MAX_GOAL_CHARS",
    "MAX_TARGET_TOKENS",
    "MESSAGES_BODY",
    "ModelCall",
    "REASONING_HEADER",
    "RESPONSES_BODY",
    "RESPONSE_ID_CHARS",
    "SSEUsageTap",
    "Scope",
    "SieveHeaders",
    "Verdict",
    "WireFormat",
    "WireLimits",
    "adapter_for",
    "anthropic_error_body",
    "anthropic_error_type",
    "carriers",
    "chain",
    "chat_answer_chars",
    "check_chat_body",
    "client_provider_key",
    "components",
    "detect_format",
    "event_data",
    "input_transformations",
    "judge",
    "messages_check",
    "more_steps_follow",
    "parse_body",
    "parse_format",
    "parse_sieve_headers",
    "presented_key",
    "read_body",
    "response_headers",
    "responses_check",
    "split_events",
    "strippable",
]
