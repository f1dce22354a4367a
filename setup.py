"""The one C extension: text_features's token loop (gateway/pruning/_token_scan.c).

Everything else is in pyproject.toml. The extension is optional: where it does
not compile (no C compiler), the install goes on and the same loop runs in
Python (gateway/pruning/token_scan.py; docs/speed.md).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("gateway.pruning._token_scan", ["gateway/pruning/_token_scan.c"], optional=True)])
