"""The providers behind one interface: ``Upstream.send(route, call, body)``, the fast
HTTP/1.1 path and litellm, the router that picks one per model.
"""

from gateway.upstream.base import ResolvedRoute, Upstream, UpstreamResponse
from gateway.upstream.credentials import check_url_credentials
from gateway.upstream.http1 import Http1Client
from gateway.upstream.litellm_route import LiteLLMUpstream
from gateway.upstream.models import ModelCatalog
from gateway.upstream.openai_compat import OpenAICompatibleUpstream, provider_headers
from gateway.upstream.router import ModelRouter

__all__ = [
    "Http1Client",
    "LiteLLMUpstream",
    "ModelCatalog",
    "ModelRouter",
    "OpenAICompatibleUpstream",
    "ResolvedRoute",
    "Upstream",
    "UpstreamResponse",
    "check_url_credentials",
    "provider_headers",
]
