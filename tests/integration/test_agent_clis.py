"""Claude Code and Codex CLI, run as users run them, through Sieve to a scripted provider.

Each CLI does two tasks in one session, as a user does at a terminal: ``claude -p "ALPHA: ..."``
then ``claude -p --continue "BETA: ..."`` (``codex exec`` then ``codex exec resume --last``). The
scripted provider (``tests.support.scripted_provider``) answers the first task with three tool calls (the
CLI's own shell tool reads three bulky files) and a final answer, the second with one tool call and
its answer. The CLIs execute the calls for real and send the output back, so the provider sees the
session grow. With a small ``x-sieve-target-tokens`` (set the way each CLI lets a user add a header),
Sieve must prune the first task's tool output out of the second task's requests, and the CLIs must
still finish both tasks with the provider's answers.

What is asserted, from what the provider recorded and what Sieve counted:

* each CLI exits 0 with each task's final answer on stdout;
* every main-loop request reached the provider (Sieve answered nothing itself);
* the provider got fewer prompt tokens than the CLI sent (Sieve's original vs forwarded counters),
  and the bulky file text of the first task is gone from the last request (an omission marker may
  still list its unique first line among the exact values it stands for);
* no request the provider got has an orphaned tool result or an unanswered tool call;
* under the shipped default policy, the pruned requests carry the ``sieve_expand`` tool after the
  CLI's own and markers naming refs (a policy with ``expand_tool: false``: no tool of Sieve's);
* the CLI tried no connection beyond 127.0.0.1 (``OutboundTrap``).

The same sessions run straight against the provider first (``test_*_directly``): that the fake
speaks each protocol well enough for the real CLI, so a failure through Sieve is Sieve's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import pytest

from gateway.pruning.compression import OMITTED_PREFIX
from gateway.config.settings import Settings
from gateway.telemetry.metrics import Metrics
from tests.support.agent_clis import ClaudeCode, CodexCli, OutboundTrap
from tests.support.gateway_server import GatewayServer
from tests.support.prefix_checks import PrefixChecks, newly_lost
from tests.support.scripted_provider import Script, ScriptedProvider, Task, orphans

pytestmark = pytest.mark.timeout(600)
ROOT = Path(__file__).resolve().parents[2]

FILES = ("alpha", "beta", "gamma")
SCRIPT = Script(
    Task("ALPHA", tuple(f"cat {name}.txt" for name in FILES), answer="ANSWER-ALPHA-7431"),
    Task("BETA", ("ls",), answer="ANSWER-BETA-2209"),
)
FIRST_PROMPT = "ALPHA: read alpha.txt, beta.txt and gamma.txt and summarise them."
SECOND_PROMPT = "BETA: list the files in this directory."
MAIN_LOOP_REQUESTS = 4 + 2  # three tool calls and the answer; one tool call and the answer
TARGET_TOKENS = "1200"  # well under one task's file output (three files of ~2,500 tokens each)


def sentinel(name: str) -> str:
    return f"SENTINEL-{name.upper()}-FIRST-LINE"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A working directory with three bulky text files, each opening with a line found nowhere else."""
    workdir = tmp_path / "project"
    workdir.mkdir()
    for name in FILES:
        lines = [sentinel(name)] + [f"{name} report, line {i}: the quarterly figures, region by region."
                                    for i in range(160)]
        (workdir / f"{name}.txt").write_text("\n".join(lines) + "\n")
    return workdir


@pytest.fixture
def provider() -> Iterator[ScriptedProvider]:
    """The scripted provider with preserved reasoning on (``tests.support.prefix_checks``): its answers carry
    thinking blocks / reasoning items bound to their prefix, and it checks every request as the
    providers do (a 400 for a thinking block bound to another prefix, unless drop_block)."""
    with ScriptedProvider(SCRIPT, checks=PrefixChecks()) as server:
        yield server


@pytest.fixture
def sieve(provider: ScriptedProvider) -> Iterator[GatewayServer]:
    """Sieve in open mode on loopback, forwarding Messages to the provider's root and Responses to its /v1."""
    settings = Settings(upstream_base_url=provider.base_url, anthropic_base_url=provider.root)
    with GatewayServer(settings) as gateway:
        yield gateway


