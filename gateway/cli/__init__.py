"""The command line: ``sieve serve``, ``sieve check``, offline prune and replay, the shadow report.

    python -m gateway.cli serve --port 8000
"""

from gateway.cli.main import main

__all__ = ["main"]
