"""The chat body's fields Sieve reads are checked before anything reserves on them."""

from __future__ import annotations

import pytest

from gateway.errors import InvalidRequest
from gateway.wire import check_chat_body

BODY = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize("n", [1, 2, 128, 3.0])
def test_a_whole_number_of_answers_passes(n: object) -> None:
    check_chat_body({**BODY, "n": n})


@pytest.mark.parametrize("n", [{}, [], "2", True, 0, -1, 129, 2.5])
def test_any_other_n_is_a_400_naming_it(n: object) -> None:
    # {"n": {}} fitted the published schema (n undeclared) and met a 400 only in the budget's
    # reservation, so the schema fuzzer saw a valid body refused, and routes without a budget
    # forwarded it.
    with pytest.raises(InvalidRequest) as refused:
        check_chat_body({**BODY, "n": n})
    assert refused.value.param == "n"
