"""What one decision never gives up, what it protects, and what each unit costs kept or masked.

* Hard pins: the system prompt, the goal (the task's first user message), the
  active task (the newest user message, which the running tool loop works on) and
  the current step (the last unit) always go whole; so does, at a turn boundary of an
  agent that works alone, the answer the new user message replies to, where it fits.
* The protected window: the last units and the active tool chain. It yields,
  oldest first, only when it alone breaks the target: masked, then dropped when
  the hard pins fit in the target; masked only when they do not.
* Candidates: every other unit, scored and selected.

The target is *attainable* when the hard pins fit in it. When they do not,
dropping the window would harm the agent and still miss the target: the window
stays, its bulky tool outputs masked (their calls and exact ids kept: every
token over a limit the client set is one too many, and a mask is most of what a
later call copies), everything else is omitted, and the omission marker lists
the ids of what it stands for: an exact id costs a few tokens, and the next call
is likely to reuse one. A current step of many parallel results can be what breaks
the target: then its earlier results are masked (every call still answered), the
newest stays whole, and the unit stays pinned (it is *squeezed*)::

    p = protect(conv, policy, counter, target_tokens=8000)
    p.candidates, p.attainable, p.cost(p.last)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from gateway.pruning.compression import is_maskable, masked_message
from gateway.pruning.conversation import KIND_ASSISTANT, KIND_SYSTEM, Conversation, Unit
from gateway.pruning.policy import Policy
from gateway.pruning.tokens import TokenCounter
from gateway.pruning.turns import works_alone


@dataclass(frozen=True, slots=True)
class Protection:
    units: list[Unit]
    hard_pins: set[int]      # never given up
    window: list[int]        # the protected recent units, oldest first
    in_window: set[int]      # the window can hold every unit: list membership made that quadratic
    soft_pins: list[int]     # the window's units that are not hard pins
    protected: set[int]      # hard pins and window
    candidates: list[int]    # every other unit
    masked_forms: Mapping[int, dict[str, Any]]  # per maskable tool message: its masked form
    masked_cost: Mapping[int, int]              # per unit with tool results: its tokens masked
    squeezed_tokens: int | None                 # the current step's tokens if it had to be squeezed
    attainable: bool                            # the hard pins fit in the target

    @property
    def last(self) -> int:
        """The current step."""
        return len(self.units) - 1

    @property
    def whole(self) -> set[int]:
        """Messages a masked unit leaves whole: the newest result of a squeezed current step."""
        return {self.units[self.last].stop - 1} if self.squeezed_tokens is not None else set()

    def cost(self, index: int) -> int:
        """Unit ``index``'s tokens as a pinned unit goes (the current step squeezed, if it is)."""
        if index == self.last and self.squeezed_tokens is not None:
            return self.squeezed_tokens
        return self.units[index].tokens

    def tokens(self, indices: Iterable[int]) -> int:
        return sum(self.cost(i) for i in indices)


def protect(conv: Conversation, policy: Policy, counter: TokenCounter, target_tokens: int,
            prior_masks: Mapping[int, str] | None = None, tool_units: int | None = None,
            keep: Iterable[int] = ()) -> Protection:
    """The pins, window and candidates of ``conv``, and the masked forms and costs of its
    tool results; the current step squeezed when that is what meets ``target_tokens``.
    ``prior_masks``: the masked text earlier epochs forwarded, per message; those
    masks stay as they were (the provider cached them). ``tool_units``: the tool
    exchanges the window holds at least (None: the policy's ``protect_last_tool_units``).
    ``keep``: messages the window holds too (those a pinned sieve_expand exchange goes back
    between: dropped, the exchange could not go back, and the answer after it would lose the
    prefix its reasoning is bound to)."""
    units = conv.units
    last = len(units) - 1
    # The newest user message is the task the running loop works on: dropped or masked mid-loop,
    # the agent loses track of what it is doing (it ends its loop early, or works on an older task).
    task = {conv.task_unit} if conv.task_unit is not None else set()
    hard_pins = {u.index for u in units if u.kind == KIND_SYSTEM} | set(conv.goal_units) | {last} | task
    hard_pins |= _answered(conv, hard_pins, target_tokens)
    window = _window(conv, policy, policy.protect_last_tool_units if tool_units is None else tool_units)
    kept = {u.index for u in units for j in keep if u.start <= j < u.stop} - set(window)
    window = sorted(kept | set(window)) if kept else window
    in_window = set(window)
    masked_forms = _masked_forms(conv, prior_masks or {}) if policy.mask_tool_outputs else {}
    masked_cost = {u.index: _masked_tokens(conv, u.index, counter, masked_forms) for u in units
                   if u.tool_result_tokens and policy.mask_tool_outputs}
    pins_over = sum(units[i].tokens for i in hard_pins) - target_tokens
    squeezed = _squeeze(conv, last, masked_forms, counter, pins_over) if pins_over > 0 and masked_forms else None
    if squeezed is not None:
        masked_forms = {**masked_forms, **squeezed[1]}
    return Protection(
        units, hard_pins, window, in_window,
        soft_pins=[i for i in window if i not in hard_pins],
        protected=hard_pins | set(window),
        candidates=[u.index for u in units if u.index not in hard_pins and u.index not in in_window],
        masked_forms=masked_forms, masked_cost=masked_cost,
        squeezed_tokens=squeezed[0] if squeezed is not None else None,
        attainable=pins_over <= 0 or squeezed is not None,
    )


