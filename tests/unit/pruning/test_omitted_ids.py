"""Omission markers keep the exact ids of what they stand for (policy ``omitted_ids_tokens``)."""

from __future__ import annotations

import json

from gateway.pruning.compression import DROPPED_MARKER, dropped_marker, kept_values, marker_calls, marker_ids
from gateway.pruning.frozen import FrozenPlan
from gateway.pruning.ids import ids_in, omitted_ids
from gateway.pruning.markers import with_carried_trimmed
from gateway.pruning.policy import Policy
from tests.support.conversations import SYSTEM, agent_history
from tests.support.pure_prune import COUNTER, markers, run


def listed(marker: str) -> list[str]:
    return marker_ids({"role": "user", "content": marker})


def test_ids_are_ranked_by_the_request_words_around_them_and_fit_the_room():
    listing = json.dumps({"items": [
        {"name": "Desk Lamp", "item_id": "5555500001", "options": {"color": "red"}},
        {"name": "Laptop", "item_id": "4760268021", "options": {"processor": "i5"}},
        {"name": "Kettle", "item_id": "7777700003", "options": {"color": "steel"}}]}, indent=1)
    words = ("exchange", "laptop", "i9")
    ids = omitted_ids([(listing, False)], set(), room=100, count_text=COUNTER.count_text, query=words)
    assert ids[0] == "4760268021" and sorted(ids) == ["4760268021", "5555500001", "7777700003"]
    # Already forwarded: not repeated. No room: nothing.
    assert "4760268021" not in omitted_ids([(listing, False)], {"4760268021"}, 100, COUNTER.count_text, words)
    assert omitted_ids([(listing, False)], set(), 3, COUNTER.count_text, words) == []
    one = omitted_ids([(listing, False)], set(), COUNTER.count_text(" 4760268021"), COUNTER.count_text, words)
    assert one == ["4760268021"]


def test_a_value_the_agents_calls_pass_twice_ranks_first():
    # An agent read a file, ran a script, edited the file: its path and the script's name
    # are what its next calls pass again, whatever the outputs say around the request's words.
    read = ('"command": cat src/app/parser.py', True, False, True)
    run = ('"command": python check_parser.py', True, False, True)
    edit = ('"command": sed -i s/a/b/ src/app/parser.py && python check_parser.py', True, False, True)
    output = ("The laptop order LAPTOP-7431 failed: see error_report_9912 and LAP-5501 for the laptop.", False)
    words = ("laptop",)
    ids = omitted_ids([edit, output, run, read], set(), room=12, count_text=COUNTER.count_text, query=words)
    assert ids[:2] == ["src/app/parser.py", "check_parser.py"]
    # passed once only (by a bare call, no words of the agent's), a value ranks as before:
    # by the request's words around it
    bare_read = ('"command": cat src/app/parser.py', False, False, True)
    ids = omitted_ids([output, bare_read], set(), room=8, count_text=COUNTER.count_text, query=words)
    assert ids[0] == "LAPTOP-7431"


def test_the_values_of_a_text_the_forward_quotes_rank_before_the_request_words_around_others():
    # A kept later message quoted a value of the first output (its script's name): that
    # output is still in use. The second output only shares words with a long request,
    # which any line of code does.
    quoted = ("wrote repro_case.py; it calls parse_header_block and reads fixtures/sample_01.bin", False)
    chatty = ("the parser header check for version fields: see check_version_fields", False)
    words = ("parser", "header", "check", "version", "fields")
    ids = omitted_ids([(*quoted, True), (*chatty, False)], {"repro_case.py"}, room=100,
                      count_text=COUNTER.count_text, query=words)
    assert sorted(ids[:2]) == ["fixtures/sample_01.bin", "parse_header_block"]
    assert ids[2] == "check_version_fields"


