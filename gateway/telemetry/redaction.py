"""Keeping credentials and prompt content out of everything Sieve writes.

Two tools, one set of rules:

* :func:`redact` copies a JSON-like value with credential-named keys blanked
  and secrets scrubbed from strings (the audit log uses it);
* :func:`protect_logs` makes every log record of the process pass through the
  same scrubbing, whoever logs it (Sieve, aiohttp, uvicorn)::

      protect_logs([settings.upstream_api_key, settings.admin_key])

Scrubbing removes the literal secrets given (the gateway's configured keys),
key-shaped text (``Bearer …``, ``sk-…``, ``AKIA…``), which covers the clients'
own keys in passthrough, and the credentials a URL can carry
(``https://user:pass@host``, ``?api_key=…``): :func:`redact_url` is the one
rule for a URL, and every message, log record and audit line goes through it,
so an ``api_base`` or a Redis URL with a password in it can be shown anywhere. Exception messages never reach a log: a message can
quote a request (a parse error quoting a model's answer, a value in a
``ValueError``), and request content is logged only where a policy opts in, in
the audit log. A logged exception keeps its type and traceback, which is what
finding the bug needs.
"""

from __future__ import annotations

import logging
import re
import threading
import traceback
from typing import Any, Iterable, Mapping, Sequence

REDACTED = "[redacted]"
SECRET_KEY = re.compile(
    r"(?i)(authorization|api[-_]?key|secret|password|passwd|access[-_]?token|refresh[-_]?token"
    r"|bearer|credential|cookie)")
SECRET_TEXT = re.compile(
    r"(?i:bearer)\s+[A-Za-z0-9._~+/=-]{8,}"
    r"|\b(?:sk|rk|pk|sess)-[A-Za-z0-9_-]{12,}"
    r"|\bAKIA[0-9A-Z]{16}\b")
_MIN_SECRET_LEN = 8  # shorter literals would redact ordinary words
# A URL's userinfo (``scheme://user:pass@``): everything between the scheme and the last
# ``@`` before the host ends, whatever characters a password holds.
URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/?#\s]+@")
# Query parameters that carry a credential (``?key=``, ``&api_key=``, ``&sig=``), as some
# providers (Gemini, Azure SAS URLs) take them.
URL_SECRET_PARAM = re.compile(
    r"(?i)([?&](?:[a-z0-9_.-]*(?:key|token|secret|password|passwd|sig|signature|auth)[a-z0-9_.-]*)=)[^&#\s'\"]+")


def redact_url(url: str) -> str:
    """``url`` fit to show: userinfo and credential-named query values replaced by
    ``[redacted]``; scheme, host, port and path stay (they are what a reader needs)::

        redact_url("https://bob:hunter2@proxy.local/v1?api_key=x")
        # 'https://[redacted]@proxy.local/v1?api_key=[redacted]'
    """
    return URL_SECRET_PARAM.sub(lambda m: m.group(1) + REDACTED,
                                URL_USERINFO.sub(lambda m: m.group(1) + REDACTED + "@", url))


def redact(value: Any, secrets: Iterable[str] = ()) -> Any:
    """A copy of ``value`` with credential-named keys blanked and secrets scrubbed from strings."""
    return _redact(value, _literals(secrets))


def scrub(text: str, secrets: Iterable[str] = ()) -> str:
    return _scrub(text, _literals(secrets))


def without_secrets(data: bytes, secrets: Iterable[str]) -> bytes:
    """Raw bytes (a provider's error body) with the literal secrets cut out and nothing else
    touched: some providers echo the key they were given ("Incorrect API key provided:
    sk-..."), and a client must never learn the org's key."""
    for secret in _literals(secrets):
        raw = secret.encode()
        if raw in data:
            data = data.replace(raw, REDACTED.encode())
    return data


def _literals(secrets: Iterable[str]) -> list[str]:
    # Longest first, so a key that contains another is removed whole.
    return sorted({s for s in secrets if s and len(s) >= _MIN_SECRET_LEN}, key=len, reverse=True)


def _scrub(text: str, literals: Sequence[str]) -> str:
    for secret in literals:
        if secret in text:
            text = text.replace(secret, REDACTED)
    if "://" in text:
        text = redact_url(text)
    return SECRET_TEXT.sub(REDACTED, text) if _may_hold_key(text) else text


def _may_hold_key(text: str) -> bool:
    """Whether ``SECRET_TEXT`` can match: each of its forms starts with one of these words.
    Substring tests are a tenth of the pattern's scan, and every log record (an access line
    per request) goes through here."""
    return ("-" in text and ("sk-" in text or "rk-" in text or "pk-" in text or "sess-" in text)) \
        or "AKIA" in text or "bearer" in text.lower()


def _redact(value: Any, literals: Sequence[str]) -> Any:
    if isinstance(value, str):
        return _scrub(value, literals)
    if isinstance(value, Mapping):
        return {k: (REDACTED if isinstance(k, str) and SECRET_KEY.search(k) and v is not None
                    else _redact(v, literals))
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_redact(v, literals) for v in value]
    return value


# -- logs ---------------------------------------------------------------------------------------------

_lock = threading.Lock()
_secrets: set[str] = set()
_literal_list: list[str] = []
_installed = False


def protect_logs(secrets: Iterable[str] = ()) -> None:
    """Scrub every log record of this process from now on; ``secrets`` join the literals
    (several gateways in one process, as in tests, each add theirs)."""
    global _installed, _literal_list
    with _lock:
        _secrets.update(s for s in secrets if s)
        _literal_list = _literals(_secrets)
        if _installed:
            return
        make_record = logging.getLogRecordFactory()

        def protected_record(*args: Any, **kwargs: Any) -> logging.LogRecord:
            return _protect(make_record(*args, **kwargs))

        logging.setLogRecordFactory(protected_record)
        _installed = True


def _protect(record: logging.LogRecord) -> logging.LogRecord:
    try:
        message = record.getMessage()
    except Exception:  # noqa: BLE001 - a malformed log call still logs its format string
        message = str(record.msg)
    record.msg, record.args = _scrub(message, _literal_list), None
    if record.exc_info and record.exc_info[0] is not None:
        kind, _, tb = record.exc_info
        frames = "".join(traceback.format_tb(tb)) if tb is not None else ""
        record.exc_text = _scrub(f"Traceback (most recent call last):\n{frames}"
                                 f"{kind.__module__}.{kind.__qualname__} (message withheld: it may quote a request)",
                                 _literal_list)
        record.exc_info = None  # no handler may format the original (message included) again
    return record
