"""A scripted provider for agent CLIs: a real aiohttp server on 127.0.0.1 that plays agent loops.

It speaks the Anthropic Messages API (``POST /v1/messages``, ``/v1/messages/count_tokens``) and
the OpenAI Responses API (``POST /v1/responses``), streaming or not, with the event streams the
real APIs send (``tests.support.provider_events``). A script holds tasks; a task is found by its key word
in the user's prompt, and each main-loop request of it gets the next step: run a shell command with
the CLI's own tool, then, after the last command, the task's final answer. A CLI run therefore goes
through a real tool loop (the CLI runs the commands and sends their output back) and ends with a
known answer; a second prompt in the same session (``claude -p --continue``, ``codex exec resume``)
plays the next task on top of the first one's history::

    script = Script(Task("ALPHA", commands=("cat a.txt", "cat b.txt"), answer="DONE-42"))
    with ScriptedProvider(script) as provider:
        run `claude -p "ALPHA: read a.txt"` with ANTHROPIC_BASE_URL=provider.root (or Sieve in front)
        bodies = provider.main_loop("messages")                    # what the provider received

Which task and step a request is at is read from the request itself, not from a counter: the
newest user prompt that names a task key picks the task, and the newest tool result of that task
names the step it answered (call id ``call_<key>_<n>``). The CLIs also send side requests and may
retry, and Sieve may drop or mask old turns; a counter would drift with any of those, the request's
own newest prompt and result do not (Sieve always keeps the active tool chain).

Requests the provider does not know (any method, any path) are recorded and answered 404, so a
test sees everything a CLI tried.

As a process, for benchmarks (no script: every request gets the same text answer, recording off)::

    python -m tests.support.scripted_provider --port 9200 --latency-ms 20 --chunks 8 --chunk-delay-ms 2
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import re
import threading
from typing import Any

import orjson
from aiohttp import web

from tests.support import provider_events as events
from tests.support.prefix_checks import PrefixChecks, anthropic_refusal
from tests.support.threaded_server import ThreadedServer

ANTHROPIC_SHELL_TOOL = "Bash"
EXPAND_TOOL = "sieve_expand"
# The shell tools Codex has offered across versions, with the argument shape each takes.
RESPONSES_SHELL_TOOLS = {
    "exec_command": lambda cmd: {"cmd": cmd},
    "shell_command": lambda cmd: {"command": cmd},
    "shell": lambda cmd: {"command": ["bash", "-lc", cmd]},
}


@dataclasses.dataclass(frozen=True)
class Task:
    """One agent loop: the prompt that names ``key`` gets one shell command per step, then ``answer``."""

    key: str  # a word of the user's prompt, letters and digits
    commands: tuple[str, ...]
    answer: str

    def call_id(self, step: int) -> str:
        return f"call_{self.key}_{step}"

    def step_of(self, result_ids: list[str]) -> int:
        """One past the step the newest of this task's tool results answers; 0 before the first."""
        for call_id in reversed(result_ids):
            match = re.fullmatch(rf"call_{re.escape(self.key)}_(\d+)", call_id)
            if match:
                return int(match.group(1)) + 1
        return 0


class Script:
    """The tasks a provider plays, found by the key word in the newest user prompt naming one."""

    def __init__(self, *tasks: Task) -> None:
        self.tasks = tasks

    def task_for(self, prompts: list[str]) -> Task | None:
        for prompt in reversed(prompts):
            for task in self.tasks:
                if task.key in prompt:
                    return task
        return None


@dataclasses.dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]  # lower-case names
    json: Any  # parsed body, or None


