"""Sieve's C extensions: text_features's token loop (gateway/pruning/_token_scan.c), the
scan of a text's runs for values (gateway/pruning/_value_runs.c) and the local scorer's
BM25 sums (gateway/pruning/_bm25.c).

Everything else is in pyproject.toml. The extensions are optional: where they do
not compile (no C compiler), the install goes on and the same loops run in
Python (gateway/pruning/token_scan.py, value_runs.py, bm25.py; docs/speed.md).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("gateway.pruning._token_scan", ["gateway/pruning/_token_scan.c"], optional=True),
                   Extension("gateway.pruning._value_runs", ["gateway/pruning/_value_runs.c"], optional=True),
                   Extension("gateway.pruning._bm25", ["gateway/pruning/_bm25.c"], optional=True,
                             extra_compile_args=["-ffp-contract=off"])])
