"""The value reader against a corpus of shapes from many domains, and what it must leave alone.

Each line is a text an agent might read (a tool output, a log, a chat turn) and
the exact values its next step could copy. The reader is held to all of them:
the values are found (``text_ids``, what masks keep and markers list), and the
words, counts, years and prices around them are not.
"""

from __future__ import annotations

import json

import pytest

from gateway.pruning.compression import kept_values
from gateway.pruning.ids import clear_ids_memo, ids_in, omitted_ids, text_ids
from gateway.pruning.messages import readable_text
from gateway.pruning.tokens import TokenCounters
from gateway.pruning.values import is_strong, values_of

COUNTER = TokenCounters().for_model("gpt-4o-mini")

# (domain, text, values that must be read)
FOUND = [
    # customer service
    ("support", "Your ticket TKT-4821 was escalated; case INC0012345 is linked.", ["TKT-4821", "INC0012345"]),
    ("support", "Confirmation code: X7K9Q. Reply to help@shop.example.org.", ["X7K9Q", "help@shop.example.org"]),
    ("support", "Order #W42 ships with order #W1000001.", ["#W42", "#W1000001"]),
    ("support", "Call us at +1-555-123-4567 or 555-1234.", ["1-555-123-4567", "555-1234"]),
    ("support", "Mail noah.ito@example.com about it.", ["noah.ito@example.com"]),
    ("support", "SKU AB-12 and SKU-9X are out of stock.", ["AB-12", "SKU-9X"]),
    # travel
    ("travel", "Flight SFO to JFK, record locator ZK4P2M, seat 12A.", ["SFO", "JFK", "ZK4P2M", "12A"]),
    ("travel", "PNR KXJTQE departs 14:30 on 2024-05-12 from gate B12.", ["KXJTQE", "14:30", "2024-05-12", "B12"]),
    ("travel", "Check-in opens 9:05, booking ref QF-77.", ["9:05", "QF-77"]),
    # finance
    ("finance", "Refund of $45.99 to card ending 4242 (USD), invoice INV-2024-0042.", ["$45.99", "USD", "INV-2024-0042"]),
    ("finance", "Transfer EUR to IBAN DE89370400440532013000 on 12/05/2024.", ["EUR", "DE89370400440532013000",
                                                                           "12/05/2024"]),
    ("finance", "Account acct_1Hh2xY settled; payment_method credit_card_2112420.", ["acct_1Hh2xY", "payment_method",
                                                                                  "credit_card_2112420"]),
    # coding
    ("coding", "  File \"src/app/main.py\", line 42, in load_config", ["src/app/main.py", "load_config"]),
    ("coding", "gateway/pruning/ids.py:57: AssertionError", ["gateway/pruning/ids.py:57", "AssertionError"]),
    ("coding", "TypeError: getUserById() missing 1 required argument", ["TypeError", "getUserById"]),
    ("coding", "see https://docs.python.org/3/library/re.html and os.path.join", ["https://docs.python.org/3/library/re.html",
                                                                             "os.path.join"]),
    ("coding", "commit a3f9c21 bumps v1.2.3; class LocalScorer in scoring.py", ["a3f9c21", "v1.2.3", "LocalScorer",
                                                                              "scoring.py"]),
    ("coding", "pylint E1101 and ERR_CONNECTION_REFUSED", ["E1101", "ERR_CONNECTION_REFUSED"]),
    ("coding", "FAILED tests/unit/test_values.py::test_found - KeyError", [
        "tests/unit/test_values.py::test_found", "KeyError"]),  # a test's node id, whole
    # operations
    ("ops", "open /etc/nginx/nginx.conf: ENOENT", ["/etc/nginx/nginx.conf", "ENOENT"]),
    ("ops", "request 550e8400-e29b-41d4-a716-446655440000 at 2024-05-12T14:30:00Z", [
        "550e8400-e29b-41d4-a716-446655440000", "2024-05-12T14:30:00Z"]),
    ("ops", "pod api-7d9f8-x2k restarted on node ip-10-0-3-17", ["api-7d9f8-x2k", "ip-10-0-3-17"]),
    ("ops", "ping @alice in #incidents about host db01.internal", ["@alice", "#incidents", "db01.internal"]),
]

# (domain, text): nothing here is a value
NOTHING = [
    ("prose", "Hello, I would like to return the lamp I bought last week."),
    ("prose", "In 2019 we went to Paris; in 2021, twice more."),           # years in prose
    ("prose", "It costs 45.99 and weighs 3.5 kg; buy 2 or 3."),           # prices, counts
    ("log", "status 503 after 120 retries"),  # a bare number of up to four digits reads as a count
    ("prose", "The 3rd option at 10am: 16GB, 1080p, a 15-inch screen."),  # ordinals, measures
    ("prose", "NOTE: please read this. IMPORTANT! OK, thanks."),          # emphasis in capitals
    ("prose", "Use e.g. this and/or that, about 1/2 of it."),
    ("prose", "Isabella Johansson lives in Chicago."),                    # names are words by shape
    ("log", "ERROR:root:boom"),
    ("markup", "<returncode>0</returncode>\n<output>\n</output>"),      # closing tags are no paths
]


@pytest.mark.parametrize("domain,text,expected", FOUND, ids=[f"{d}-{n}" for n, (d, _, _) in enumerate(FOUND)])
def test_the_values_of_each_domain_are_read(domain, text, expected):
    clear_ids_memo()
    found = text_ids(text)
    assert [v for v in expected if v not in found] == []
    assert set(expected) <= ids_in([text])


