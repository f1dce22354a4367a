"""What later units say of earlier ones: mentions of their rare entities, copies of their values.

A unit a later one refers back to is one the conversation still stands on. Two
strengths of that evidence, both read from the per-unit entities the scorer
already has (``text_features``), so neither costs another pass over the text:

* a later unit *mentions* a rare entity of it (a name, a term in two units at
  most): a weak signal, one part of the relevance;
* a *kept* later unit (the protected window, the current step among them)
  *copies* one of its exact values (the model quoted an order id, a call's
  argument reuses a path): the strongest evidence of need there is, which
  ranks the unit above everything only on topic::

    later_mentions(candidates, feats, edf)          # {unit: later units}
    copied_by_kept(candidates, window, feats, edf)  # {unit: values copied}
"""

from __future__ import annotations

from typing import Mapping, Protocol, Sequence


class _HasEntities(Protocol):
    entities: frozenset[str]


def later_mentions(candidates: Sequence[int], feats: Sequence[_HasEntities], edf: Mapping[str, int]) -> dict[int, int]:
    """How many later units mention a rare entity (in two units at most) of each candidate."""
    rare = {ent for ent, d in edf.items() if d <= 2}
    last_seen: dict[str, list[int]] = {}
    rare_of = [f.entities & rare for f in feats]  # each unit's, once: the candidates read theirs again
    for j, held in enumerate(rare_of):
        for ent in held:
            last_seen.setdefault(ent, []).append(j)
    refs: dict[int, int] = {}
    for i in candidates:
        later = set()
        for ent in rare_of[i]:
            for j in last_seen[ent]:
                if j > i:
                    later.add(j)
        if later:
            refs[i] = len(later)
    return refs


def copied_by_kept(candidates: Sequence[int], window: Sequence[int], feats: Sequence[_HasEntities],
                   edf: Mapping[str, int], max_units: int = 3) -> dict[int, int]:
    """Per candidate, how many of its exact values a unit of the protected window repeats.

    A value here is an entity :func:`is_value_entity` accepts that is rare in the
    conversation (in at most ``max_units`` units): a value every unit repeats (the
    user's own id) is the conversation's subject and says nothing of one unit.
    """
    kept: set[str] = set()
    for j in window:
        kept.update(feats[j].entities)
    if not kept:
        return {}
    copied: dict[int, int] = {}
    for i in candidates:
        n = sum(1 for ent in feats[i].entities & kept if edf[ent] <= max_units and is_value_entity(ent))
        if n:
            copied[i] = n
    return copied


def is_value_entity(entity: str) -> bool:
    """An entity a later unit copies rather than mentions: one with a digit that is not a
    plain count or year (four digits at most), an e-mail, or a name_with_underscores
    (an id or a function). Words and names of people are mentioned, not copied."""
    if "@" in entity or "_" in entity:
        return True
    return len(entity) >= 3 and not (entity.isdigit() and len(entity) <= 4) and any(c.isdigit() for c in entity)
