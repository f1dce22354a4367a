"""The BM25 sums in C (``_bm25``) give the bits their Python twins give.

``bm25.query_side`` and ``counts_side`` run in C where the extension is built
(``bm25.NATIVE``), in Python elsewhere. A float sum in another order, or an operation
fused, may differ in its last bit, enough to flip a tie between two units and so the
pruned bytes: these tests compare the floats' bits, on generated counts and weights
(repeated terms, zero and negative weights, counts of zero, terms missing on either side)
and on the scorer's own queries over the shipped dev sessions.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.pruning import bm25, scoring

native = pytest.importorskip("gateway.pruning._bm25", reason="the C extension is not built here")

TERMS = st.sampled_from(["order", "refund", "~orde", "w", "中文", "x" * 30, "a", "b", "c", "d"])
COUNTS = st.dictionaries(TERMS, st.integers(min_value=0, max_value=10**6), max_size=10)
WEIGHTS = st.floats(allow_nan=False, allow_infinity=False, min_value=-1e6, max_value=1e6)
NORMS = st.floats(min_value=1e-3, max_value=1e3)


def same_bits(a: float, b: float) -> bool:
    return a.hex() == b.hex()


def test_the_native_sums_are_in_use_where_they_are_built():
    assert bm25.NATIVE and bm25.query_side is native.query_side and bm25.counts_side is native.counts_side
    assert bm25.document_frequencies is native.document_frequencies
    assert bm25.inverse_frequencies is native.inverse_frequencies


# A corpus as the scorer reads it: each unit's term counts (a dict) or its entities (a frozenset).
DOCUMENTS = st.lists(COUNTS | st.frozensets(TERMS, max_size=10), max_size=40)


@settings(max_examples=2000, deadline=None)
@given(DOCUMENTS)
def test_document_frequencies_are_the_python_ones_in_their_order(documents):
    ours, theirs = native.document_frequencies(documents), bm25.python_document_frequencies(documents)
    assert ours == theirs and list(ours) == list(theirs)


def test_document_frequencies_count_equal_keys_as_one_past_the_table_growth():
    # Equal terms are often distinct objects ("~orde" of "order" and of "orders"), and a
    # conversation has thousands of terms (the table grows several times).
    documents = [{"".join(["t", str(i % 5000)]): 1 for i in range(start, start + 3000)} for start in range(0, 9000, 1500)]
    documents += [frozenset("".join(["t", str(i)]) for i in range(0, 9000, 7))]
    ours = native.document_frequencies(documents)
    assert ours == bm25.python_document_frequencies(documents) and list(ours) == list(bm25.python_document_frequencies(documents))
    assert len(ours) == 5000 + len(range(5005, 9000, 7)) and ours["t0"] == 5


@settings(max_examples=2000, deadline=None)
@given(DOCUMENTS, st.integers(min_value=0, max_value=10**7))
def test_inverse_frequencies_are_the_python_bits_in_their_order(documents, more_docs):
    df, n_docs = bm25.python_document_frequencies(documents), len(documents) + more_docs
    ours, theirs = native.inverse_frequencies(df, n_docs), bm25.python_inverse_frequencies(df, n_docs)
    assert list(ours) == list(theirs)
    assert [v.hex() for v in ours.values()] == [v.hex() for v in theirs.values()]


@settings(max_examples=2000, deadline=None)
@given(COUNTS, st.lists(st.tuples(TERMS, WEIGHTS), max_size=12), NORMS)
def test_query_side_is_the_python_sum(counts, query, norm):
    terms, weights = [t for t, _ in query], [w for _, w in query]
    assert same_bits(native.query_side(counts, terms, weights, norm),
                     bm25.python_query_side(counts, terms, weights, norm))


@settings(max_examples=2000, deadline=None)
@given(COUNTS, st.dictionaries(TERMS, WEIGHTS | st.just(0.0), max_size=10), NORMS, st.sampled_from([1.2, 0.9, 2.0]))
def test_counts_side_is_the_python_sum(counts, query_idf, norm, k1):
    assert same_bits(native.counts_side(counts, query_idf, norm, k1),
                     bm25.python_counts_side(counts, query_idf, norm, k1))


def test_the_scorer_scores_alike_on_either_path(monkeypatch):
    """The local scorer's scores of the shipped sessions, from the C sums and from Python."""
    from tests.unit.pruning.test_token_scan import real_texts  # noqa: PLC0415
    from gateway.pruning.conversation import build_conversation  # noqa: PLC0415
    from gateway.pruning.tokens import TokenCounters  # noqa: PLC0415

    counter = TokenCounters().for_model("gpt-4o-mini")
    texts = real_texts()[:600]
    messages = [{"role": "user" if i % 2 else "assistant", "content": t} for i, t in enumerate(texts)]
    conv = build_conversation(messages, counter.count_message)
    candidates = list(range(len(conv.units) - 8))
    window = list(range(len(conv.units) - 8, len(conv.units)))
    scorer = scoring.LocalScorer()
    corpus = scoring._Corpus.of([scorer.features(u.text) for u in conv.units])
    request = scorer.features(conv.current_request)

    def lexical() -> list[str]:  # BM25 and its feedback round, as bits (a score rounds them)
        return [score.hex() for score in scorer._lexical(conv, candidates, window, corpus, request).values()]

    ours = lexical()
    monkeypatch.setattr(scoring, "query_side", bm25.python_query_side)
    monkeypatch.setattr(scoring, "counts_side", bm25.python_counts_side)
    assert lexical() == ours
    # and with the corpus's frequencies counted in Python too
    monkeypatch.setattr(scoring, "document_frequencies", bm25.python_document_frequencies)
    monkeypatch.setattr(scoring, "inverse_frequencies", bm25.python_inverse_frequencies)
    python_corpus = scoring._Corpus.of([scorer.features(u.text) for u in conv.units])
    assert python_corpus.idf.keys() == corpus.idf.keys() and python_corpus.edf == corpus.edf
    assert [v.hex() for v in python_corpus.idf.values()] == [v.hex() for v in corpus.idf.values()]
    assert [v.hex() for v in python_corpus.eidf.values()] == [v.hex() for v in corpus.eidf.values()]
    corpus = python_corpus
    assert lexical() == ours
    assert len(set(ours)) > 100  # scores that tell the units apart
