"""An upstream URL that carries credentials, and the key that would go with it: refused at start-up.

``https://user:pass@proxy/v1`` sends its credentials as ``Authorization: Basic``, the
header a Bearer key needs too: a request cannot carry both (one of them would be dropped
without a word: the forwarding client sends the Bearer key). So a configuration where a
Bearer key goes to such a URL, one configured for it or the callers' own provider keys,
is a start-up error that says so::

    check_url_credentials(settings)   # ConfigError naming the setting

A URL with credentials and no Bearer key beside it (virtual keys, no key configured for
it) works: the credentials are the upstream's only authentication.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from gateway.errors import ConfigError
from gateway.config import RouteKind, Settings

__all__ = ["check_url_credentials", "forwards_client_keys"]


def forwards_client_keys(settings: Settings) -> bool:
    """Whether a caller's own provider key may go upstream: an open gateway (no key of any kind
    configured) or passthrough keys; a virtual key never leaves the gateway."""
    open_gateway = not settings.virtual_keys and settings.keys_file is None and not settings.passthrough \
        and not settings.admin_key
    return open_gateway or bool(settings.passthrough)


def check_url_credentials(settings: Settings) -> None:
    """ConfigError when a Bearer key would go to an upstream URL that carries credentials."""
    clients = forwards_client_keys(settings)
    bearer = [("SIEVE_UPSTREAM_BASE_URL", settings.upstream_base_url, settings.upstream_api_key)]
    bearer += [(f"models.{route.name}.api_base", route.api_base, route.api_key)
               for route in settings.models.values() if route.kind is RouteKind.OPENAI]
    for where, url, key in bearer:
        if url and _has_credentials(url) and (key or clients):
            whose = "its configured API key" if key else "the callers' own provider keys"
            raise ConfigError(f"{where}: the URL carries credentials (user:pass@), and {whose} would go with it "
                              "as 'Authorization: Bearer': a request cannot carry both. Drop the credentials "
                              "from the URL, or the key")
    # A configured Anthropic key goes as x-api-key, beside the credentials; a caller's OAuth token as a Bearer.
    if _has_credentials(settings.anthropic_base_url) and clients:
        raise ConfigError("SIEVE_ANTHROPIC_BASE_URL: the URL carries credentials (user:pass@), and the callers' own "
                          "keys may go with it as 'Authorization: Bearer': drop the credentials from the URL")


def _has_credentials(url: str) -> bool:
    return urlsplit(url).username is not None
