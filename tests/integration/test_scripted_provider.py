"""The scripted provider speaks each protocol as the official SDKs read it (streamed and not),
and plays a task's steps from the request itself; the agent CLI tests rest on both."""

from __future__ import annotations

import anthropic
import pytest

from tests.support.scripted_provider import Script, ScriptedProvider, Task, orphans
from tests.support import openai_client

TASK = Task("ALPHA", ("cat a.txt", "cat b.txt"), answer="ANSWER-ALPHA")
BASH = {"name": "Bash", "description": "run a command", "input_schema": {"type": "object", "properties": {
    "command": {"type": "string"}}, "required": ["command"]}}
EXEC = {"type": "function", "name": "exec_command", "description": "run a command",
        "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}}


@pytest.fixture(scope="module")
def provider():
    with ScriptedProvider(Script(TASK)) as server:
        yield server


def anthropic_turns(client: anthropic.Anthropic, stream: bool) -> list[anthropic.types.Message]:
    """The whole task as a client plays it: each tool call answered, until the final text."""
    messages: list[dict] = [{"role": "user", "content": "ALPHA: read the files"}]
    replies = []
    for _ in range(len(TASK.commands) + 1):
        kwargs = dict(model="claude-test", max_tokens=256, tools=[BASH], messages=messages)
        if stream:
            with client.messages.stream(**kwargs) as events:
                reply = events.get_final_message()
        else:
            reply = client.messages.create(**kwargs)
        replies.append(reply)
        messages.append({"role": "assistant", "content": [b.model_dump() for b in reply.content]})
        calls = [b for b in reply.content if b.type == "tool_use"]
        if not calls:
            break
        messages.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": c.id,
                                                      "content": f"output of {c.input['command']}"} for c in calls]})
    return replies


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_anthropic_sdk_plays_the_task_to_its_answer(provider, stream):
    client = anthropic.Anthropic(base_url=provider.root, api_key="sk-ant-test", max_retries=0)
    replies = anthropic_turns(client, stream)
    assert [r.stop_reason for r in replies] == ["tool_use", "tool_use", "end_turn"]
    assert [r.content[0].input["command"] for r in replies[:2]] == list(TASK.commands)
    assert replies[-1].content[0].text == TASK.answer
    assert replies[-1].usage.input_tokens > 0


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_openai_sdk_plays_the_task_to_its_answer(provider, stream):
    client = openai_client(provider)
    items: list = [{"role": "user", "content": "ALPHA: read the files"}]
    outputs = []
    for _ in range(len(TASK.commands) + 1):
        if stream:
            with client.responses.stream(model="gpt-test", input=items, tools=[EXEC]) as events:
                reply = events.get_final_response()
        else:
            reply = client.responses.create(model="gpt-test", input=items, tools=[EXEC])
        outputs.append(reply)
        calls = [o for o in reply.output if o.type == "function_call"]
        if not calls:
            break
        items += [c.model_dump() for c in calls]
        items += [{"type": "function_call_output", "call_id": c.call_id, "output": "done"} for c in calls]
    assert [o.output[0].type for o in outputs] == ["function_call", "function_call", "message"]
    assert outputs[-1].output_text == TASK.answer
    assert outputs[-1].usage.total_tokens > 0
    assert orphans("responses", {"input": items}) == []


def test_a_request_of_no_task_gets_the_unscripted_answer(provider):
    client = anthropic.Anthropic(base_url=provider.root, api_key="sk-ant-test", max_retries=0)
    reply = client.messages.create(model="claude-test", max_tokens=16, messages=[{"role": "user", "content": "a title"}])
    assert reply.content[0].text == "ok"


def test_orphans_names_a_result_whose_call_was_dropped():
    body = {"messages": [{"role": "user", "content": "ALPHA"},
                         {"role": "assistant", "content": [{"type": "text", "text": "..."}]},
                         {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_ALPHA_0"}]}]}
    assert orphans("messages", body) == ["call_ALPHA_0"]
    assert orphans("responses", {"input": [{"type": "function_call_output", "call_id": "c1"}]}) == ["c1"]
    assert orphans("responses", {"input": [{"type": "function_call", "call_id": "c2"}]}) == ["c2"]
