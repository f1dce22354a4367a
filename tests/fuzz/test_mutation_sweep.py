"""A mutation sweep over the three wire formats: no body gets a server error (issue 28).

Valid Chat Completions, Anthropic Messages and OpenAI Responses bodies (an agent's
history with tools, tool calls and their results) are mutated at every place they hold a
value: the value replaced by each of ``JUNK`` (null, numbers huge and negative, strings,
empty and nested containers, an object where a string goes: the content-part ``type``
that once reached ``in TEXT_TYPES`` unhashable), or the key removed. Each mutant goes to
the format's forwarding route and to ``/v1/prune`` in that format, on a real gateway
whose provider (:mod:`tests.support.fake_providers`) answers every request normally; a 4xx is
fine, a 5xx is not, and the gateway logs no error.
"""

from __future__ import annotations

import copy
import logging
from typing import Any, Iterator

import httpx
import pytest

from tests.support.conversations import agent_history
from tests.support.fake_providers import FakeProviders
from tests.support.formats import chat_to_messages, chat_to_responses

JUNK: tuple[Any, ...] = (None, 0, -1, 10**20, 1e300, "", "x", True, [], {}, [{}], {"type": {}}, ["a"])
ROUTES = {"chat": "/v1/chat/completions", "messages": "/v1/messages", "responses": "/v1/responses"}


def bodies() -> dict[str, dict[str, Any]]:
    chat = {"model": "gpt-4o-mini", "max_tokens": 50, "messages": agent_history(2),
            "tools": [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]}
    messages = chat_to_messages({**chat, "model": "claude-sonnet-4-5"})
    messages["max_tokens"] = 50
    responses = chat_to_responses({**chat, "model": "gpt-5"})
    responses["max_output_tokens"] = 50
    responses.pop("max_tokens", None)
    return {"chat": chat, "messages": messages, "responses": responses}


def places(value: Any, path: tuple = ()) -> Iterator[tuple]:
    """Every path to a value inside ``value`` (dict keys and list indices)."""
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in items:
        yield (*path, key)
        yield from places(child, (*path, key))


def mutants(body: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for path in places(body):
        for junk in (*JUNK, KeyError):
            mutant = copy.deepcopy(body)
            holder = mutant
            for key in path[:-1]:
                holder = holder[key]
            if junk is KeyError:
                if isinstance(holder, dict):
                    del holder[path[-1]]
                else:
                    holder.pop(path[-1])
            else:
                holder[path[-1]] = junk
            yield mutant


@pytest.fixture(scope="module")
def providers() -> Iterator[FakeProviders]:
    with FakeProviders() as server:
        server.record = False
        yield server


@pytest.mark.parametrize("fmt", list(ROUTES))
def test_no_mutant_of_a_valid_body_is_a_server_error(start_gateway, providers, caplog, fmt: str) -> None:
    gw = start_gateway(upstream_base_url=providers.base_url, anthropic_base_url=providers.anthropic_base_url,
                       virtual_keys=({"key": "sk-sweep", "org": "sweep"},), auth_failure_limit=0,
                       budgets={"orgs": {"sweep": {"day": 10**12}}})
    headers = {"authorization": "Bearer sk-sweep", "anthropic-version": "2023-06-01"}
    statuses: dict[int, int] = {}
    with httpx.Client(base_url=gw.base_url, timeout=30) as client:
        for mutant in mutants(bodies()[fmt]):
            for path, extra in ((ROUTES[fmt], {}), ("/v1/prune", {"x-sieve-format": fmt})):
                answer = client.post(path, json=mutant, headers={**headers, **extra})
                statuses[answer.status_code] = statuses.get(answer.status_code, 0) + 1
                assert answer.status_code < 500, (path, mutant, answer.text[:300])
    gw.wait_idle()
    errors = [f"{r.name}: {r.getMessage()}" for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [], errors[:5]
    print(f"\n{fmt}: {sum(statuses.values())} mutants sent, statuses {dict(sorted(statuses.items()))}")
