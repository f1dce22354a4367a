"""Epochs at turn boundaries, as late as they can: what keeps a model's reasoning valid (pure pipeline).

Providers bind reasoning to the exact history before it (ARCHITECTURE.md 2a). A loop's steps
keep theirs as long as nothing before them changes, so inside a tool loop a conversation's
decisions are replayed until the target forces an epoch; the epoch a loop will need is taken
at the turn boundary before it instead, where the target allows; an epoch keeps as much of the
previous forward as it can; and the task the loop works on is never dropped or masked.
"""

from __future__ import annotations

from gateway.pruning.conversation import build_conversation
from gateway.pruning.frozen import FrozenPlan
from gateway.pruning.markers import listing_room
from gateway.pruning.pipeline import prune
from gateway.pruning.policy import Policy, Steering
from gateway.pruning.scoring import LocalScorer
from gateway.pruning.tokens import TokenCounters
from gateway.pruning.turns import epoch_due, turn_of
from gateway.pruning.vocabulary import DROPPED, KEPT, Mode

COUNTER = TokenCounters().for_model("gpt-4o-mini")
POLICY = Policy(expand_tool=False)


def step(task: str, n: int, size: int = 60) -> list[dict]:
    call = {"id": f"c_{task}_{n}", "type": "function", "function": {"name": "lookup", "arguments": f'{{"n": {n}}}'}}
    return [{"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call["id"], "content": f"record {task}-{n}: " + "field value " * size}]


def turn(task: str, steps: int, size: int = 60) -> list[dict]:
    messages = [{"role": "user", "content": f"Task {task}: look up the records and sum them."}]
    for n in range(steps):
        messages += step(task, n, size)
    return messages + [{"role": "assistant", "content": f"Done with {task}."}]


def run(messages: list[dict], state: FrozenPlan | None, target: int):
    result = prune({"model": "gpt-4o-mini", "messages": messages}, POLICY, scorer=LocalScorer(), counter=COUNTER,
                   state=state, steering=Steering(target_tokens=target), continued=True)
    return result, FrozenPlan.from_bytes(result.state.to_bytes())


def test_a_turn_is_read_from_the_history():
    messages = [{"role": "system", "content": "s"}] + turn("A", 2) + turn("B", 3)[:3]
    tokens = [COUNTER.count_message(m) for m in messages]
    t = turn_of(messages, tokens)
    assert not t.boundary and messages[t.task]["content"].startswith("Task B")
    assert t.expected_growth == sum(tokens[2:7])  # task A's loop and its answer
    assert turn_of(messages[:8], tokens[:8]).boundary
    assert epoch_due(turn_of(messages[:8], tokens[:8]), tokens=3900, target=4000, low_water=2000)
    assert not epoch_due(turn_of(messages[:8], tokens[:8]), tokens=2100, target=4000, low_water=2000)


def test_the_epoch_a_loop_needs_comes_at_the_boundary_before_it():
    """Task B's prompt comes with the replay under the target but too close to it for a loop
    like task A's: the epoch is taken there, and task B's loop then runs without one."""
    system = [{"role": "system", "content": "You look records up."}]
    history = system + turn("A", 3) + turn("C", 3)
    loop = sum(COUNTER.count_message(m) for m in turn("A", 3)[1:])
    target = sum(COUNTER.count_message(m) for m in history) + loop // 2
    state = None
    for k in range(2, len(history) + 1):
        _, state = run(history[:k], state, target)
    opening = history + turn("B", 3)[:1]
    result, state = run(opening, state, target)
    assert result.mode == Mode.EPOCH and result.target_rule_tokens < target - loop  # at the boundary
    modes = []
    for k in range(len(opening) + 2, len(opening) + 8, 2):
        result, state = run(opening + turn("B", 3)[1:k - len(opening) + 1], state, target)
        modes.append(result.mode)
    assert modes and all(m == Mode.FROZEN for m in modes)  # task B's loop: no epoch


def test_inside_a_loop_the_replay_holds_until_the_target_forces_an_epoch():
    system = [{"role": "system", "content": "You look records up."}]
    history = system + turn("A", 3) + turn("B", 8)
    target = sum(COUNTER.count_message(m) for m in history[:12]) + 40
    state, modes = None, []
    for k in range(2, len(history)):
        result, state = run(history[:k], state, target)
        modes.append((k, result.mode, result.target_rule_tokens))
    in_loop = [(k, m, t) for k, m, t in modes if history[k - 1]["role"] != "user"]
    for (k, mode, tokens), (_, previous, before) in zip(in_loop[1:], in_loop):
        if mode == Mode.EPOCH:  # forced: the replay would have gone over the target
            grown = sum(COUNTER.count_message(m) for m in history[k - 2:k])
            assert before + grown > target


def test_an_epoch_keeps_the_previous_forward_as_long_as_it_can():
    """A loop whose window alone is over the target: the epoch sheds its newest steps before its
    oldest, so the forwarded prefix it keeps from the previous request is as long as it can be."""
    system = [{"role": "system", "content": "You look records up."}]
    history = system + turn("A", 12, size=80)[:-1]
    target = sum(COUNTER.count_message(m) for m in history[:15])
    state, previous, kept_prefixes = None, None, []
    for k in range(2, len(history) + 1):
        result, state = run(history[:k], state, target)
        forwarded = result.request["messages"]
        if result.mode == Mode.EPOCH and previous is not None:
            same = next((i for i, (a, b) in enumerate(zip(previous, forwarded)) if a != b), len(previous))
            kept_prefixes.append(same)
        previous = forwarded
    # The first decision has no forward to keep; every epoch after it keeps more than the system
    # prompt, the task and a step.
    assert len(kept_prefixes) > 1 and all(n > 3 for n in kept_prefixes[1:])


def test_the_task_a_loop_works_on_is_never_dropped_or_masked():
    system = [{"role": "system", "content": "You look records up."}]
    history = system + turn("A", 3) + turn("B", 10, size=120)[:-1]
    task_b = next(i for i, m in enumerate(history) if m.get("content", "") and "Task B" in str(m["content"]))
    target = 900
    state = None
    for k in range(task_b + 1, len(history) + 1):
        result, state = run(history[:k], state, target)
        assert result.message_actions[task_b] == KEPT, k
    assert DROPPED in result.message_actions  # the loop itself was pruned


def test_text_beside_tool_results_does_not_open_a_turn():
    """Claude Code adds reminders to the user turn that carries tool results (Messages reads them
    as a user message right after the tool messages): the loop goes on, its task stays the prompt."""
    system = [{"role": "system", "content": "You look records up."}]
    history = system + turn("A", 2)[:-1] + [{"role": "user", "content": "<system-reminder>Be brief.</system-reminder>"}]
    tokens = [COUNTER.count_message(m) for m in history]
    t = turn_of(history, tokens)
    assert not t.boundary and history[t.task]["content"].startswith("Task A")
    conv = build_conversation(history, COUNTER.count_message)
    assert conv.units[conv.task_unit].start == 1


def test_the_coming_loop_is_sized_by_the_largest_turn_so_far():
    """A conversation's big loops are few but hold most of its steps: small turns after one do
    not make the next loop look small."""
    messages = [{"role": "system", "content": "s"}] + turn("A", 6) + turn("C", 0) + turn("D", 0) + \
        turn("E", 0) + turn("B", 1)[:1]
    tokens = [COUNTER.count_message(m) for m in messages]
    assert turn_of(messages, tokens).expected_growth == sum(tokens[2:15])  # task A's loop and its answer


def test_a_loop_larger_than_the_low_water_room_still_gets_its_boundary_epoch():
    """The loop would cross the target from the low-water mark too: starting it from there still
    puts its own epoch later (fewer of its steps lose their reasoning) than starting it higher."""
    messages = [{"role": "system", "content": "s"}] + turn("A", 3) + turn("B", 1)[:1]
    tokens = [COUNTER.count_message(m) for m in messages]
    t = turn_of(messages, tokens)
    target, low_water = 4000, 4000 - t.expected_growth // 2
    assert epoch_due(t, tokens=target - t.expected_growth // 4, target=target, low_water=low_water)


def test_an_epoch_inside_a_loop_keeps_the_earlier_turns_and_sheds_the_loop_newest_first():
    """Earlier turns forwarded before the loop: the epoch the loop forces keeps them (and the
    task) byte for byte and sheds the loop's newest steps, so the loop's first step keeps the
    prefix its reasoning is bound to."""
    system = [{"role": "system", "content": "You look records up."}]
    history = system + turn("A", 3, size=100) + turn("B", 10, size=80)[:-1]
    task_b = next(i for i, m in enumerate(history) if "Task B" in str(m.get("content")))
    target = sum(COUNTER.count_message(m) for m in history[:task_b + 5])
    state, previous, kept = None, None, []
    for k in range(2, len(history) + 1):
        result, state = run(history[:k], state, target)
        forwarded = result.request["messages"]
        if result.mode == Mode.EPOCH and k > task_b + 1 and previous is not None and state.epoch > 1:
            # (the first decision has no earlier decision to keep: it comes in the loop here)
            same = next((i for i, (a, b) in enumerate(zip(previous, forwarded)) if a != b), len(previous))
            kept.append(same > forwarded.index(history[task_b]) + 1)  # through the loop's first step
        previous = forwarded
    assert len(kept) > 1 and all(kept)  # before: the first of them shed task A's turn


def test_an_epoch_inside_a_tool_loop_cuts_to_the_loops_own_low_water_mark():
    """One task, then a long tool loop (a coding agent's session): the target forces epochs
    inside the loop, and each cuts to ``loop_low_water_ratio`` of what the system prompt leaves,
    not to ``low_water_ratio``: the loop grows by an exchange a step, so a shallow cut brings the
    next epoch (and the rewrite of all it kept) a few steps later. At a turn boundary the
    dialogue's own mark holds."""
    system = [{"role": "system", "content": "You work on records."}]
    history = system + turn("A", 80)[:-1]  # the task, then 80 steps of its loop
    target = 3000
    sys_tokens = COUNTER.count_message(system[0])
    for loop_ratio in (0.2, 0.5):
        policy = Policy(expand_tool=False, low_water_ratio=0.5, loop_low_water_ratio=loop_ratio)
        state, epochs = None, []
        for k in range(4, len(history) + 1, 2):  # every step ends on its results: inside the loop
            result = prune({"model": "gpt-4o-mini", "messages": history[:k]}, policy, scorer=LocalScorer(),
                           counter=COUNTER, state=state, steering=Steering(target_tokens=target), continued=True)
            state = FrozenPlan.from_bytes(result.state.to_bytes())
            if result.mode == Mode.EPOCH:
                epochs.append(result.forwarded_tokens)
        mark = sys_tokens + int((target - sys_tokens) * loop_ratio)
        # 60: the marker; the ids it lists may go past the mark (``decision._ids_room``), within
        # their own room, which leaves the loop's mark well below the dialogue's.
        slack = 60 + listing_room(policy.omitted_ids_tokens)
        assert slack < (target - sys_tokens) * (0.5 - 0.2)
        assert epochs and all(t <= mark + slack for t in epochs), (loop_ratio, mark, epochs)
        if loop_ratio == 0.2:
            deep = len(epochs)
    assert deep < len(epochs)  # the deeper cut spaces the epochs out
