"""Where each format's requests go, and with which key: the router and the key headers."""

from __future__ import annotations

import pytest

from gateway.errors import InvalidRequest, UnknownModel
from gateway.config.settings import ModelRoute, RouteKind, Settings
from gateway.upstream.base import KeyScheme
from gateway.upstream.openai_compat import forward_headers, key_headers
from gateway.upstream.router import ModelRouter
from gateway.wire.call import ANONYMOUS, Identity, IdentityKind
from gateway.wire.formats import WireFormat

VIRTUAL = Identity("acme")
PASSTHROUGH = Identity("acme", kind=IdentityKind.PASSTHROUGH)


def router(**overrides) -> ModelRouter:
    return ModelRouter(Settings(**overrides), {})


def test_each_format_goes_to_its_own_endpoint():
    r = router(upstream_base_url="http://up/v1/", upstream_api_key="sk-up", anthropic_base_url="http://ant/",
               anthropic_api_key="sk-ant")
    chat, responses = r.resolve("gpt-5"), r.resolve("gpt-5", WireFormat.RESPONSES)
    assert (chat.url, responses.url) == ("http://up/v1/chat/completions", "http://up/v1/responses")
    assert chat.api_key == responses.api_key == "sk-up" and responses.key_scheme is KeyScheme.BEARER
    messages = r.resolve("claude-opus-4", WireFormat.MESSAGES)
    assert (messages.url, messages.api_key, messages.key_scheme) == ("http://ant/v1/messages", "sk-ant",
                                                                     KeyScheme.X_API_KEY)
    assert r.default_route(WireFormat.RESPONSES).url == "http://up/v1/responses"


def test_the_anthropic_default_is_anthropics_api_and_responses_need_an_openai_compatible_route():
    assert router().resolve("claude", WireFormat.MESSAGES).url == "https://api.anthropic.com/v1/messages"
    with pytest.raises(UnknownModel):
        router().default_route(WireFormat.RESPONSES)
    via_litellm = router(models={"bedrock-x": ModelRoute("bedrock-x", RouteKind.LITELLM, litellm_model="b/x")})
    assert via_litellm.resolve("bedrock-x").kind is RouteKind.LITELLM
    with pytest.raises(InvalidRequest, match="litellm"):
        via_litellm.resolve("bedrock-x", WireFormat.RESPONSES)


def test_key_headers_per_scheme():
    r = router(upstream_base_url="http://up/v1", anthropic_base_url="http://ant")
    anthropic, openai = r.resolve("claude", WireFormat.MESSAGES), r.resolve("gpt", WireFormat.RESPONSES)
    # The client's own key (open or passthrough mode) goes in the header it came in.
    assert key_headers(anthropic, ANONYMOUS, {"x-api-key": "sk-own"}) == {"x-api-key": "sk-own"}
    assert key_headers(anthropic, PASSTHROUGH, {"authorization": "Bearer oauth-token"}) == {
        "authorization": "Bearer oauth-token"}
    assert key_headers(openai, ANONYMOUS, {"x-api-key": "sk-own"}) == {"authorization": "Bearer sk-own"}
    # A virtual key never leaves the gateway.
    assert key_headers(anthropic, VIRTUAL, {"x-api-key": "sk-sieve-virtual"}) == {}
    configured = router(anthropic_api_key="sk-ant").resolve("claude", WireFormat.MESSAGES)
    assert key_headers(configured, VIRTUAL, {"x-api-key": "sk-sieve-virtual"}) == {"x-api-key": "sk-ant"}


def test_forwarded_headers_drop_the_clients_key_headers_and_keep_the_rest():
    incoming = {"authorization": "Bearer sk-sieve", "x-api-key": "sk-sieve", "anthropic-version": "2023-06-01",
                "anthropic-beta": "a,b", "session-id": "s-1", "x-sieve-target-tokens": "900", "host": "sieve"}
    out = forward_headers(incoming, {"x-api-key": "sk-ant"})
    assert out == {"anthropic-version": "2023-06-01", "anthropic-beta": "a,b", "session-id": "s-1",
                   "x-api-key": "sk-ant", "content-type": "application/json", "accept-encoding": "identity"}
