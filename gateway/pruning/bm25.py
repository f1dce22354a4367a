"""The inner sums of the local scorer's BM25: one unit against a weighted query; and the
corpus's document frequencies and their inverse.

``scoring.LocalScorer._bm25`` walks the smaller side of each pair (the query's terms, or
the unit's), in its order, so that the float sum is the same bits whichever way it is
computed. The sums run in C when the extension ``_bm25`` is built (``pip install``
compiles it where a C compiler is; docs/speed.md): the same float operations in the same
order, without an iterator step and a float object per hit. This module is the same in
Python, the fallback where it is not built, and the reference the C code is tested
against (tests/unit/pruning/test_bm25.py)::

    query_side({"order": 2}, ["order", "refund"], [1.5, 0.7], 1.3)  # 1.5 * 2 / (2 + 1.3)
    document_frequencies([{"order": 2}, {"order": 1, "refund": 1}])  # {"order": 2, "refund": 1}
    inverse_frequencies({"order": 2}, 2)  # {"order": log(1 + 0.5 / 2.5)}

``NATIVE`` tells which of the two runs.
"""

from __future__ import annotations

import math
from collections import _count_elements
from itertools import chain, compress
from typing import Iterable, Mapping


def python_query_side(counts: Mapping[str, int], terms: list[str], weights: list[float], norm: float) -> float:
    """Sum of ``weight * count / (count + norm)`` over the ``terms`` a unit holds (``counts``),
    in the query's order (the query is the smaller side)."""
    s = 0.0
    # A unit's counts of the terms are looked up in C (map), only its hits reach the loop.
    held = list(map(counts.get, terms))
    for weight, count in zip(compress(weights, held), filter(None, held)):
        s += weight * count / (count + norm)
    return s


def python_counts_side(counts: Mapping[str, int], query_idf: Mapping[str, float], norm: float, k1: float) -> float:
    """Sum of ``weight * count * (k1 + 1) / (count + norm)`` over a unit's terms that the query
    weighs (``query_idf``: weight x idf), in the unit's order (the unit is the smaller side)."""
    s = 0.0
    held = list(map(query_idf.get, counts))
    for weight, count in zip(filter(None, held), compress(counts.values(), held)):
        s += weight * count * (k1 + 1) / (count + norm)
    return s


def python_document_frequencies(documents: list[Iterable[str]]) -> dict[str, int]:
    """Per key, how many of ``documents`` (each a unit's term counts or its entities: each
    key once in each) hold it, in the order keys are first seen."""
    df: dict[str, int] = {}
    _count_elements(df, chain.from_iterable(documents))
    return df


def python_inverse_frequencies(df: Mapping[str, int], n_docs: int) -> dict[str, float]:
    """BM25's inverse document frequency of each key of ``df``, in its order (the C twin
    makes the same double operations in the same order, and calls the log math.log calls)."""
    return {t: math.log(1 + (n_docs - d + 0.5) / (d + 0.5)) for t, d in df.items()}


try:
    from gateway.pruning._bm25 import counts_side, document_frequencies, inverse_frequencies, query_side
    NATIVE = True
except ImportError:  # not built (no compiler where it was installed): the same in Python
    query_side, counts_side = python_query_side, python_counts_side
    document_frequencies, inverse_frequencies = python_document_frequencies, python_inverse_frequencies
    NATIVE = False
