"""Fixtures shared by the unit tests of pricing, savings and recording."""

from __future__ import annotations

import pytest

from gateway.telemetry.pricing import PriceBook, load_litellm_model_cost


@pytest.fixture(scope="session")
def model_cost():
    """litellm's offline price map, as the gateway reads it."""
    return load_litellm_model_cost()


@pytest.fixture(scope="session")
def book(model_cost):
    return PriceBook(model_cost)