@pytest.mark.parametrize("domain,text", NOTHING, ids=[f"{d}-{n}" for n, (d, _) in enumerate(NOTHING)])
def test_words_counts_years_and_prices_are_not_values(domain, text):
    clear_ids_memo()
    assert text_ids(text) == ()


def test_a_json_objects_keys_are_fields_but_an_id_used_as_a_key_is_a_value():
    text = json.dumps({"order_id": "#W6239298", "user_id": "lucas_brown_6720", "country": "USA",
                       "variants": {"6805564527": {"available": True}}})
    assert text_ids(text) == ("#W6239298", "lucas_brown_6720", "USA", "6805564527")
    # masks: what names a record, then the record's codes
    assert kept_values(text) == ["#W6239298", "lucas_brown_6720", "6805564527", "USA"]


def test_a_mask_keeps_the_codes_a_record_holds_as_field_values_but_not_codes_in_prose_or_code():
    record = json.dumps({"reservation_id": "HTGCBX", "origin": "SFO", "flight_type": "one_way",
                         "cabin": "basic_economy", "status": "pending", "name": "Sophia", "flights": ["HAT097"]})
    assert kept_values(record) == ["HAT097", "HTGCBX", "SFO", "one_way", "basic_economy"]
    prose = "The SFO office said USB and HEPA parts ship one_way; see parse_args in main."
    code = 'def parse_args(argv):\n    MAX_RETRIES = 3\n    return ArgParser(argv).run()'
    assert kept_values(prose) == [] and kept_values(code) == []


def test_a_record_printed_as_yaml_keeps_its_codes_and_its_keys_are_fields():
    """The same record as ``key: value`` lines (how many tools print one): its field values
    are its codes, its keys are fields, not values; a traceback's one 'ValueError: ...'
    line or a 'Note: ...' in prose makes no record."""
    clear_ids_memo()
    record = ("reservation_id: HTGCBX\norigin: SFO\nflight_type: one_way\ncabin: basic_economy\n"
              "status: pending\nname: Sophia\naddress:\n  address1: 159 Hickory Lane\n  zip: 28243\n"
              "flights:\n  - HAT097\n  - LBKQZR")
    assert kept_values(record) == ["28243", "HAT097", "HTGCBX", "SFO", "one_way", "basic_economy", "LBKQZR"]
    assert "address1" not in text_ids(record) and "reservation_id" not in text_ids(record)
    traceback = 'Traceback (most recent call last):\n  File "app.py", line 3, in f\nValueError: bad parse_args'
    assert "ValueError" in text_ids(traceback) and "parse_args" in text_ids(traceback)
    assert kept_values("Note: SFO_HUB\nThe office moved.\nCall us.\nThanks.") == []


def test_a_record_printed_as_a_python_repr_reads_like_its_json():
    """``str(dict)``, what a LangChain tool's output often is: single quotes, same record."""
    clear_ids_memo()
    record = {"reservation_id": "HTGCBX", "origin": "SFO", "cabin": "basic_economy", "status": "pending",
              "address": {"address1": "159 Hickory Lane", "zip": "28243"}, "flights": ["HAT097", "LBKQZR"]}
    assert kept_values(repr(record)) == kept_values(json.dumps(record))
    assert text_ids(repr(record)) == text_ids(json.dumps(record))
    assert "address1" not in text_ids(repr(record)) and "SFO" in kept_values(repr(record))


def test_a_numbered_field_is_a_field_and_an_id_key_stays_a_value():
    """``address1``, ``line_2``: the second of a kind of field, not a record."""
    for clear in (True, False):  # masks read strong ids alone, markers every value: both skip the fields
        clear_ids_memo()
        text = json.dumps({"address": {"address1": "159 Hickory Lane", "line_2": "Suite 995", "zip": "28243"},
                           "items": {"6805564527": {"sku": "AB12"}, "row12": {"seat": "12A"}}})
        ids = kept_values(text) if clear else text_ids(text)
        assert "address1" not in ids and "line_2" not in ids
        assert "6805564527" in ids and "28243" in ids
        assert "row12" not in ids  # a numbered word used as a key reads as a field too: the rule is by shape


def test_values_that_name_one_record_come_first_where_room_is_short():
    assert [is_strong(v) for v in ("#W1", "a@b.io", "src/x.py", "USD", "LocalScorer", "get_user")] == \
        [True, True, True, False, False, False]
    listing = "\n".join(f"plug USB, power HEPA, item {1000000 + i}" for i in range(60))
    assert kept_values(listing)[:48] == [str(1000000 + i) for i in range(48)]
    ids = omitted_ids([(listing, False)], set(), room=12, count_text=COUNTER.count_text)
    assert ids and all(v.isdigit() for v in ids)


def test_a_run_edge_is_punctuation_not_part_of_the_value():
    assert values_of("#W42.") == ("#W42",)
    assert values_of("order:#W123") == ("#W123",)
    assert values_of("/etc/hosts") == ("/etc/hosts",)


def test_a_call_is_read_as_its_decoded_arguments_apart_from_the_words_before_it():
    args = json.dumps({"command": "cat <<'EOF' > check_fields.py\nimport os\nnew_lines = []\nEOF"})
    message = {"role": "assistant", "content": "Let me see the structure.",
               "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": args}}]}
    values = text_ids(readable_text(message))
    assert "check_fields.py" in values and "new_lines" in values
    # the counted text runs the words into the call's name and keeps JSON's escapes
    assert not {"structure.bash", "nnew_lines", "nimport"} & set(values)