def estimate_tokens(value: Any) -> int:
    """Chars of the JSON // 4: the provider's usage only has to be plausible and deterministic."""
    return max(1, len(orjson.dumps(value)) // 4) if value else 0


# -- reading a request: which step, and which tool to call ------------------------------------------

def _blocks(message: Any) -> list[dict]:
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [block for block in content or () if isinstance(block, dict)]


def messages_prompts_and_results(body: dict) -> tuple[list[str], list[str]]:
    """An Anthropic Messages body's user texts and ``tool_result`` ids, each in order."""
    prompts: list[str] = []
    results: list[str] = []
    for message in body.get("messages") or ():
        if not isinstance(message, dict) or message.get("role") != "user":
            continue
        for block in _blocks(message):
            if block.get("type") == "text":
                prompts.append(str(block.get("text", "")))
            elif block.get("type") == "tool_result":
                results.append(str(block.get("tool_use_id", "")))
    return prompts, results


def responses_prompts_and_results(body: dict) -> tuple[list[str], list[str]]:
    """A Responses body's user texts and tool output call ids, each in order."""
    items = body.get("input")
    if isinstance(items, str):
        return [items], []
    prompts: list[str] = []
    results: list[str] = []
    for item in items or ():
        if not isinstance(item, dict):
            continue
        if item.get("role") == "user":
            prompts.extend(str(part.get("text", "")) for part in _blocks(item))
        elif str(item.get("type", "")).endswith("_call_output"):
            results.append(str(item.get("call_id", "")))
    return prompts, results


def tool_names(body: dict) -> set[str]:
    return {str(tool.get("name")) for tool in body.get("tools") or () if isinstance(tool, dict)}


def is_main_loop(fmt: str, body: dict) -> bool:
    """A request of the agent loop itself: it offers the CLI's shell tool (side requests do not)."""
    names = tool_names(body)
    return ANTHROPIC_SHELL_TOOL in names if fmt == "messages" else bool(names & RESPONSES_SHELL_TOOLS.keys())


def _json(body: Any) -> web.Response:
    return web.Response(body=orjson.dumps(body), content_type="application/json")


class ScriptedProvider(ThreadedServer):
    """The provider, in a background thread with its own loop (as ``tests.support.fake_upstream`` runs)."""

    thread_name = "scripted-provider"

    def __init__(self, script: Script, *, host: str = "127.0.0.1", port: int = 0, record: bool = True,
                 unscripted: events.Turn = events.Turn(text="ok"), latency_s: float = 0.0,
                 chunk_delay_s: float = 0.0, checks: PrefixChecks | None = None, expand_every: int = 0,
                 expand_after_text: bool = False) -> None:
        super().__init__(host=host, port=port)
        self.script = script
        # Preserved reasoning (tests.support.prefix_checks): answers carry reasoning bound to their prefix,
        # and every request is checked as the providers check it.
        self.checks = checks
        # Every that many steps of a task, a request that offers Sieve's sieve_expand tool and shows a
        # marker's ref gets a call to it first (0: never): Sieve's own rounds, and the exchanges it pins.
        self.expand_every = expand_every
        # Say a sentence before that call (Anthropic): a stream names the tool after text, so Sieve
        # answers it at the call and splices the next round into the same message.
        self.expand_after_text = expand_after_text
        self.record = record
        self.unscripted = unscripted  # the answer to a request of no task (side requests, benchmarks)
        self.latency_s = latency_s  # before the status line
        self.chunk_delay_s = chunk_delay_s  # between streamed events
        self.requests: list[Recorded] = []
        self._lock = threading.Lock()

    @property
    def root(self) -> str:
        """Without ``/v1``: what ``ANTHROPIC_BASE_URL`` takes (the client appends ``/v1/messages``)."""
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        """With ``/v1``: what an OpenAI client's base URL takes (it appends ``/responses``)."""
        return self.root + "/v1"

    def main_loop(self, fmt: str) -> list[dict]:
        """The bodies of the main-loop requests received in ``fmt`` ("messages" or "responses")."""
        path = "/v1/messages" if fmt == "messages" else "/v1/responses"
        with self._lock:
            return [r.json for r in self.requests if r.path == path and isinstance(r.json, dict)
                    and is_main_loop(fmt, r.json)]

    # -- lifecycle ------------------------------------------------------------------------------
    def make_app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/messages", self._messages)
        app.router.add_post("/v1/messages/count_tokens", self._count_tokens)
        app.router.add_post("/v1/responses", self._responses)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_route("*", "/{tail:.*}", self._unknown)
        return app

    # -- handlers -------------------------------------------------------------------------------
    async def _record(self, request: web.Request) -> Any:
        raw = await request.read()
        try:
            body = orjson.loads(raw) if raw else None
        except orjson.JSONDecodeError:
            body = None
        if self.record:
            with self._lock:
                self.requests.append(Recorded(request.method, request.path,
                                              {k.lower(): v for k, v in request.headers.items()}, body))
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        return body

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def _unknown(self, request: web.Request) -> web.Response:
        await self._record(request)
        return web.json_response({"error": {"message": f"no route {request.method} {request.path}",
                                            "type": "not_found_error"}}, status=404)

    async def _count_tokens(self, request: web.Request) -> web.Response:
        body = await self._record(request)
        return web.json_response({"input_tokens": estimate_tokens(body)})

    def _next_turn(self, fmt: str, body: dict) -> events.Turn:
        """The tool call of the step this request is at, or the final answer after the last one."""
        read = messages_prompts_and_results if fmt == "messages" else responses_prompts_and_results
        prompts, results = read(body)
        task = self.script.task_for(prompts)
        if task is None or not is_main_loop(fmt, body):
            return self.unscripted
        step = task.step_of(results)
        expanded = self._expansion(fmt, body, step, results)
        if expanded is not None:
            return expanded
        if step >= len(task.commands):
            return events.Turn(text=task.answer)
        command, call_id = task.commands[step], task.call_id(step)
        if fmt == "messages":
            return events.Turn(call=events.ToolCall(call_id, ANTHROPIC_SHELL_TOOL,
                                                    {"command": command, "description": "run a step"}))
        name = next(n for n in RESPONSES_SHELL_TOOLS if n in tool_names(body))
        return events.Turn(call=events.ToolCall(call_id, name, RESPONSES_SHELL_TOOLS[name](command)))

    def _expansion(self, fmt: str, body: dict, step: int, results: list[str]) -> events.Turn | None:
        """A sieve_expand call (module docstring of ``expand_every``), or None."""
        if not self.expand_every or step % self.expand_every != self.expand_every - 1 or EXPAND_TOOL not in \
                tool_names(body) or (results and results[-1].startswith("call_expand")):
            return None
        refs = re.findall(r"ref ([0-9a-f]{8})\b", orjson.dumps(body.get("messages") or body.get("input")).decode())
        if not refs:
            return None
        preamble = "Let me read back what was left out." if self.expand_after_text and fmt == "messages" else None
        return events.Turn(call=events.ToolCall(f"call_expand_{step}_{len(results)}", EXPAND_TOOL, {"refs": refs[-1:]}),
                           preamble=preamble)

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        body = await self._record(request)
        if not isinstance(body, dict):
            return web.json_response({"type": "error", "error": {"type": "invalid_request_error",
                                                                 "message": "body is not JSON"}}, status=400)
        turn = self._next_turn("messages", body)
        if self.checks is not None:
            checked = self.checks.check_messages(body, {k.lower(): v for k, v in request.headers.items()})
            if checked.refused is not None:
                return web.json_response(anthropic_refusal(checked.refused), status=400)
            checked.main_loop = is_main_loop("messages", body)
            # A call after text in a stream reaches the client up to the call (Sieve splices the next
            # round into the same message): the client holds that answer's thinking block too.
            checked.round = _answers_expansion("messages", body)
            checked.held = not _calls_expansion(turn) or (turn.preamble is not None and body.get("stream") is True)
            if self.checks.thinks(body):
                turn = dataclasses.replace(turn, thinking=self.checks.thinking_block(body),
                                           transformations=tuple(checked.transformations))
                checked.issued = turn.thinking["signature"] if turn.thinking else None
        usage = events.Usage(input_tokens=estimate_tokens(body.get("messages")) + estimate_tokens(body.get("system")),
                             output_tokens=turn.output_tokens())
        model = str(body.get("model", "claude-fake"))
        if not body.get("stream"):
            return _json(events.anthropic_message(turn, model, usage))
        return await self._sse(request, events.anthropic_stream(turn, model, usage))

    async def _responses(self, request: web.Request) -> web.StreamResponse:
        body = await self._record(request)
        if not isinstance(body, dict):
            return web.json_response({"error": {"message": "body is not JSON", "type": "invalid_request_error",
                                                "param": None, "code": None}}, status=400)
        turn = self._next_turn("responses", body)
        if self.checks is not None:
            checked = self.checks.check_responses(body)
            checked.main_loop = is_main_loop("responses", body)
            checked.round, checked.held = _answers_expansion("responses", body), not _calls_expansion(turn)
            turn = dataclasses.replace(turn, transformations=tuple(checked.transformations),
                                       reasoning=self.checks.reasoning_item(body) if body.get("reasoning") else None)
            checked.issued = turn.reasoning["id"] if turn.reasoning else None
        usage = events.Usage(input_tokens=estimate_tokens(body.get("input")) + estimate_tokens(body.get("instructions")),
                             output_tokens=turn.output_tokens())
        model = str(body.get("model", "gpt-fake"))
        if not body.get("stream"):
            return _json(events.responses_object(turn, model, usage, body))
        return await self._sse(request, events.responses_stream(turn, model, usage, body))

    async def _sse(self, request: web.Request, frames: list[bytes]) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8",
                                           "Cache-Control": "no-cache"})
        await resp.prepare(request)
        for i, frame in enumerate(frames):
            if i and self.chunk_delay_s:
                await asyncio.sleep(self.chunk_delay_s)
            await resp.write(frame)
        await resp.write_eof()
        return resp