@pytest.fixture
def trap() -> Iterator[OutboundTrap]:
    with OutboundTrap() as outbound:
        yield outbound


def counter_total(metrics: Metrics, name: str) -> float:
    """A counter summed over all its label sets."""
    return sum(sample.value for family in metrics.registry.collect() for sample in family.samples
               if sample.name == name)


def run_session(cli: ClaudeCode | CodexCli) -> None:
    """Both tasks, the second resuming the first's session; each must end with its scripted answer."""
    for prompt, resume, answer in ((FIRST_PROMPT, False, SCRIPT.tasks[0].answer),
                                   (SECOND_PROMPT, True, SCRIPT.tasks[1].answer)):
        done = cli.run(prompt, resume=resume)
        assert done.returncode == 0, f"exit {done.returncode}\nstdout:\n{done.stdout[-2000:]}\nstderr:\n{done.stderr[-4000:]}"
        assert answer in done.stdout, done.stdout[-2000:]


def assert_session_reached_provider(provider: ScriptedProvider, fmt: str) -> list[dict]:
    bodies = provider.main_loop(fmt)
    assert len(bodies) == MAIN_LOOP_REQUESTS, [r.path for r in provider.requests]
    for body in bodies:
        assert orphans(fmt, body) == []
    assert provider.checks is not None
    assert [c.refused for c in provider.checks.log if c.refused] == []  # no request failed a prefix check
    return bodies


def assert_reasoning_counted(sieve: GatewayServer, provider: ScriptedProvider) -> None:
    """Sieve's count of the reasoning its rewrites invalidated is the provider's own, and so is its
    count of the provider's input_transformations."""
    sieve.wait_idle()
    assert provider.checks is not None
    lost = newly_lost(provider.checks.log)
    assert counter_total(sieve.metrics, "sieve_reasoning_invalidated_total") == sum(lost)
    reported = sum(len(c.transformations) for c in provider.checks.log)
    assert counter_total(sieve.metrics, "sieve_provider_input_transformations_total") == reported