def _answered(conv: Conversation, hard_pins: set[int], target_tokens: int) -> set[int]:
    """At a turn boundary of an agent that works alone (``turns.works_alone``), the assistant
    message the new user message answers, when the hard pins and it fit in the target. A user
    message right after the assistant's words replies to them; mid-way through such an
    agent's loop it is an interruption or a correction of its last answer ("not that file",
    "send one command, not two"), and the next step redoes that answer, copying its names,
    paths and numbers: shed to the low-water mark, the answer is gone just when it is read.
    In a dialogue a reply comes every few steps, each answer is one turn of many, and keeping
    each above the low-water mark would bring every next epoch sooner."""
    task = conv.task_unit
    if task is None or task == 0 or task != len(conv.units) - 1 or not works_alone(conv.messages):
        return set()
    before = conv.units[task - 1]
    if before.kind != KIND_ASSISTANT or before.index in hard_pins:
        return set()
    fits = sum(conv.units[i].tokens for i in hard_pins) + before.tokens <= target_tokens
    return {before.index} if fits else set()


def _window(conv: Conversation, policy: Policy, tool_units: int) -> list[int]:
    """The protected recent units: the last N, the active tool chain (every unit
    since the newest user message) and, when these hold fewer than ``tool_units`` tool
    exchanges, the newest exchanges before them up to that many: an agent's working set
    is its latest results (it looks a record up, then changes it; reads a file, then
    edits it), whatever was said between. A
    window that already holds results has its working set (an older exchange there
    is an earlier task's); a conversation without tool calls has none, so nothing
    changes for it."""
    n = len(conv.units)
    start = max(0, n - policy.protect_last_units)
    if policy.protect_active_chain and conv.last_user_unit is not None:
        start = min(start, conv.last_user_unit)
    window = [i for i in range(start, n) if conv.units[i].kind != KIND_SYSTEM]
    wanted = tool_units - sum(1 for i in window if conv.units[i].tool_result_tokens)
    if wanted > 0:
        tools = [u.index for u in conv.units[:start] if u.tool_result_tokens][-wanted:]
        window = tools + window
    return window


def _masked_forms(conv: Conversation, prior_masks: Mapping[int, str]) -> dict[int, dict[str, Any]]:
    """The masked form of every tool result of the conversation, built once per decision;
    a result an earlier epoch masked keeps the mask it was forwarded with (it may hold
    key lines chosen for an earlier step: ``gateway.pruning.key_lines``)."""
    return {j: {**m, "content": prior_masks[j]} if j in prior_masks else
            masked_message(m, conv.tokens[j], conv.fingerprints[j])
            for u in conv.units if u.tool_result_tokens for j in u.indices
            if is_maskable(m := conv.messages[j])}


def _masked_tokens(conv: Conversation, unit_index: int, counter: TokenCounter,
                   masked_forms: Mapping[int, dict[str, Any]]) -> int:
    return sum(counter.count_message(masked_forms[j]) if j in masked_forms else conv.tokens[j]
               for j in conv.units[unit_index].indices)


def _squeeze(conv: Conversation, index: int, masked_forms: Mapping[int, dict[str, Any]], counter: TokenCounter,
             over: int) -> tuple[int, dict[int, dict[str, Any]]] | None:
    """Unit ``index`` with every result but its newest masked, if that frees ``over``
    tokens: masks with their ids first, else without (the target is the client's hard
    limit). Returns the unit's tokens and the masked forms used; None if neither
    fits, or the unit has nothing to mask but its newest result."""
    unit = conv.units[index]
    head = [j for j in unit.indices[:-1] if j in masked_forms]
    if not head or conv.messages[unit.stop - 1].get("role") not in ("tool", "function"):
        return None

    def freed(forms: Mapping[int, dict[str, Any]]) -> int:
        return sum(conv.tokens[j] - counter.count_message(forms[j]) for j in head)

    forms = {j: masked_forms[j] for j in head}
    gain = freed(forms)
    if gain < over:
        forms = {j: masked_message(conv.messages[j], conv.tokens[j], conv.fingerprints[j], keep_ids=False)
                 for j in head}
        gain = freed(forms)
        if gain < over:
            return None
    return unit.tokens - gain, forms
