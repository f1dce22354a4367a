"""Dialogue adjacency for the local scorer: relevance spread to the units around an on-topic one.

In a dialogue the answer follows the question: a unit right after an on-topic unit
inherits part of its relevance (and a little from the one after). Topics also run
for a few turns: a unit near an on-topic one gains a little, less with each unit
between them::

    with_neighbours({3: 1.0, 4: 0.0}, next_share=0.25, prev_share=0.5, prev_add=0.15,
                    span=5, decay=0.75, context=0.3)   # unit 4 gains from unit 3
"""

from __future__ import annotations


def with_neighbours(lexical: dict[int, float], next_share: float, prev_share: float,
                    prev_add: float, span: int, decay: float, context: float) -> dict[int, float]:
    """Per unit of ``lexical`` (unit -> score; a unit it lacks scores 0.0): the best of its
    own score, ``prev_share`` of the previous unit's and ``next_share`` of the next one's,
    plus ``prev_add`` of the previous unit's, plus ``context`` of the best score within
    ``span`` units either side, weighted ``decay`` to the power of its distance less one."""
    if not lexical:
        return {}
    # The scores laid out by position (0.0 where a unit has none, ``pad`` beyond both ends).
    # ``near`` is folded for every position at once, one distance after the other, in C
    # (map): per unit the same products, and max(near, before, after) in the same order, as
    # a loop per unit and distance did, which cost twenty thousand instructions a unit.
    pad = max(span, 1)
    low = min(lexical) - pad
    size = max(lexical) + pad - low + 1
    dense = [0.0] * size
    for i, s in lexical.items():
        dense[i - low] = s
    near = [0.0] * size
    w = 1.0
    for d in range(1, span + 1):
        scaled = [w * s for s in dense]
        near[d:size - d] = map(max, near[d:size - d], scaled[:size - 2 * d], scaled[2 * d:])
        w *= decay
    out = {}
    for i, s in lexical.items():
        j = i - low
        prev_s, next_s = dense[j - 1], dense[j + 1]
        out[i] = max(s, prev_share * prev_s, next_share * next_s) + prev_add * prev_s + context * near[j]
    return out