def test_a_value_two_messages_name_ranks_before_one_line_that_shares_the_request_words():
    # A long listing names build_index_map once, on a line full of the request's words;
    # the agent's script and its run both name check_cache_keys.
    listing = ("index parser cache rebuild: build_index_map\nother line: tidy_whitespace", False)
    script = ("from mod import check_cache_keys", False)
    run = ("Traceback: check_cache_keys failed", False)
    words = ("index", "parser", "cache", "rebuild")
    ids = omitted_ids([run, script, listing], set(), room=100, count_text=COUNTER.count_text, query=words)
    assert ids[:2] == ["check_cache_keys", "build_index_map"]


def test_a_name_of_code_one_output_prints_once_is_not_listed_a_record_id_is():
    # A traceback prints many names once; nothing says the next call wants them. An order
    # number it prints names one record, and the agent's own word names render_tile.
    output = ("Traceback: in walk_nodes\n  in visit_branch\nKeyError: order 48213507", False)
    words = ("I think render_tile fails in walk_nodes", True)
    ids = omitted_ids([words, output], set(), room=100, count_text=COUNTER.count_text)
    assert "48213507" in ids and "render_tile" in ids and "walk_nodes" in ids
    assert "visit_branch" not in ids


def test_a_short_number_the_agent_wrote_and_an_output_shows_is_listed():
    # The agent read lines 790-837; the listing shows 837; 512 and 604 stand in the output
    # alone (a count, a size): no reference.
    call = ("\"command\": nl -ba src/merge.py | sed -n '790,837p'", True, False, True)
    listing = ("   836\t    return out\n   837\t\nsize 512, took 604 ms", False)
    ids = omitted_ids([listing, call], set(), room=100, count_text=COUNTER.count_text)
    assert "837" in ids and "512" not in ids and "604" not in ids
    assert "790" not in ids  # the call alone says it: one text


def test_id_reading_matches_the_mask_and_skips_amounts_and_words():
    text = 'order #W1000001, user noah_ito_3850, total 535.97, qty 2, zip 98187, sku 7000001. See report.'
    assert kept_values(text) == ["#W1000001", "noah_ito_3850", "98187", "7000001"]
    assert ids_in([text]) == set(kept_values(text))
    assert ids_in(["a" * 100_000 + " x1"]) == set()  # a long run of letters is read in linear time


def test_a_dropped_tool_chain_leaves_its_ids_in_the_marker_within_the_target():
    messages = agent_history(12)
    target = 2500
    result = run(messages, target_tokens=target)
    assert result.target_rule_tokens <= target
    found = markers(result)
    assert len(found) == 1 and found[0] != DROPPED_MARKER
    ids = listed(found[0])
    assert ids and len(ids) == len(set(ids))
    dropped_text = "\n".join(json.dumps(messages[i]) for i, a in enumerate(result.message_actions) if a == "dropped")
    forwarded_text = "\n".join(json.dumps(m) for m in result.request["messages"] if m["content"] != found[0])
    for value in ids:
        assert value in dropped_text           # from what was omitted
        assert value not in ids_in([forwarded_text])  # and nowhere else in the request


def test_in_plain_text_the_line_is_the_record():
    lines = [f"item {i}: sku {700100 + i}, a grey kettle, in stock" for i in range(8)]
    lines[5] = "item 5: sku 700105, the blue desk lamp, in stock"
    ids = omitted_ids([("\n".join(lines), False)], set(), 100, COUNTER.count_text, ("blue", "desk", "lamp"))
    assert ids[0] == "700105"


def test_in_a_long_flat_object_an_id_is_ranked_by_its_own_entry():
    """A catalogue of name: id pairs on one line: the neighbours' names are not the id's."""
    names = ["Action Camera", "Air Purifier", "Backpack", "Bicycle", "Coffee Maker", "Desk Lamp", "Fleece Jacket",
             "Garden Hose", "Grill", "Headphones", "Hiking Boots", "Hair Dryer", "Electric Kettle", "Smartphone",
             "Indoor Security Camera", "Jigsaw Puzzle", "Laptop", "Luggage Set", "Makeup Kit", "Notebook", "Pet Bed",
             "Skateboard", "Sneakers", "Smart Watch", "Tablet", "Tea Kettle", "Wall Clock", "Yoga Mat"]
    catalogue = json.dumps({name: str(3000000001 + k) for k, name in enumerate(names)})
    ids = omitted_ids([(catalogue, False)], set(), 100, COUNTER.count_text, ("security",))
    assert ids[0] == "3000000015"


