"""Turns Claude Code sends that a plain Messages client does not: a ``system`` turn between the others
(2.1.x puts its environment notes there). The API takes it; Sieve must too, and keep it pinned.
``tests/integration/test_agent_clis.py`` runs the CLI itself through Sieve."""

from __future__ import annotations

from gateway.wire.formats.anthropic_messages import MessagesAdapter
from gateway.wire.formats.messages_check import check_messages_body


def claude_code_body_with_system(system_content) -> dict:
    return {"model": "claude-test", "max_tokens": 1024,
            "system": [{"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "<system-reminder>notes</system-reminder>"},
                                             {"type": "text", "text": "read a.txt"}]},
                {"role": "system", "content": system_content},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "Bash",
                                                   "input": {"command": "cat a.txt"}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "a"}]},
            ]}


def test_a_system_turn_between_the_others_is_a_valid_request():
    check_messages_body(claude_code_body_with_system("# Environment\n - cwd: /tmp/p"))
    check_messages_body(claude_code_body_with_system([{"type": "text", "text": "# Environment"}]))


def test_a_system_turn_is_read_as_a_system_message_whatever_its_content_shape():
    for content in ("# Environment", [{"type": "text", "text": "# Environment"}]):
        view = MessagesAdapter().read(claude_code_body_with_system(content))
        roles = [m["role"] for m in view.body["messages"]]
        assert roles == ["system", "user", "system", "assistant", "tool"]
        assert view.body["messages"][2]["content"] == "# Environment"
        assert view.origins[2].turn == 1
