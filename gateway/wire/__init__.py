"""The wire layer: what arrives and leaves, as data, below every other layer but the pure core.

* :mod:`gateway.wire.body`    reading and parsing a request body
* :mod:`gateway.wire.chat`    the Chat Completions body, checked where Sieve relies on it
* :mod:`gateway.wire.headers` the ``x-sieve-*`` request and response headers
* :mod:`gateway.wire.sse`     the server-sent-events relay that reads usage on the way
* :mod:`gateway.wire.call`    one parsed, authorized request (``ModelCall``) and its ``Identity``

Nothing here knows the web framework or does I/O of its own: the routes in
``gateway.api`` hand it bytes and header mappings.
"""
