"""A coding agent's working set: the calls' own values, the last view of what recent calls
name, superseded reads, the names a file view's mask keeps, and room a shed window frees."""

from __future__ import annotations

import json

from gateway.pruning.conversation import build_conversation
from gateway.pruning.markers import omitted_ids_reserve
from gateway.pruning.pipeline import prune
from gateway.pruning.policy import Policy, Steering
from gateway.pruning.protection import protect
from gateway.pruning.scoring import LocalScorer
from gateway.pruning.tokens import TokenCounters
from gateway.pruning.working_set import superseded, working_set

COUNTER = TokenCounters().for_model("gpt-4o-mini")

WORDS = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa "
         "quebec romeo sierra tango uniform victor whiskey xray yankee zulu").split()
# A source file whose names hold no digit (values by shape only: names of code).
SOURCE = "\n".join(
    f"class {w.title()}Parser:\n    def parse_{w}_field(self, raw_{w}):\n        self._{w}_fields.append(raw_{w}.strip())\n"
    f"        return self._{w}_fields\n" for w in WORDS)


def call(n: int, command: str, thought: str = "") -> dict:
    return {"role": "assistant", "content": thought or None,
            "tool_calls": [{"id": f"call_{n}", "type": "function",
                            "function": {"name": "bash", "arguments": json.dumps({"command": command})}}]}


def output(n: int, text: str) -> dict:
    return {"role": "tool", "tool_call_id": f"call_{n}", "content": f"<returncode>0</returncode>\n<output>\n{text}\n</output>"}


def session(*steps: tuple[str, str, str]) -> list[dict]:
    """A task, then one exchange per (thought, command, output)."""
    messages = [{"role": "system", "content": "You work in a shell."},
                {"role": "user", "content": "Fix the header parser: parsing drops the last field."}]
    for n, (thought, command, text) in enumerate(steps):
        messages += [call(n, command, thought), output(n, text)]
    return messages


def test_the_last_view_of_what_a_recent_call_names_is_the_working_set():
    messages = session(("", "cat parser/header.py", SOURCE),
                       ("", "cat parser/body.py", "x = 1"),
                       ("", "sed -n '10,20p' parser/header.py", SOURCE[:400]),
                       ("", "ls tests", "test_header.py"),
                       ("", "grep -n parse_delta_field parser/header.py", "10: def parse_delta_field"))
    conv = build_conversation(messages, COUNTER.count_message)
    window, candidates = [6], [2, 3, 4, 5]
    assert working_set(conv, candidates, window) == {4: 1}      # the sed view, newer than the cat
    assert working_set(conv, [2, 3, 5], window) == {2: 1}       # without it, the cat is the last view
    assert working_set(conv, candidates, [5]) == {}             # `ls tests` names nothing viewed before


def test_an_edit_with_no_output_is_not_the_last_view_of_the_file_it_edits():
    # The agent read the file, edited a line of it (no output), and names it again: what
    # it last saw of the file is the read, which its next edit copies from.
    messages = session(("", "nl -ba parser/header.py", SOURCE),
                       ("", "sed -i '52s/strip/rstrip/' parser/header.py", ""),
                       ("", "python -m pytest tests/test_header.py", "1 failed"),
                       ("", "grep -n parse_delta_field parser/header.py", "10: def parse_delta_field"))
    conv = build_conversation(messages, COUNTER.count_message)
    assert working_set(conv, [2, 3, 4], [5]) == {3: 1, 2: 1}


def test_an_exchange_a_newer_one_repeats_exactly_is_superseded():
    # The same file read again, unchanged (and a log read again after it grew): the older
    # result says nothing the newer one does not.
    messages = session(("", "cat parser/header.py", SOURCE),
                       ("", "tail logs/run.log", "started\nstep 1 ok"),
                       ("", "cat parser/header.py", SOURCE),
                       ("", "tail logs/run.log", "started\nstep 1 ok\nstep 2 ok"))
    conv = build_conversation(messages, COUNTER.count_message)
    assert superseded(conv, [2, 3, 4]) == {2, 3}