def test_escaped_newlines_of_a_quoted_json_string_are_no_part_of_a_value():
    text = json.dumps({"note": "Delivered.\nRefund goes to PayPal.\nBefore #W1000001 ships"})
    assert ids_in([text]) == {"PayPal", "#W1000001"}
    assert "new_dir" in ids_in(["C:\\new_dir\\app.py"])  # before a small letter it is no escape


def test_marker_ids_match_the_request_words_by_their_stems():
    listing = json.dumps({"items": [
        {"name": "Kettle", "item_id": "7777700003"}, {"name": "Camera", "item_id": "4760268021"}]})
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "I need help with an order."}]
    for k in range(8):
        call = {"id": f"c{k}", "type": "function", "function": {"name": "get_order", "arguments": "{}"}}
        messages += [{"role": "assistant", "content": None, "tool_calls": [call]},
                     {"role": "tool", "tool_call_id": f"c{k}", "content": listing if k == 0 else "x " * 300}]
    messages.append({"role": "user", "content": "Which of those cameras can I return?"})
    found = markers(run(messages, target_tokens=300))
    assert found and listed(found[0])[0] == "4760268021"


def test_a_marker_does_not_list_the_names_of_the_tools_the_conversation_calls():
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Find my order, please."}]
    for k in range(8):
        call = {"id": f"c{k}", "type": "function",
                "function": {"name": "find_order_by_ref" if k < 7 else "get_status",
                             "arguments": json.dumps({"ref": f"#R{k}00{k}"})}}
        messages += [{"role": "assistant", "content": None, "tool_calls": [call]},
                     {"role": "tool", "tool_call_id": f"c{k}", "content": "x " * 300}]
    messages.append({"role": "user", "content": "And the first one?"})
    found = markers(run(messages, target_tokens=300))
    assert found and "#R0000" in listed(found[0]) and "find_order_by_ref" not in listed(found[0])


def test_ids_the_dialogue_repeats_come_before_the_rest():
    listing = "\n".join(f"sku {700100 + i}: a grey kettle" for i in range(6))
    said = "Shall I exchange sku 700104 then?"
    ids = omitted_ids([(said, True), (listing, False)], set(), 100, COUNTER.count_text, ())
    assert ids[0] == "700104" and len(ids) == 6


def test_markers_are_frozen_and_each_epoch_adds_its_own():
    policy = Policy(target_tokens=3000, min_prompt_tokens=0, min_messages=0)
    messages, state, seen = agent_history(2), None, []
    for step in range(40):
        messages = messages + agent_history(1)[2:]
        messages[-1] = {"role": "user", "content": f"And order {step}?"}
        result = run(messages, policy, state=state)
        state = FrozenPlan.from_bytes(result.state.to_bytes())
        assert result.target_rule_tokens <= 3000
        now = markers(result)
        if result.mode == "frozen":
            assert now == seen[-1]  # replayed byte for byte
        elif result.mode == "epoch":
            # Down to the low-water mark, the markers carried over from earlier epochs included.
            system = COUNTER.count_message(messages[0])
            assert result.target_rule_tokens <= system + (3000 - system) * policy.low_water_ratio
            if seen and seen[-1]:
                assert now[0] == seen[-1][0]  # the oldest marker keeps its bytes and place
            seen.append(now)
    epochs = [m for m in seen if m]
    assert len(epochs) >= 3 and max(len(m) for m in epochs) >= 2
    for found in epochs:  # a later marker never repeats an earlier one's ids
        lists = [listed(m) for m in found]
        assert len({v for ids in lists for v in ids}) == sum(len(ids) for ids in lists)