def _answers_expansion(fmt: str, body: dict) -> bool:
    """A request whose newest tool result answers a sieve_expand call: a gateway's own round."""
    read = messages_prompts_and_results if fmt == "messages" else responses_prompts_and_results
    results = read(body)[1]
    return bool(results) and results[-1].startswith("call_expand")


def _calls_expansion(turn: events.Turn) -> bool:
    return turn.call is not None and turn.call.name == EXPAND_TOOL


# -- checking what the provider received --------------------------------------------------------

def orphans(fmt: str, body: dict) -> list[str]:
    """The call ids of ``body`` that break a tool chain: a result without its call before it, or a
    call left unanswered before the next turn (every one of them makes a provider reject the request)."""
    return _messages_orphans(body) if fmt == "messages" else _responses_orphans(body)


def _messages_orphans(body: dict) -> list[str]:
    found: list[str] = []
    messages = [m for m in body.get("messages") or () if isinstance(m, dict)]
    for i, message in enumerate(messages):
        blocks = _blocks(message)
        results = {str(b.get("tool_use_id")) for b in blocks if b.get("type") == "tool_result"}
        before = _blocks(messages[i - 1]) if i and messages[i - 1].get("role") == "assistant" else []
        calls_before = {str(b.get("id")) for b in before if b.get("type") == "tool_use"}
        found.extend(sorted(results - calls_before))  # a result must answer the assistant turn just before
        if message.get("role") == "assistant" and i + 1 < len(messages):
            calls = {str(b.get("id")) for b in blocks if b.get("type") == "tool_use"}
            answered = {str(b.get("tool_use_id")) for b in _blocks(messages[i + 1]) if b.get("type") == "tool_result"}
            found.extend(sorted(calls - answered))
    return found