def without_markers(value):
    """``value`` with Sieve's own texts (omission markers, masks: strings opening "[sieve:") left
    out. A marker lists the exact values of what it stands for, and a file's unique first line is
    one (a code in capitals, ``gateway/pruning/values.py``); the file's text itself must be gone."""
    if isinstance(value, dict):
        return {k: without_markers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [without_markers(v) for v in value if not (isinstance(v, str) and v.startswith("[sieve:"))]
    return "" if isinstance(value, str) and value.startswith("[sieve:") else value


def assert_pruned(sieve: GatewayServer, bodies: list[dict]) -> None:
    sieve.wait_idle()
    original = counter_total(sieve.metrics, "sieve_prompt_tokens_original_total")
    forwarded = counter_total(sieve.metrics, "sieve_prompt_tokens_forwarded_total")
    assert 0 < forwarded < original, (original, forwarded)
    last = json.dumps(without_markers(bodies[-1]))
    gone = [name for name in FILES if sentinel(name) not in last and f"{name} report, line 0:" not in last]
    assert gone, "every file the first task read is still in the last request the provider got"
    for body in bodies:
        assert not markers_side_by_side(body), "two omission markers side by side in a forwarded body"


def assert_expand_tool_on(bodies: list[dict]) -> None:
    """The shipped default policy has sieve_expand on: the pruned last request carries the tool
    after the CLI's own and markers naming refs (the scripted provider never calls it)."""
    assert json.dumps(bodies[-1]["tools"][-1]).count("sieve_expand") >= 1
    assert "ref " in json.dumps(bodies[-1].get("messages") or bodies[-1].get("input"))


def markers_side_by_side(body: dict) -> bool:
    """Two omission markers in a row: text blocks of one Anthropic turn, or Responses input items."""
    def is_marker(text: object) -> bool:
        return isinstance(text, str) and text.startswith(OMITTED_PREFIX)

    if "messages" in body:
        runs = [[b.get("text") for b in t["content"] if isinstance(b, dict)] for t in body["messages"]
                if isinstance(t.get("content"), list)]
    else:
        runs = [[(i.get("content") or [{}])[0].get("text") if isinstance(i.get("content"), list) else i.get("content")
                 for i in body.get("input") or () if isinstance(i, dict)]]
    return any(is_marker(a) and is_marker(b) for run in runs for a, b in zip(run, run[1:]))


# -- straight to the provider: the fake is right for the real CLI ------------------------------------

def test_claude_code_runs_the_scripted_session_directly(project, provider, trap):
    run_session(ClaudeCode(project, base_url=provider.root, trap=trap))
    bodies = assert_session_reached_provider(provider, "messages")
    assert all(sentinel(name) in json.dumps(bodies[-1]) for name in FILES)  # nothing pruned here
    assert trap.attempts == []


def test_codex_runs_the_scripted_session_directly(project, provider, trap):
    run_session(CodexCli(project, base_url=provider.base_url, trap=trap))
    bodies = assert_session_reached_provider(provider, "responses")
    assert all(sentinel(name) in json.dumps(bodies[-1]) for name in FILES)
    assert trap.attempts == []


# -- through Sieve ------------------------------------------------------------------------------------

def test_claude_code_finishes_through_sieve_which_prunes_the_first_task_out(project, provider, sieve, trap):
    claude = ClaudeCode(project, base_url=sieve.base_url, trap=trap,
                        headers={"x-sieve-target-tokens": TARGET_TOKENS})
    run_session(claude)
    bodies = assert_session_reached_provider(provider, "messages")
    assert_pruned(sieve, bodies)
    assert_expand_tool_on(bodies)
    assert_reasoning_counted(sieve, provider)
    assert all(r.headers.get("anthropic-version") for r in provider.requests)  # passed through
    assert trap.attempts == []


def test_codex_finishes_through_sieve_which_prunes_the_first_task_out(project, provider, sieve, trap):
    codex = CodexCli(project, base_url=sieve.base_url + "/v1", trap=trap,
                     headers={"x-sieve-target-tokens": TARGET_TOKENS})
    run_session(codex)
    bodies = assert_session_reached_provider(provider, "responses")
    assert_pruned(sieve, bodies)
    assert_expand_tool_on(bodies)
    assert_reasoning_counted(sieve, provider)
    assert all(r.headers.get("session-id") for r in provider.requests)  # Codex's session header passed through
    assert trap.attempts == []


# -- through Sieve with the sieve_expand tool off ------------------------------------------------------

@pytest.fixture
def sieve_without_expand(provider: ScriptedProvider, tmp_path: Path) -> Iterator[GatewayServer]:
    """Sieve as above, its default policy with ``expand_tool: false``: pruned forwards carry no
    tool of Sieve's (the tests above run the shipped default, which has it on)."""
    folder = tmp_path / "policies"
    folder.mkdir()
    (folder / "default.yaml").write_text((ROOT / "policies" / "default.yaml").read_text() + "\nexpand_tool: false\n")
    settings = Settings(upstream_base_url=provider.base_url, anthropic_base_url=provider.root, policies_dir=folder)
    with GatewayServer(settings) as gateway:
        yield gateway


@pytest.mark.parametrize("cli", ["claude", "codex"])
def test_the_clis_finish_through_sieve_with_the_expand_tool_off(project, provider, sieve_without_expand, trap, cli):
    headers = {"x-sieve-target-tokens": TARGET_TOKENS}
    base_url = sieve_without_expand.base_url
    run_session(ClaudeCode(project, base_url=base_url, trap=trap, headers=headers) if cli == "claude"
                else CodexCli(project, base_url=base_url + "/v1", trap=trap, headers=headers))
    bodies = assert_session_reached_provider(provider, "messages" if cli == "claude" else "responses")
    assert_pruned(sieve_without_expand, bodies)
    assert not any("sieve_expand" in json.dumps(body.get("tools")) for body in bodies)
    assert trap.attempts == []
