"""The frozen decisions of one conversation, and how they are replayed.

Between epochs the forwarded prefix must be byte-identical from one request to
the next, or the provider's prompt cache misses. So the decisions taken at an
epoch (which original messages are masked or dropped, which markers go where)
are stored and replayed as they are for as long as the client's history still
starts with the messages they were taken on.

Stored as compact bytes (orjson) in whatever ``ConversationStore`` the gateway
runs: in-memory by default, Redis when configured. Replicas of two releases
share that store during a rolling upgrade, so the bytes keep their version 2
layout and keys whatever the names in code: an action is stored as "mask" or
"drop", the target as "cap".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence, TypeVar

import orjson

from gateway.pruning.vocabulary import DROPPED, MASKED, Action

V = TypeVar("V")

# The stored spelling of the actions a plan holds (kept messages are not stored).
_STORED_ACTIONS = {MASKED: "mask", DROPPED: "drop"}
_ACTIONS_STORED = {stored: action for action, stored in _STORED_ACTIONS.items()}
# The stored layout, in order (the keys a version 2 reader finds, whatever their order): the
# fingerprints, then the decisions, then the counts and their encoding.
_HEAD = b'{"v":2,"fp":'
_DECISIONS = b',"decided":'
_COUNTS = b',"tokens":'


@dataclass(slots=True)
class FrozenPlan:
    fingerprints: list[str]          # of every original message of the last request
    decided: int = 0                 # decisions cover original messages [0, decided)
    actions: dict[int, Action] = field(default_factory=dict)  # index -> masked | dropped
    inserts: list[tuple[int, dict[str, Any]]] = field(default_factory=list)  # (before index, message)
    masked: dict[int, str] = field(default_factory=dict)  # index -> the masked content, as forwarded
    epoch: int = 0
    target_tokens: int = 0           # the target the decisions were taken under (stored as "cap")
    # Token counts of the messages behind ``fingerprints`` (under the target rule, and
    # in the model's own encoding), and that encoding: a replica that never saw
    # this conversation reuses them instead of tokenizing the whole history again.
    tokens: list[int] = field(default_factory=list)
    model_tokens: list[int] = field(default_factory=list)
    encoding: str = ""

    def to_bytes(self) -> bytes:
        # Pairs as tuples, built and sorted without a Python loop (hundreds of actions); orjson
        # writes a tuple as the array a list would be.
        decisions = orjson.dumps({
            "decided": self.decided,
            "actions": sorted(zip(self.actions, map(_STORED_ACTIONS.__getitem__, self.actions.values()))),
            "inserts": self.inserts, "masked": sorted(self.masked.items()),
            "epoch": self.epoch, "cap": self.target_tokens,
        })
        return self._around(decisions[1:-1])

    def to_bytes_replayed(self, earlier: bytes) -> bytes:
        """``to_bytes()`` of a plan that a frozen replay moved on from the plan whose
        ``to_bytes()`` gave ``earlier``: the same decisions, and only the messages seen (their
        fingerprints, counts and encoding) changed. The decisions are taken from ``earlier`` as
        they are, not written again: a warm step's plan holds hundreds of them, and its
        replay changes none. The caller vouches for the decisions being the same."""
        start, end = earlier.find(_DECISIONS), earlier.rfind(_COUNTS)
        if not earlier.startswith(_HEAD) or start < 0 or end < start:
            return self.to_bytes()
        return self._around(earlier[start + 1:end])

    def _around(self, decisions: bytes) -> bytes:
        """The plan's bytes around its decisions (their JSON members, without the braces). A
        value of a decision cannot hold the members' names as they stand here: JSON escapes each
        quote inside a string, so a comma, then a bare quote, is never inside one."""
        return b"".join((_HEAD, orjson.dumps(self.fingerprints), b",", decisions, _COUNTS, orjson.dumps(self.tokens),
                         b',"model_tokens":', orjson.dumps(self.model_tokens),
                         b',"encoding":', orjson.dumps(self.encoding), b"}"))

    def copy(self) -> "FrozenPlan":
        """The plan as ``from_bytes(self.to_bytes())`` builds it, without the round trip: every
        container new, the actions and masks in index order, the markers rebuilt (any nesting)."""
        return FrozenPlan(fingerprints=list(self.fingerprints), decided=self.decided,
                          actions=_in_index_order(self.actions),
                          inserts=[(i, orjson.loads(orjson.dumps(m))) for i, m in self.inserts],
                          masked=_in_index_order(self.masked), epoch=self.epoch,
                          target_tokens=self.target_tokens, tokens=list(self.tokens),
                          model_tokens=list(self.model_tokens), encoding=self.encoding)

    @classmethod
    def from_bytes(cls, raw: bytes) -> "FrozenPlan | None":
        """Decode; a corrupt or foreign value is treated as no state at all."""
        try:
            d = orjson.loads(raw)
            if d.get("v") != 2:
                return None
            return cls(
                fingerprints=list(d["fp"]), decided=int(d["decided"]),
                actions={int(i): _ACTIONS_STORED[a] for i, a in d["actions"]},
                inserts=[(int(i), dict(m)) for i, m in d["inserts"]],
                masked={int(i): str(t) for i, t in d["masked"]},
                epoch=int(d["epoch"]), target_tokens=int(d.get("cap", 0)),
                tokens=[int(t) for t in d.get("tokens", ())],
                model_tokens=[int(t) for t in d.get("model_tokens", ())], encoding=str(d.get("encoding", "")),
            )
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
            return None

    def known_tokens(self, fingerprints: Sequence[str], encoding: str) -> tuple[list[int], list[int]]:
        """Stored token counts (target rule, model encoding) of the leading messages that are unchanged."""
        n_fps = len(self.fingerprints)
        if encoding != self.encoding or len(self.tokens) != n_fps or len(self.model_tokens) != n_fps:
            return [], []
        n = 0
        for mine, theirs in zip(fingerprints, self.fingerprints):
            if mine != theirs:
                break
            n += 1
        return self.tokens[:n], self.model_tokens[:n]

    def prefix_matches(self, fingerprints: Sequence[str]) -> bool:
        n = self.decided
        return len(fingerprints) >= n and list(fingerprints[:n]) == self.fingerprints[:n]

    def continues(self, fingerprints: Sequence[str]) -> bool:
        """The new request extends the last one seen (an agent loop going on)."""
        n = len(self.fingerprints)
        return n > 0 and len(fingerprints) >= n and list(fingerprints[:n]) == self.fingerprints

    def replay(self, messages: Sequence[Mapping[str, Any]]) -> tuple[list[dict[str, Any]], list[int]]:
        """Apply the decisions to ``messages``; returns (forwarded, source index per
        forwarded message, -1 for inserted markers)."""
        out: list[dict[str, Any]] = []
        sources: list[int] = []
        inserts = iter(self.inserts)
        pending = next(inserts, None)
        for i, message in enumerate(messages):
            while pending is not None and pending[0] == i:
                out.append(pending[1])
                sources.append(-1)
                pending = next(inserts, None)
            action = self.actions.get(i) if i < self.decided else None
            if action == DROPPED:
                continue
            if action == MASKED:
                replaced = dict(message)
                replaced["content"] = self.masked[i]
                out.append(replaced)
            else:
                out.append(message)  # type: ignore[arg-type]
            sources.append(i)
        while pending is not None:  # markers placed at the very end of the decided span
            out.append(pending[1])
            sources.append(-1)
            pending = next(inserts, None)
        return out, sources


def _in_index_order(by_index: Mapping[int, V]) -> dict[int, V]:
    """A copy in index order. A plan's mappings are built in that order: checking it (the
    indices alone, sorted as plain ints) costs a tenth of sorting the pairs."""
    indices = list(by_index)
    if indices == sorted(indices):
        return dict(by_index)
    return dict(sorted(by_index.items()))