def test_a_chat_without_ids_keeps_what_a_plain_marker_would():
    chat = [{"role": "system", "content": SYSTEM}]
    for i in range(60):
        chat.append({"role": "user" if i % 2 == 0 else "assistant",
                     "content": f"Turn {i}: we talked about gardens, tomatoes and the weather again and again."})
    with_ids = run(chat, target_tokens=600)
    plain = run(chat, Policy(omitted_ids_tokens=0), target_tokens=600)
    assert with_ids.request == plain.request
    assert markers(with_ids) == [DROPPED_MARKER]


def _parallel_step(results: int, lines: int) -> list[dict]:
    calls = [{"id": f"p{k}", "type": "function",
              "function": {"name": "get_order_details", "arguments": json.dumps({"order_id": f"#W{5000000 + k}"})}}
             for k in range(results)]
    out = [{"role": "assistant", "content": None, "tool_calls": calls}]
    for k in range(results):
        rows = "\n".join(f"item {k}-{i}: sku {800000 + k * 100 + i}, status pending, notes lorem ipsum"
                         for i in range(lines))
        out.append({"role": "tool", "tool_call_id": f"p{k}", "content": f"order #W{5000000 + k}\n{rows}"})
    return out


def test_a_current_step_that_breaks_the_target_masks_its_earlier_results():
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Check my orders."}]
    messages += _parallel_step(4, 30)
    step = messages[2:]
    full = COUNTER.count_messages(messages)
    newest = COUNTER.count_message(step[-1])
    for target in (full - 200, COUNTER.count_messages(messages[:3]) + newest + 3 * 60):
        result = run(messages, target_tokens=target)
        sent = result.request["messages"]
        assert result.target_rule_tokens <= target
        assert sent[-5] == step[0] and sent[-1] == step[-1]  # every call, and the newest result whole
        masked = sent[-4:-1]
        assert all(m["content"].startswith("[sieve: masked") for m in masked)
        assert [m["tool_call_id"] for m in masked] == ["p0", "p1", "p2"]
        assert result.message_actions[2:] == ["kept", "masked", "masked", "masked", "kept"]
    # With room, the masks keep their ids; without, they go bare rather than break the target.
    roomy = run(messages, target_tokens=full - 200).request["messages"]
    assert "; ids: #W5000000" in roomy[-4]["content"]
    tight = run(messages, target_tokens=COUNTER.count_messages(messages[:3]) + newest + 3 * 24)
    assert tight.target_rule_tokens <= COUNTER.count_messages(messages[:3]) + newest + 3 * 24
    assert all("ids:" not in m["content"] for m in tight.request["messages"][-4:-1])


def test_an_epoch_that_rewrites_its_prefix_keeps_the_markers_of_the_spans_still_omitted():
    # Three epochs of a tool loop: the first dropped the units from message 2, the second those
    # from message 6 (its marker lists that span's ids), the third drops more from message 10.
    # The second marker's span is still omitted and no other marker lists its ids: it stays
    # where it stood (the decision counted it), and the newly omitted span gets its own.
    from gateway.pruning.compression import dropped_marker
    from gateway.pruning.conversation import build_conversation
    from gateway.pruning.markers import place_markers
    from gateway.pruning.vocabulary import DROPPED, KEPT

    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Fix the parser."}]
    for step in range(8):
        cid = f"call_{step}"
        messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": cid, "type": "function", "function": {"name": "bash", "arguments": json.dumps(
                {"command": f"sed -n '{step * 10},{step * 10 + 10}p' src/app/parser_{step}.py"})}}]})
        messages.append({"role": "tool", "tool_call_id": cid, "content": f"line {step}"})
    conv = build_conversation(messages, COUNTER.count_message)
    start = {u.start: u.index for u in conv.units}
    actions = {u.index: DROPPED if 2 <= u.start < 14 else KEPT for u in conv.units}
    earlier = {start[p] for p in (2, 4, 6, 8)}
    first, second = dropped_marker(["src/app/parser_0.py"]), dropped_marker(["src/app/parser_2.py"])
    placed, fresh = place_markers(conv, actions, [(2, first), (6, second)], boundary=10, locked=False,
                                  per_epoch=True, earlier_drops=earlier)
    assert placed == {2: first, 6: second, 10: dropped_marker()} and fresh == [10]
    # Plain markers (no ids, no summaries) carry nothing of their own: one stands for all.
    placed, fresh = place_markers(conv, actions, [(2, first), (6, second)], boundary=10, locked=False,
                                  per_epoch=False, earlier_drops=earlier)
    assert placed == {2: first} and fresh == []


