"""The ``sieve_expand`` definition goes after a client's own tools, and only into a list."""

from __future__ import annotations

import pytest

from gateway.expand import TOOL_NAME, with_tool
from gateway.wire.formats import WireFormat


def test_the_tool_goes_after_the_clients_own_once() -> None:
    body = {"tools": [{"name": "read", "input_schema": {"type": "object"}}]}
    once = with_tool(body, WireFormat.MESSAGES)
    assert [t["name"] for t in once["tools"]] == ["read", TOOL_NAME]
    assert with_tool(once, WireFormat.MESSAGES) == once


@pytest.mark.parametrize("tools", [{"name": "read"}, "read", 7, True])
def test_tools_that_are_not_a_list_are_left_for_the_provider_to_refuse(tools: object) -> None:
    # A fuzzed body (schemathesis) reached this with a dict: the forward then fell back to
    # the body as sent with an error logged. Not a list: not ours to extend.
    assert with_tool({"tools": tools}, WireFormat.CHAT) == {"tools": tools}
