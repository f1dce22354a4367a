"""The pure pipeline run the way the pruning unit tests run it: one counter, the local scorer."""

from __future__ import annotations

from gateway.pruning.compression import OMITTED_PREFIX
from gateway.pruning.pipeline import prune
from gateway.pruning.policy import Policy, Steering
from gateway.pruning.scoring import LocalScorer
from gateway.pruning.tokens import TokenCounters

COUNTER = TokenCounters().for_model("gpt-4o-mini")
SCORER = LocalScorer()


def run(messages, policy=None, state=None, **steering):
    """Prune ``messages``; ``steering``: target_tokens, strategy, goal."""
    return prune({"model": "gpt-4o-mini", "messages": messages}, policy or Policy(), scorer=SCORER,
                 counter=COUNTER, state=state, steering=Steering(**steering))


def markers(result) -> list[str]:
    """The omission markers among ``result``'s forwarded messages, in order."""
    return [m["content"] for m in result.request["messages"]
            if isinstance(m.get("content"), str) and m["content"].startswith(OMITTED_PREFIX)]