def test_carried_markers_give_up_what_is_over_the_target_newest_first_lowest_ranked_ids_first():
    def cost(pos, marker):
        return COUNTER.count_message(marker)

    old = dropped_marker(["order_1001", "order_1002", "order_1003"], ["read a.py 1-40"])
    newer = dropped_marker(["4760268021", "5555500001", "7777700003"])
    fresh = dropped_marker(["fresh_id"])
    placed = {2: old, 9: newer, 15: fresh}
    # Nothing over: nothing changes.
    assert with_carried_trimmed(placed, [15], 0, cost) == placed
    # A little over: the newer carried marker loses its last (lowest-ranked) id and no more.
    out = with_carried_trimmed(placed, [15], 1, cost)
    assert marker_ids(out[9]) == ["4760268021", "5555500001"] and out[2] == old and out[15] == fresh
    # More than the newer one holds: it goes plain, then the older one gives up its ids, then its calls.
    out = with_carried_trimmed(placed, [15], cost(9, newer) - cost(9, dropped_marker()) + 1, cost)
    assert out[9] == dropped_marker() and marker_ids(out[2]) == ["order_1001", "order_1002"]
    assert marker_calls(out[2]) == ["read a.py 1-40"]
    out = with_carried_trimmed(placed, [15], 10_000, cost)
    assert out == {2: dropped_marker(), 9: dropped_marker(), 15: fresh}  # the fresh marker keeps its list


def test_a_carried_marker_that_lists_nothing_is_listed_again_after_the_fresh_ones():
    """An epoch under the target lists the ids of a carried marker's span again when the marker
    lists nothing (its list given up over the target at an earlier step); a carried marker whose
    span leaves nothing to list stays as it was, where a fresh one would go."""
    from gateway.pruning.conversation import build_conversation
    from gateway.pruning.markers import unlisted_carried, with_omitted_ids
    from gateway.pruning.vocabulary import DROPPED

    messages = agent_history(4)
    conv = build_conversation(messages, COUNTER.count_message)
    chains = [u for u in conv.units if u.kind == "tool_chain"]
    actions = {u.index: DROPPED for u in conv.units if 2 <= u.start < chains[-1].start}
    old, fresh = chains[0].start, chains[2].start
    placed = {old: dropped_marker(), fresh: dropped_marker()}
    assert unlisted_carried(placed, [fresh]) == [old]
    forwarded = messages[:2] + messages[chains[-1].start:]
    alone = with_omitted_ids(conv, actions, placed, ([fresh], []), forwarded, (3000, 1500), COUNTER)
    assert marker_ids(alone[old]) == []  # carried markers keep their bytes unless relisted
    out = with_omitted_ids(conv, actions, placed, ([fresh], [old]), forwarded, (3000, 1500), COUNTER)
    assert "#W1000000" in marker_ids(out[old]) and marker_ids(out[fresh]) == marker_ids(alone[fresh])
    # Nothing left to list (every id of its span forwarded): the carried marker stays, plain.
    everything = forwarded + messages[2:chains[-1].start]
    out = with_omitted_ids(conv, actions, placed, ([fresh], [old]), everything, (3000, 1500), COUNTER)
    assert out[old] == dropped_marker()
