"""Scoring older units 1–5 for their value to the task, and the local scorer.

The rubric (shared with the LLM scorer, ``gateway.pruning.rubric``): 5 decides
success (user constraints, unique ids, key data); 4 affects the next key steps;
3 useful background; 2 weakly related, drop first; 1 unrelated.

The embedded ``LocalScorer`` needs no network and no model. It combines:

* lexical relevance (BM25 over stemmed terms + 4-letter prefixes, CJK bigrams)
  to the current user request, then the recent window (weighted down when the
  request is self-contained) and the goal; one round of pseudo-relevance
  feedback adds the best matches' distinctive terms at a low weight;
* speakers: in "Name: text" transcripts a message *by* a person the request
  names gains; dialogue adjacency (an answer follows its question) and topic
  locality (units near a strong match gain a little);
* shared entities (ids, numbers, e-mails, file names, quoted and proper names)
  with the current request and the recent window: an agent's next call reuses
  them verbatim;
* user constraints ("never", "must", "不要", ...) and message-type priors;
* references (``references.py``): a unit whose entities later units mention again is
  worth more; one whose exact values a kept later unit copies ranks above all else;
* duplicates: of identical tool outputs only the newest copy scores.

Tiers: the absolute rubric thresholds, plus the most relevant ``TOP_FRAC`` of
the candidates (above a floor) are lifted to 4, so selection takes them by
relevance rather than newest-first. Cost is dominated by per-text features,
cached per text and per token (``text_features.analyse``).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Mapping, Protocol, Sequence

from gateway.pruning import rubric, text_features as tf
from gateway.pruning.bm25 import counts_side, document_frequencies, inverse_frequencies, query_side
from gateway.pruning.conversation import KIND_TOOL_CHAIN, KIND_USER, Conversation
from gateway.pruning.memo import TextMemo
from gateway.pruning.neighbours import with_neighbours
from gateway.pruning.references import copied_by_kept, later_mentions


@dataclass(frozen=True, slots=True)
class UnitScore:
    score: int          # 1..5, the rubric
    relevance: float    # continuous, orders units inside a tier
    reason: str
    hard: bool = False  # a hard user constraint: pinned like the goal


class RelevanceMix(Protocol):
    def __call__(self, relevance: dict[int, float], hard: set[int]) -> dict[int, float]:
        """The candidates' relevance reworked (duplicates are absent; ``hard``: user constraints)."""
        ...


class Scorer(Protocol):
    name: str

    def score(self, conversation: Conversation, candidates: Sequence[int],
              window: Sequence[int]) -> dict[int, UnitScore]:
        """Score the units ``candidates`` (unit indices); ``window`` is the protected recent units."""
        ...


@dataclass(frozen=True, slots=True)
class _Features:
    counts: Mapping[str, int]
    length: int
    entities: frozenset[str]
    constraint: bool
    error: bool
    speaker: str | None


@dataclass(frozen=True, slots=True)
class _Corpus:
    """The conversation's units as a BM25 corpus."""

    feats: list[_Features]   # per unit
    edf: dict[str, int]      # entity -> units that mention it
    idf: dict[str, float]    # term -> inverse document frequency
    eidf: dict[str, float]   # entity -> likewise
    avg_len: float

    @classmethod
    def of(cls, feats: list[_Features]) -> _Corpus:
        n_docs = len(feats)
        # In C where it is built (bm25.py): one pass over every (unit, term) pair.
        df = document_frequencies([f.counts for f in feats])
        edf = document_frequencies([f.entities for f in feats])
        idf, eidf = inverse_frequencies(df, n_docs), inverse_frequencies(edf, n_docs)
        avg_len = (sum(f.length for f in feats) / n_docs) if n_docs else 1.0
        return cls(feats, edf, idf, eidf, avg_len)


@dataclass(frozen=True, slots=True)
class _Signals:
    """What the relevance of a candidate is made of."""

    lexical: dict[int, float]       # BM25 with feedback, spread to dialogue neighbours
    top_lexical: float              # the best of them (1.0 if none): lexical scores are read relative to it
    shared: dict[int, float]        # weight of the entities shared with the current step
    matched: dict[int, list[str]]   # and which
    references: dict[int, int]      # later units that mention its rare entities
    copied: dict[int, int]          # its exact values a kept later unit repeats, how many
    duplicates: set[int]            # tool outputs a newer unit repeats verbatim


