"""Claude Code's cache layout through Sieve: what share of the prompt Anthropic's cache serves.

A Claude-Code-like session (system blocks and tools with breakpoints, a breakpoint that
moves to the newest turn each request, and one on the turn before it) is played twice
against the same fake Anthropic provider, whose cache model reads the body's own
``cache_control`` breakpoints (``PromptCache("anthropic").messages_usage``): sent
directly, and through Sieve with a target that makes it prune in epochs. Figures:
BENCHMARKS.md (Wire formats, prompt cache).
"""

from __future__ import annotations

import copy
import uuid
from dataclasses import dataclass, field
from typing import Any, Iterator

import anthropic
import orjson
import pytest

from tests.support.fake_providers import FakeProviders
from tests.support.fake_upstream import PromptCache, anthropic_blocks
from tests.support.gateway_server import GatewayServer
from tests.integration.conftest import format_settings

MODEL = "claude-sonnet-4-5"
CACHE = {"type": "ephemeral"}
STEPS = 40
TARGET = 9000
LAST_MARKED = 2  # Claude Code marks its newest user turn and the one before it
SYSTEM = [{"type": "text", "text": "You are a coding agent working in a repository. " * 120},
          {"type": "text", "text": "Tools: read files, run the tests, edit code.", "cache_control": CACHE}]
TOOLS = [{"name": name, "description": f"{name} in the repository.", "input_schema": {"type": "object"}}
         for name in ("read_file", "run_tests", "edit_file")]
TOOLS[-1] = {**TOOLS[-1], "cache_control": CACHE}


@pytest.fixture(scope="module")
def cached_provider() -> Iterator[FakeProviders]:
    with FakeProviders(prompt_cache=PromptCache("anthropic")) as server:
        yield server


@pytest.fixture(scope="module")
def gateway(cached_provider: FakeProviders) -> Iterator[GatewayServer]:
    with GatewayServer(format_settings(cached_provider)) as gw:
        yield gw


def session(steps: int) -> list[dict[str, Any]]:
    """The body of each request of a session, as Claude Code sends it: the whole history,
    breakpoints on the system prompt, the tools, the newest turn and the user turn before it."""
    turns: list[dict[str, Any]] = [{"role": "user", "content": [{"type": "text", "text": "Fix the failing test."}]}]
    bodies = []
    for step in range(steps):
        body = {"model": MODEL, "max_tokens": 1024, "system": SYSTEM, "tools": TOOLS,
                "messages": copy.deepcopy(turns)}
        users = [t for t in body["messages"] if t["role"] == "user"]
        for turn in users[-LAST_MARKED:]:
            turn["content"][-1]["cache_control"] = CACHE
        bodies.append(body)
        turns.append({"role": "assistant", "content": [
            {"type": "text", "text": f"Step {step}: reading module {step}."},
            {"type": "tool_use", "id": f"toolu_{step:03d}", "name": "read_file", "input": {"path": f"src/m{step}.py"}}]})
        source = "\n".join(f"def f{step}_{i}(x):  # line {i} of module {step}\n    return x + {i}" for i in range(40))
        turns.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_{step:03d}",
                                                   "content": source}]})
    return bodies


@dataclass
class Billed:
    read: int = 0
    written: int = 0
    plain: int = 0
    per_request: list[tuple[int, int, int]] = field(default_factory=list)

    def add(self, usage: Any) -> None:
        row = (usage.cache_read_input_tokens or 0, usage.cache_creation_input_tokens or 0, usage.input_tokens)
        self.per_request.append(row)
        self.read, self.written, self.plain = self.read + row[0], self.written + row[1], self.plain + row[2]

    @property
    def prompt(self) -> int:
        return self.read + self.written + self.plain

    @property
    def read_share(self) -> float:
        return self.read / self.prompt


def play(base_url: str, bodies: list[dict[str, Any]], headers: dict[str, str] | None = None) -> Billed:
    client = anthropic.Anthropic(base_url=base_url, api_key="sk-ant-cache", max_retries=0, timeout=60,
                                 default_headers=headers)
    billed = Billed()
    for body in bodies:
        billed.add(client.messages.create(**body).usage)
    return billed


def measure(gateway: GatewayServer, provider: FakeProviders, steps: int = STEPS) -> tuple[Billed, Billed]:
    bodies = session(steps)
    assert provider.prompt_cache is not None
    provider.prompt_cache.clear()
    direct = play(provider.anthropic_base_url, bodies)
    provider.prompt_cache.clear()
    through = play(gateway.base_url, bodies, {"x-sieve-target-tokens": str(TARGET),
                                              "x-sieve-conversation-id": uuid.uuid4().hex})
    return direct, through


def epoch_rewrites(sent: list[dict[str, Any]], through: Billed) -> tuple[list[int], int]:
    """The requests whose forwarded prompt changed before its end (Sieve's epochs), and the
    tokens they wrote to the cache beyond their own change: the unchanged blocks before the
    first changed one that no cache entry covered, so they were written again."""
    epochs, beyond = [], 0
    for k in range(1, len(sent)):
        before, now = _blocks(sent[k - 1]), _blocks(sent[k])
        first = next((i for i, (a, b) in enumerate(zip(before, now)) if a != b), None)
        if first is None:
            continue  # the previous prompt is a prefix of this one: the session only grew
        epochs.append(k)
        unchanged = sum(max(1, len(block) // 4) for block in now[:first])
        beyond += max(0, unchanged - through.per_request[k][0])
    return epochs, beyond


def _blocks(body: dict[str, Any]) -> list[bytes]:
    return [orjson.dumps(block, option=orjson.OPT_SORT_KEYS) for _, block in anthropic_blocks(body)]


def cost(billed: Billed) -> float:
    """The prompt's price in units of the input rate: Anthropic bills reads at 0.1x and 5-minute
    writes at 1.25x."""
    return billed.read * 0.1 + billed.written * 1.25 + billed.plain


def test_claude_codes_breakpoints_keep_hitting_between_epochs(gateway, cached_provider):
    direct, through = measure(gateway, cached_provider)
    sent = [r.json for r in cached_provider.requests if r.path == "/v1/messages"][STEPS:]
    epochs, beyond = epoch_rewrites(sent, through)
    # Between epochs the forwarded prompt only grows, and each request writes what the direct
    # session writes for it: the newest turns, nothing more. The first also writes Sieve's
    # sieve_expand tool, there from the conversation's first request (it names its conversation by
    # its breakpoints): tools never change mid-way (docs/reasoning.md).
    assert through.per_request[0][1] > direct.per_request[0][1]
    for k in range(1, len(sent)):
        if k not in epochs:
            assert through.per_request[k][1] == direct.per_request[k][1], k
    # An epoch rewrites what it changed; what it writes beyond that (unchanged blocks before its
    # first change that no breakpoint covered) stays a small share of the writes.
    assert 3 <= len(epochs) <= STEPS // 4
    assert beyond <= 0.03 * through.written
    assert direct.read_share >= 0.95 and through.read_share >= 0.75
    assert cost(through) <= 0.85 * cost(direct)  # pruned, the prompt costs less even at a lower read share