def test_an_older_result_that_says_more_than_the_newer_one_is_not_superseded():
    # The failure the agent fixed, and the file as it was before the edit: the history of
    # what it works on, which a re-run that passes does not repeat.
    messages = session(("", "python reproduce.py", "AssertionError: header lost its last field"),
                       ("", "cat parser/header.py", SOURCE),
                       ("", "sed -i 's/strip()/rstrip()/' parser/header.py", ""),
                       ("", "python reproduce.py", "OK"),
                       ("", "cat parser/header.py", SOURCE.replace("strip()", "rstrip()")))
    conv = build_conversation(messages, COUNTER.count_message)
    assert superseded(conv, [2, 3, 4, 5]) == set()


def test_the_masked_last_view_of_a_file_keeps_the_names_of_the_file():
    # The agent read the file, then many steps of other work, then names it again: at a
    # target that masks the old view, its mask keeps the file's names (what the edit copies).
    filler = [(f"Step {n}: checking the test log.", f"cat logs/run_{n}.log", f"line {n} ok " * 120) for n in range(6)]
    messages = session(("I read the parser.", "cat parser/header.py", SOURCE), *filler,
                       ("Now edit it.", "grep -n parse_hotel_field parser/header.py", "30: def parse_hotel_field"))
    result = prune({"model": "gpt-4o-mini", "messages": messages}, Policy(), scorer=LocalScorer(), counter=COUNTER,
                   steering=Steering(target_tokens=2200))
    forwarded = json.dumps(result.request["messages"])
    view = next(m["content"] for m, j in zip(result.request["messages"], result.sources) if j == 3)
    assert view.startswith("[sieve: masked")
    assert "parse_hotel_field" in view and "MikeParser" in view and "self._lima_fields" in forwarded
    # the outputs the recent call does not name keep their plain masks
    masks = [m["content"] for m, j in zip(result.request["messages"], result.sources)
             if j in range(5, 16, 2) and m["content"].startswith("[sieve: masked")]
    assert masks and all("; ids:" not in text for text in masks)


def test_room_a_shed_window_frees_goes_back_to_the_last_view_by_score():
    # One task, then a tool loop (the whole session is the active chain): a file view,
    # then a thought bigger than the room, then the current step. Shed oldest first, the
    # window drops the view with the thought and leaves the room unused.
    big_thought = "I think the bug is in the loop. " * 260
    messages = session(("Read the parser.", "cat parser/header.py", SOURCE),
                       (big_thought, "python reproduce.py", "AssertionError: field missing"),
                       ("Look at the field again.", "grep -n parse_echo_field parser/header.py", "22: def parse_echo_field"))
    result = prune({"model": "gpt-4o-mini", "messages": messages}, Policy(), scorer=LocalScorer(), counter=COUNTER,
                   steering=Steering(target_tokens=1800))
    assert result.target_rule_tokens <= 1800
    forwarded = json.dumps(result.request["messages"])
    assert big_thought[:60] not in forwarded
    assert "parse_victor_field" in forwarded  # the view's mask, with the file's names


def test_the_ids_reserve_counts_the_values_a_call_passes():
    # Outputs without a value that names a record (prose), calls that name files: the
    # marker has values to list, so room is held back for them.
    steps = [(f"Reading part {n}.", f"cat docs/chapter_{n}.md", "plain words only " * 80) for n in range(8)]
    messages = session(*steps)
    conv = build_conversation(messages, COUNTER.count_message)
    p = protect(conv, Policy(), COUNTER, target_tokens=1500)
    older = [u.index for u in conv.units[2:-2]]
    assert omitted_ids_reserve(conv, Policy(), older, {}, p.masked_forms, COUNTER, room=900) > 0
