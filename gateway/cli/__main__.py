"""``python -m gateway.cli``: the same command line as the ``sieve`` script."""

from gateway.cli.main import main

raise SystemExit(main())