def _responses_orphans(body: dict) -> list[str]:
    items = body.get("input") if isinstance(body.get("input"), list) else []
    calls: list[str] = []
    found: list[str] = []
    answered: set[str] = set()
    for item in items:
        kind = str(item.get("type", "")) if isinstance(item, dict) else ""
        if kind.endswith("_call_output"):
            answered.add(str(item.get("call_id")))
            if str(item.get("call_id")) not in calls:  # a result must come after its call
                found.append(str(item.get("call_id")))
        elif kind.endswith("_call") and "call_id" in item:
            calls.append(str(item["call_id"]))
    return found + [call_id for call_id in calls if call_id not in answered]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="The scripted provider as a process: Anthropic Messages and "
                                                 "OpenAI Responses with one text answer (benchmarks).")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9200)
    parser.add_argument("--latency-ms", type=float, default=0.0, help="fixed delay before answering")
    parser.add_argument("--chunks", type=int, default=4, help="text pieces when streaming")
    parser.add_argument("--chunk-delay-ms", type=float, default=0.0, help="between streamed events")
    args = parser.parse_args(argv)
    pieces = tuple(f"tok{i} " for i in range(args.chunks))
    provider = ScriptedProvider(Script(), host=args.host, port=args.port, record=False,
                                unscripted=events.Turn(text="".join(pieces), pieces=pieces),
                                latency_s=args.latency_ms / 1000, chunk_delay_s=args.chunk_delay_ms / 1000)

    async def serve() -> None:
        await provider.start_async()
        print(f"scripted provider listening on {provider.root}", flush=True)
        await asyncio.Event().wait()

    try:
        import uvloop  # optional: the faster loop, as tests.support.fake_upstream runs under a benchmark

        run = uvloop.run
    except (ImportError, AttributeError):
        run = asyncio.run
    try:
        run(serve())
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
