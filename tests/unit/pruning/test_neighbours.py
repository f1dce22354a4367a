"""``neighbours.with_neighbours`` folds every position at once; it must give the very floats
the loop per unit gave (the scores order units, and a last-bit difference can flip a tie).
The loop is kept here as the reference, and the two are held equal bit for bit, on any
scores (negative, zero of either sign, infinite, NaN: ``max`` keeps the first of equals
and of incomparables, so the order of its operands counts) and any settings."""

from __future__ import annotations

import struct

from hypothesis import example, given, settings
from hypothesis import strategies as st

from gateway.pruning.neighbours import with_neighbours


def reference(lexical: dict[int, float], next_share: float, prev_share: float, prev_add: float, span: int,
              decay: float, context: float) -> dict[int, float]:
    """The loop per unit and distance that ``with_neighbours`` replaced."""
    out = {}
    for i, s in lexical.items():
        prev_s = lexical.get(i - 1, 0.0)
        next_s = lexical.get(i + 1, 0.0)
        near = 0.0
        w = 1.0
        for d in range(1, span + 1):
            near = max(near, w * lexical.get(i - d, 0.0), w * lexical.get(i + d, 0.0))
            w *= decay
        out[i] = max(s, prev_share * prev_s, next_share * next_s) + prev_add * prev_s + context * near
    return out


def bits(scores: dict[int, float]) -> list[tuple[int, bytes]]:
    return [(i, struct.pack("<d", s)) for i, s in scores.items()]


FLOATS = st.floats(allow_nan=True, allow_infinity=True, width=64) | st.sampled_from([0.0, -0.0, 1.0, 0.5])
SETTING = st.floats(min_value=-2.0, max_value=2.0) | st.sampled_from([0.0, -0.0, 0.25, 0.5, 0.75])


@settings(max_examples=500, deadline=None)
@given(lexical=st.dictionaries(st.integers(min_value=0, max_value=60), FLOATS, max_size=40),
       next_share=SETTING, prev_share=SETTING, prev_add=SETTING, span=st.integers(min_value=0, max_value=8),
       decay=SETTING, context=SETTING)
@example(lexical={}, next_share=0.25, prev_share=0.5, prev_add=0.15, span=5, decay=0.75, context=0.3)
@example(lexical={0: 1.0}, next_share=0.25, prev_share=0.5, prev_add=0.15, span=0, decay=0.75, context=0.3)
@example(lexical={3: 1.0, 4: 0.0, 9: float("nan"), 10: 2.0, 30: -0.0}, next_share=0.25, prev_share=0.5,
         prev_add=0.15, span=5, decay=0.75, context=0.3)
def test_the_same_floats_as_the_loop_per_unit(lexical, next_share, prev_share, prev_add, span, decay, context):
    args = (next_share, prev_share, prev_add, span, decay, context)
    assert bits(with_neighbours(lexical, *args)) == bits(reference(lexical, *args))


def test_a_unit_after_an_on_topic_one_gains():
    out = with_neighbours({3: 1.0, 4: 0.0, 6: 0.0, 12: 0.0}, 0.25, 0.5, 0.15, 5, 0.75, 0.3)
    assert out[3] == 1.0                          # its neighbours have nothing to give
    assert out[4] == 0.5 * 1.0 + 0.15 * 1.0 + 0.3 * 1.0  # the answer after it: a share, and near
    assert out[6] == 0.3 * (0.75 * 0.75)          # three units on: near, decayed twice
    assert out[12] == 0.0                         # beyond the span
