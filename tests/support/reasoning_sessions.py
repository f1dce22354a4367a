"""An agent that works as Claude Code and Codex CLI do, over raw HTTP: tool loops with reasoning on.

It keeps its own history, append-only, every assistant turn exactly as the API returned it
(thinking blocks and reasoning items included), runs each shell command it is asked for by
answering with a bulky output, and moves a ``cache_control`` breakpoint to its newest turn on
every request (as Claude Code does). Each request's answer and Sieve's response headers are
kept::

    agent = MessagesAgent(base_url, headers={"x-sieve-target-tokens": "4000"}, stream=True)
    agent.task("ALPHA: ...")            # the whole loop: calls, results, the final answer
    agent.exchanges[-1].headers["x-sieve-reasoning-invalidated"]
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable

import httpx
import orjson

SYSTEM = "You are a coding agent. Run one shell command at a time with the Bash tool."
BASH = {"name": "Bash", "description": "Run a shell command.",
        "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}
SHELL = {"type": "function", "name": "shell", "description": "Run a shell command.",
         "parameters": {"type": "object", "properties": {"command": {"type": "array", "items": {"type": "string"}}},
                        "required": ["command"]}}
MAX_STEPS = 40


def bulky_output(command: str, lines: int = 120) -> str:
    """What a command prints: a header naming it, then many lines (a build log, a listing)."""
    head = f"$ {command}\nOUTPUT-{abs(hash(command)) % 100000:05d}"
    return head + "\n" + "\n".join(f"{command} line {i}: value {i * 37 % 1009} status ok" for i in range(lines))


@dataclass
class Exchange:
    status: int
    headers: dict[str, str]
    answer: dict[str, Any] | None  # the assistant turn (Messages) or the Response (Responses)


@dataclass
class Agent:
    base_url: str
    headers: dict[str, str]
    stream: bool = False
    output: Callable[[str], str] = bulky_output
    exchanges: list[Exchange] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.client = httpx.Client(timeout=60)

    def close(self) -> None:
        self.client.close()

    def _post(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
        resp = self.client.post(self.base_url + path, content=orjson.dumps(body),
                                headers={"content-type": "application/json", **self.headers})
        return resp.status_code, dict(resp.headers), resp.content


class MessagesAgent(Agent):
    """Anthropic Messages, thinking on (``claude-sonnet-5-5``: preserved thinking)."""

    model = "claude-sonnet-5-5"

    def __post_init__(self) -> None:
        super().__post_init__()
        self.messages: list[dict[str, Any]] = []

    def task(self, prompt: str) -> str:
        self.messages.append({"role": "user", "content": [{"type": "text", "text": prompt}]})
        for _ in range(MAX_STEPS):
            turn = self._ask()
            self.messages.append(turn)
            calls = [b for b in turn["content"] if b.get("type") == "tool_use"]
            if not calls:
                return "".join(b.get("text", "") for b in turn["content"] if b.get("type") == "text")
            self.messages.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": c["id"], "content": self.output(c["input"]["command"])}
                for c in calls]})
        raise AssertionError("the task did not end")

    def _ask(self) -> dict[str, Any]:
        last = self.messages[-1]
        marked = {**last, "content": [*last["content"][:-1], {**last["content"][-1],
                                                                "cache_control": {"type": "ephemeral"}}]}
        body = {"model": self.model, "max_tokens": 4096, "system": SYSTEM, "tools": [BASH],
                "thinking": {"type": "adaptive"}, "messages": [*self.messages[:-1], marked], "stream": self.stream}
        status, headers, raw = self._post("/v1/messages", body)
        assert status == 200, raw[:2000]
        answer = _messages_answer(raw) if self.stream else orjson.loads(raw)
        self.exchanges.append(Exchange(status, headers, answer))
        return {"role": "assistant", "content": answer["content"]}


def _messages_answer(raw: bytes) -> dict[str, Any]:
    """A streamed Anthropic message put together from its events."""
    blocks: dict[int, dict[str, Any]] = {}
    partial: dict[int, str] = {}
    message: dict[str, Any] = {}
    for event in _events(raw):
        kind = event.get("type")
        if kind == "message_start":
            message = event["message"]
        elif kind == "content_block_start":
            blocks[event["index"]] = dict(event["content_block"])
        elif kind == "content_block_delta":
            block, delta = blocks[event["index"]], event["delta"]
            if delta["type"] == "text_delta":
                block["text"] = block.get("text", "") + delta["text"]
            elif delta["type"] == "thinking_delta":
                block["thinking"] = block.get("thinking", "") + delta["thinking"]
            elif delta["type"] == "signature_delta":
                block["signature"] = delta["signature"]
            elif delta["type"] == "input_json_delta":
                partial[event["index"]] = partial.get(event["index"], "") + delta["partial_json"]
    for index, text in partial.items():
        blocks[index]["input"] = json.loads(text) if text else {}
    return {**message, "content": [blocks[i] for i in sorted(blocks)]}


class ResponsesAgent(Agent):
    """OpenAI Responses, reasoning on and its encrypted content sent back (as Codex CLI does)."""

    model = "gpt-5-codex"

    def __post_init__(self) -> None:
        super().__post_init__()
        self.items: list[dict[str, Any]] = []

    def task(self, prompt: str) -> str:
        self.items.append({"type": "message", "role": "user", "content": [{"type": "input_text", "text": prompt}]})
        for _ in range(MAX_STEPS):
            output = self._ask()
            self.items.extend(output)
            calls = [i for i in output if i.get("type") == "function_call"]
            if not calls:
                return "".join(p.get("text", "") for i in output if i.get("type") == "message" for p in i["content"])
            for call in calls:
                command = " ".join(json.loads(call["arguments"])["command"])
                self.items.append({"type": "function_call_output", "call_id": call["call_id"],
                                   "output": self.output(command)})
        raise AssertionError("the task did not end")

    def _ask(self) -> list[dict[str, Any]]:
        body = {"model": self.model, "instructions": SYSTEM, "tools": [SHELL], "input": self.items,
                "reasoning": {"effort": "medium"}, "include": ["reasoning.encrypted_content"], "store": False,
                "stream": self.stream}
        status, headers, raw = self._post("/v1/responses", body)
        assert status == 200, raw[:2000]
        answer = _completed(raw) if self.stream else orjson.loads(raw)
        self.exchanges.append(Exchange(status, headers, answer))
        return list(answer["output"])


def _completed(raw: bytes) -> dict[str, Any]:
    return next(e["response"] for e in _events(raw) if e.get("type") == "response.completed")


def _events(raw: bytes) -> list[dict[str, Any]]:
    out = []
    for frame in raw.split(b"\n\n"):
        for line in frame.split(b"\n"):
            if line.startswith(b"data:"):
                data = line[5:].strip()
                if data and data != b"[DONE]":
                    out.append(json.loads(data))
    return out


__all__ = ["Agent", "Exchange", "MessagesAgent", "ResponsesAgent", "bulky_output"]
