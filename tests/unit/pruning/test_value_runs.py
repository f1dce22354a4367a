"""The value-run scan in C (``_value_runs``) reads exactly what its Python twin reads.

``value_runs.value_runs`` and ``value_spans`` run in C where the extension is built
(``value_runs.NATIVE``), in Python elsewhere; the ids of masks and markers, and so the
pruned bytes, must not depend on which. These tests hold the C functions to the Python
ones on generated text, on the shapes where a run and its tests part ways (JSON escapes
before and after small letters, dots and capitals at a run's edges, non-ASCII word
characters and separators, CJK, quotes, JSON, paths, e-mails), and on the real texts of the
shipped dev sessions; and the readers of ``ids`` to the same values on either path.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gateway.pruning import ids, value_runs
from gateway.pruning.values import is_strong, values_of
from tests.unit.pruning.test_runs import EDGE_CASES, regex_ids
from tests.unit.pruning.test_token_scan import real_texts

native = pytest.importorskip("gateway.pruning._value_runs", reason="the C extension is not built here")

PIECES = st.sampled_from([
    "a", "z", "Z", "Q", "9", "123", "_", "#", "$", "@", "/", "-", "+", ":", ".", "..", " ", "\n", "\t", "\\",
    "\\n", "\\t", "\\r", "\\\\n", "\\nfoo", "\\nBar", "\\u00e9", "\"", "'", ",", "{", "}", "[", "]", "é", "É",
    "中文", "不要", "’", "“", "—", "\u00a0", "①", "٣", "²", "ǅ", "İ", "😀", "aB", "AbC", "a.B", "A.b", "x.", ".y",
    "McDonald", "getUser", "HTTPServer", "SFO", "ZK4P2M", "#W1234567", "noah.ito@example.com", "src/app/main.py:42",
    "C:\\new_dir", "https://example.com/a", "order_id", "\"order_id\": \"#W42\"", "{\"k\": \"v\\nW\"}", "14:30",
    "$12.50", "a-B", "A-B", "Ab-Cd", "İx", "xİ", "éB", "Bé", "ÀB",
])
TEXTS = st.lists(PIECES, max_size=60).map("".join) | st.text(max_size=200)
ODD_CASES = ["", "\\", "\\n", "a\\n", "a\\nb", "a\\nB", "\\\\n", "x\\n", "a.B", "a.", ".a", "aB.", "A", "AB", "A-B",
             "AÉB", "A٣B", "é.B", "中.文", "a:B", "\\r\\n\\tX"]


def same_runs(text: str) -> None:
    value_runs.clear_run_tests()
    for strong in (False, True):
        assert native.value_runs(text, strong) == value_runs.python_value_runs(text, strong)
    assert native.value_spans(text) == value_runs.python_value_spans(text)
    assert native.quoted_codes(text) == value_runs.python_quoted_codes(text)


JSON_PIECES = st.sampled_from([
    "\"", "\"", "\"", ": ", ", ", ",", "}", "]", "{", "[", " ", "\n", "\t", "\u00a0", "\u2003", "a", "Z", "_",
    ".", "+", "-", "9", "ab", "aB", "a_b", "basic_economy", "SFO", "Ab", "x.y", "a+B", "-x", "é", "É", "中", "٣",
    "\"cabin\"", "\"basic_economy\"", "\"status\": \"pending\"", "\"k\":\"v_W\"}", "'", "\\",
])
JSON_TEXTS = st.lists(JSON_PIECES, max_size=50).map("".join)


def test_the_native_scan_is_in_use_where_it_is_built():
    assert value_runs.NATIVE and value_runs.value_runs is native.value_runs
    assert value_runs.value_spans is native.value_spans


@pytest.mark.parametrize("text", EDGE_CASES + ODD_CASES)
def test_edge_cases_read_alike(text):
    same_runs(text)


@settings(max_examples=1500, deadline=None)
@given(TEXTS)
@example("a.B x\\nY é中 aB")
def test_runs_are_the_python_runs(text):
    same_runs(text)


@settings(max_examples=1500, deadline=None)
@given(JSON_TEXTS)
@example('"aB", "a_b"]"Ab"}"x.y" ,')
@example('"SFO"\u2003}"_"]"a+B"\n,')
def test_quoted_codes_are_the_regex_ones(text):
    assert native.quoted_codes(text) == value_runs.python_quoted_codes(text)


def test_real_texts_read_alike():
    texts = real_texts()
    assert len(texts) > 1000
    for text in texts:
        same_runs(text)


@pytest.fixture(params=["native", "python"])
def path(request, monkeypatch):
    """The readers of ids on the C scan, and on the Python fallback (no extension built)."""
    if request.param == "python":
        monkeypatch.setattr(ids, "value_runs", value_runs.python_value_runs)
        monkeypatch.setattr(ids, "value_spans", value_runs.python_value_spans)
        monkeypatch.setattr(ids, "quoted_codes", value_runs.python_quoted_codes)
    ids.clear_ids_memo()
    yield request.param
    ids.clear_ids_memo()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(TEXTS)
def test_ids_are_the_regex_ids_on_either_path(path, text):
    ids.clear_ids_memo()
    assert ids.text_ids(text) == regex_ids(text)
    ids.clear_ids_memo()
    assert ids.strong_ids(text) == tuple(v for v in regex_ids(text) if ids.is_strong(v))
    assert ids.ids_in([text]) == set(regex_ids(text, field_keys=True))


def regex_field_codes(text: str) -> tuple[str, ...]:
    """``ids.field_codes`` as one regex reads it: every form a text may hold in one pattern."""
    repr_, lines = "':" in text, bool(ids._line_keys(text))
    pattern = re.compile("|".join([value_runs.QUOTED_CODE] + ([ids._SINGLE_QUOTED_VALUE] if repr_ else [])
                                  + ([ids._LINE_VALUE] if lines else [])), re.M)
    values = pattern.findall(text)
    if pattern.groups > 1:
        values = [v for groups in values for v in groups]
    return tuple(dict.fromkeys(v for v in values if v and len(v) < 40 and not is_strong(v) and values_of(v) == (v,)))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(JSON_TEXTS | TEXTS | st.sampled_from(["a: B_C\nb: x\nc: D.e\n- FOO", "{'k': 'A_B', 'j': 'x'}"]))
def test_field_codes_are_the_regex_codes_on_either_path(path, text):
    ids.clear_ids_memo()
    assert ids.field_codes(text) == regex_field_codes(text)


def test_field_codes_of_real_texts_on_either_path(path):
    for text in real_texts():
        assert ids.field_codes(text) == regex_field_codes(text)


def test_omitted_ids_rank_alike_on_either_path():
    """A marker's ids read from real outputs: the same list from the C scan and from Python."""
    ids.clear_ids_memo()
    texts = [(text, i % 3 == 0) for i, text in enumerate(real_texts()[:400])]
    listed = ids.omitted_ids(iter(texts), {"W1"}, 400, lambda value: len(value) // 3 + 1, ("refund", "order"))
    ids.clear_ids_memo()
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(ids, "value_runs", value_runs.python_value_runs)
        patched.setattr(ids, "value_spans", value_runs.python_value_spans)
        patched.setattr(ids, "quoted_codes", value_runs.python_quoted_codes)
        assert ids.omitted_ids(iter(texts), {"W1"}, 400, lambda value: len(value) // 3 + 1,
                               ("refund", "order")) == listed
    assert listed


# A prune of each shipped domain's longest session at a third of its tokens: the forwarded
# messages as JSON. Run here and in a process where no C extension can be imported.
_PRUNE_SESSIONS = """
import gzip, json, sys
from gateway.pruning import bm25, text_features, value_runs
from gateway.pruning.pipeline import prune
from gateway.pruning.policy import Policy, Steering
from gateway.pruning.scoring import LocalScorer
from gateway.pruning.tokens import TokenCounters
counter = TokenCounters().for_model("gpt-4o-mini")
out = {"native": [text_features.NATIVE, value_runs.NATIVE, bm25.NATIVE], "forwarded": []}
for name in ("coding", "airline", "telecom"):
    sessions = [json.loads(line) for line in gzip.open(f"bench/data/dev-sessions-{name}.jsonl.gz", "rt")]
    messages = max((s["messages"] for s in sessions), key=len)
    target = counter.count_messages(messages) // 3
    result = prune({"model": "gpt-4o-mini", "messages": messages}, Policy(), scorer=LocalScorer(), counter=counter,
                   steering=Steering(target_tokens=target))
    out["forwarded"].append(result.request["messages"])
print(json.dumps(out, sort_keys=True))
"""
_WITHOUT_EXTENSIONS = ("import sys; sys.modules['gateway.pruning._token_scan'] = None; "
                       "sys.modules['gateway.pruning._value_runs'] = None; sys.modules['gateway.pruning._bm25'] = None\n")


def test_a_prune_forwards_the_same_bytes_without_the_extensions():
    """The package runs where nothing compiles: the Python twins (token_scan.py, value_runs.py,
    bm25.py) give the same prunes."""
    root = Path(__file__).resolve().parents[3]
    runs = [json.loads(subprocess.run([sys.executable, "-c", prelude + _PRUNE_SESSIONS], cwd=root, check=True,
                                      capture_output=True, text=True).stdout)
            for prelude in ("", _WITHOUT_EXTENSIONS)]
    assert [run["native"] for run in runs] == [[True] * 3, [False] * 3]
    assert runs[0]["forwarded"] == runs[1]["forwarded"]
    assert any("[sieve: masked" in json.dumps(m) for m in runs[0]["forwarded"][0])