class LocalScorer:
    """BM25 + entities + priors; deterministic, no I/O. Features are cached per text."""

    name = "local"
    K1 = 1.2    # BM25's usual saturation and length normalisation (Robertson's defaults)
    B = 0.75
    # The request speaks for the step; the goal and the recent window only steer it
    # (a short "yes, go ahead" leans on the window, halving as the request grows).
    GOAL_W = 0.1
    WINDOW_W = 0.35
    WINDOW_CAP = 0.6
    WINDOW_HALF = 1.0
    # The window's exact entities: full weight in the active chain (the results the
    # next call consumes); before the user's newest message, halving as the request
    # grows, like the window's words (a question of its own names its own entities).
    WINDOW_ENTITY_W = 0.7
    WINDOW_ENTITY_HALF = 2.0
    SPEAKER_BOOST = 1.6       # a message by the person the request names
    ENTITY_IDF_FLOOR = 1.5    # a named entity counts even when the conversation repeats it
    # Dialogue adjacency: an answer follows its question (next/previous shares), and a
    # topic runs for a few turns (a decaying span).
    NEXT_SHARE, PREV_SHARE, PREV_ADD = 0.25, 0.5, 0.15
    SPAN, SPAN_DECAY, SPAN_W = 5, 0.75, 0.3
    # Words carry most of the evidence, exact shared entities a fifth, later mentions a little.
    W_LEX, W_ENT, W_REF = 0.62, 0.2, 0.1
    # The most relevant share of candidates is taken by relevance, not age (floor: not noise).
    TOP_FRAC = 0.3
    TOP_FLOOR = 0.1
    # One round of pseudo-relevance feedback: a few best units' distinctive terms, weighted low.
    PRF_K, PRF_TERMS, PRF_W = 10, 20, 0.3
    COPIED_LIFT = 1.0  # above any relevance the other signals reach
    COPIED_MAX_UNITS = 3  # a value in more units is the conversation's subject, not a quote (references.py)

    # Features weigh about 11 bytes per character of their text: 8 Mi characters
    # of history (about 20 conversations of 100k tokens) hold under 100 MiB.
    def __init__(self, cache_size: int = 50_000, cache_chars: int = 8 * 1024 * 1024) -> None:
        self._cache: TextMemo[_Features] = TextMemo(cache_size, cache_chars)

    def features(self, text: str) -> _Features:
        feats = self._cache.get(text)
        if feats is None:
            info = tf.analyse(text)
            feats = self._cache.put(text, _Features(info.counts, info.length, info.entities, info.constraint,
                                                    info.error, tf.speaker(text)))
        return feats

    def score(self, conversation: Conversation, candidates: Sequence[int],
              window: Sequence[int]) -> dict[int, UnitScore]:
        """Per-text features, read as a corpus; the signals of each candidate; its
        relevance; its tier (see the module docstring)."""
        return self.score_mixed(conversation, candidates, window, None)

    def score_mixed(self, conversation: Conversation, candidates: Sequence[int], window: Sequence[int],
                    mix: RelevanceMix | None) -> dict[int, UnitScore]:
        """``score``, with ``mix`` (another signal's stage: ``gateway.pruning.semantic``)
        reworking the candidates' relevance before it is read as tiers."""
        corpus = _Corpus.of([self.features(u.text) for u in conversation.units])
        request = self.features(conversation.current_request)
        signals = self._signals(conversation, candidates, window, corpus, request)
        relevance, hard = self._relevance(conversation, candidates, corpus.feats, signals)
        if mix is not None:
            relevance = mix(relevance, hard)
        return self._tiered(conversation, candidates, corpus.feats, signals, relevance, hard)

    def _signals(self, conv: Conversation, candidates: Sequence[int], window: Sequence[int], corpus: _Corpus,
                 request: _Features) -> _Signals:
        lexical = self._lexical(conv, candidates, window, corpus, request)
        shared, matched = self._shared_entities(conv, candidates, window, corpus, request)
        lexical = with_neighbours(lexical, self.NEXT_SHARE, self.PREV_SHARE, self.PREV_ADD,
                                   int(self.SPAN), self.SPAN_DECAY, self.SPAN_W)
        return _Signals(lexical, max(lexical.values(), default=0.0) or 1.0, shared, matched,
                        later_mentions(candidates, corpus.feats, corpus.edf),
                        copied_by_kept(candidates, window, corpus.feats, corpus.edf, self.COPIED_MAX_UNITS),
                        self._duplicates(conv, candidates))

    def _lexical(self, conv: Conversation, candidates: Sequence[int], window: Sequence[int], corpus: _Corpus,
                 request: _Features) -> dict[int, float]:
        """BM25 against the request, the recent window and the goal, with one round of
        pseudo-relevance feedback."""
        query = self._query_weights(conv, window, corpus.feats, request)
        lexical = self._bm25(query, corpus, candidates, request)
        if self.PRF_W > 0:
            expanded = self._expand(query, lexical, corpus)
            lexical = self._bm25(expanded, corpus, candidates, request, (query, lexical))
        return lexical

    def _shared_entities(self, conv: Conversation, candidates: Sequence[int], window: Sequence[int],
                         corpus: _Corpus, request: _Features) -> tuple[dict[int, float], dict[int, list[str]]]:
        """Per candidate, the weight of the entities it shares with the current step, and which."""
        entity_query = self._entity_weights(conv, window, corpus.feats, request)
        shared: dict[int, float] = {}
        matched: dict[int, list[str]] = {}
        asked = set(entity_query)  # a set: the intersection walks the smaller side (a dict's keys walk the unit's)
        for i in candidates:
            # Sorted, not in set order: a set of strings iterates in a per-process
            # (hash-seeded) order, and a float sum in another order can differ in its
            # last bit, enough to flip a tie between replicas.
            hits = sorted(corpus.feats[i].entities & asked)
            # A named entity of the current step counts even when common in this
            # conversation (a person everyone talks about). Most units share none: 0, as sum(()) is.
            shared[i] = sum(entity_query[ent] * max(corpus.eidf[ent], self.ENTITY_IDF_FLOOR) for ent in hits) \
                if hits else 0
            matched[i] = hits
        return shared, matched

    def _relevance(self, conv: Conversation, candidates: Sequence[int], feats: Sequence[_Features],
                   signals: _Signals) -> tuple[dict[int, float], set[int]]:
        """Each candidate's relevance (duplicates have none), and the hard user constraints."""
        rel: dict[int, float] = {}
        hard: set[int] = set()
        for i in candidates:
            if i in signals.duplicates:
                continue
            unit, f = conv.units[i], feats[i]
            lex = signals.lexical[i] / signals.top_lexical
            ent = 1 - math.exp(-signals.shared[i] / 6.0)
            relevance = self.W_LEX * lex + self.W_ENT * ent + self.W_REF * min(signals.references.get(i, 0), 3) / 3
            relevance += rubric.type_prior(unit.kind, f.constraint, f.error)
            if unit.kind == KIND_USER and f.constraint and unit.tokens <= 200 and rubric.is_imperative(unit.text):
                relevance = max(relevance, 0.9)
                hard.add(i)
            rel[i] = relevance
        return rel, hard

    def _tiered(self, conv: Conversation, candidates: Sequence[int], feats: Sequence[_Features],
                signals: _Signals, rel: Mapping[int, float], hard: set[int]) -> dict[int, UnitScore]:
        """The rubric tier of each candidate; the most relevant ``TOP_FRAC`` lifted to 4."""
        ranked = sorted(rel, key=lambda i: (-rel[i], -i))
        rank = {i: r for r, i in enumerate(ranked)}
        n_rel = len(ranked) or 1
        out: dict[int, UnitScore] = {}
        for i in candidates:
            unit, f = conv.units[i], feats[i]
            if i in signals.duplicates:
                out[i] = UnitScore(1, 0.0, "duplicate of a newer tool output")
                continue
            relevance = rel[i]
            tier = rubric.tier(relevance)
            if tier < 4 and relevance >= self.TOP_FLOOR and rank[i] < self.TOP_FRAC * n_rel:
                tier = 4
            copied = signals.copied.get(i, 0)
            if copied:
                # A kept later unit repeats its exact values (the model quoted it, a call's
                # argument reuses it): the strongest evidence of need there is, so it ranks
                # above every unit that is only on topic.
                tier, relevance = 5, relevance + self.COPIED_LIFT
            out[i] = UnitScore(tier, round(relevance, 6),
                               rubric.reason(i in hard, signals.lexical[i] / signals.top_lexical,
                                             signals.matched[i], signals.references.get(i, 0), unit.kind, f.error,
                                             copied),
                               i in hard)
        return out

    def _bm25(self, query: dict[str, float], corpus: _Corpus, candidates: Sequence[int], request: _Features,
              earlier: tuple[dict[str, float], dict[int, float]] | None = None) -> dict[int, float]:
        """BM25 of each candidate against the weighted ``query``. ``earlier``: a query
        this one extends (pseudo-relevance feedback appends terms, the weights of the
        others unchanged) and its scores. A unit with none of the added terms, walked
        on the same side, would repeat the same float operations: its score is reused."""
        k1, b = self.K1, self.B
        feats, idf, avg_len = corpus.feats, corpus.idf, corpus.avg_len
        out: dict[int, float] = {}
        weighted = [(term, w * idf.get(term, 0.0) * (k1 + 1)) for term, w in query.items() if w]
        # Apart, as the sums take them (bm25.py).
        query_terms, query_weights = [term for term, _ in weighted], [wi for _, wi in weighted]
        # w * idf, as the unit-side walk multiplies first (the same bits as inline).
        query_idf = {term: w * idf[term] for term, w in query.items() if w and term in idf}
        if earlier is not None:
            earlier_query, earlier_scores = earlier
            added = query.keys() - earlier_query.keys()
            earlier_weighted = sum(1 for w in earlier_query.values() if w)
        for i in candidates:
            f = feats[i]
            # (a dict's keys against a set: the walk takes the smaller side, the few added terms)
            if earlier is not None and f.counts.keys().isdisjoint(added) and \
                    (len(weighted) < len(f.counts)) == (earlier_weighted < len(f.counts)):
                out[i] = earlier_scores[i]
                continue
            norm = k1 * (1 - b + b * f.length / (avg_len or 1.0))
            counts = f.counts
            # Walk the smaller side (usually the query) in its order: the same float sum, bit for bit.
            if len(weighted) < len(counts):
                s = query_side(counts, query_terms, query_weights, norm)
            else:
                s = counts_side(counts, query_idf, norm, k1)
            if f.speaker and f.speaker in request.entities:
                s *= self.SPEAKER_BOOST
            out[i] = s
        return out

    def _expand(self, query: dict[str, float], lexical: dict[int, float], corpus: _Corpus) -> dict[str, float]:
        """Pseudo-relevance feedback: the best-matching units' distinctive terms
        join the query at a low weight (the request says 'trip', they say 'Chicago')."""
        feats, idf = corpus.feats, corpus.idf
        top = sorted((i for i in lexical if lexical[i] > 0), key=lambda i: (-lexical[i], -i))[: int(self.PRF_K)]
        if not top:
            return query
        best = lexical[top[0]]
        mass: Counter = Counter()
        for i in top:
            f = feats[i]
            share = lexical[i] / best
            for term, count in f.counts.items():
                if term not in query and not term.startswith("~"):
                    mass[term] += share * idf[term] * count / (f.length or 1)
        expanded = dict(query)
        ranked = sorted(mass.items(), key=lambda kv: (-kv[1], kv[0]))[: int(self.PRF_TERMS)]
        if ranked:
            top_mass = ranked[0][1]
            for term, m in ranked:
                expanded[term] = self.PRF_W * m / top_mass
        return expanded

    def _query_weights(self, conv: Conversation, window: Sequence[int], feats,
                       request: _Features) -> dict[str, float]:
        weights: dict[str, float] = {}
        for term in tf.term_counts(conv.goal_text):
            weights[term] = self.GOAL_W
        # The recent window says what the step is about when the request itself is
        # short ("yes, go ahead"); a self-contained request needs it less.
        window_w = _fading(self.WINDOW_W, self.WINDOW_HALF, request)
        if window_w > 0.01:
            for i in window:
                for term in feats[i].counts:
                    weights[term] = min(weights.get(term, 0.0) + window_w, self.WINDOW_CAP)
        for term in request.counts:
            weights[term] = weights.get(term, 0.0) + 1.0
        return weights

    def _entity_weights(self, conv: Conversation, window: Sequence[int], feats,
                        request: _Features) -> dict[str, float]:
        weights: dict[str, float] = {e: 0.4 for e in tf.entities(conv.goal_text)}
        before_chain = _fading(self.WINDOW_ENTITY_W, self.WINDOW_ENTITY_HALF, request)
        chain_start = conv.last_user_unit if conv.last_user_unit is not None else 0
        for i in window:
            w = self.WINDOW_ENTITY_W if i >= chain_start else before_chain
            for ent in feats[i].entities:
                weights[ent] = max(weights.get(ent, 0.0), w)
        for ent in request.entities:
            weights[ent] = 1.0
        return weights

    @staticmethod
    def _duplicates(conv: Conversation, candidates: Sequence[int]) -> set[int]:
        """Tool-chain units whose results repeat a newer unit's results verbatim."""
        newest: dict[tuple[tuple[str, ...], str], int] = {}
        dupes = set()
        for u in reversed(conv.units):
            if u.kind != KIND_TOOL_CHAIN or not u.tool_result_tokens:
                continue
            results = "\n".join(
                str(conv.messages[j].get("content")) for j in u.indices
                if conv.messages[j].get("role") in ("tool", "function")
            )
            key = (u.tool_names, results)
            if key in newest:
                dupes.add(u.index)
            else:
                newest[key] = u.index
        return dupes & set(candidates)


def _fading(weight: float, half: int | float, request: _Features) -> float:
    """``weight`` halved when the request has ``half`` terms of its own (prefix terms not
    counted), and further as it grows: the more a request says, the less its context must."""
    own = sum(1 for t in request.counts if not t.startswith("~"))
    return weight / (1.0 + own / half)

