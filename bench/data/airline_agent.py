"""The conversation machinery and the scripted user's and agent's phrasing.

`Conversation` appends OpenAI chat messages: agent texts, user texts, and tool
calls that are executed at once on the task's db copy (`airline_tau2.Domain.run`),
their results appended as tool messages. Phrasing is drawn from several
templates with the session's seeded RNG, so texts vary between tasks and sessions.
"""
from __future__ import annotations

import json
import random
import re
import string

GREETINGS = [
    "Hi! How can I help you today?",
    "Hello, thank you for contacting the airline. How can I help you today?",
    "Hi there! What can I do for you today?",
]
ASK_ID = [
    "I can help with that. First, could you please give me your user id so I can pull up your profile?",
    "Sure. To get started, I need to verify your account. What is your user id?",
    "Happy to help. Could you share your user id, please?",
    "Of course. May I have your user id to look up your account?",
]
GIVE_ID = [
    "My user id is {uid}.",
    "Sure, it's {uid}.",
    "It's {uid}",
    "Yes, my user ID is {uid}.",
]
GIVE_RES = [" The reservation number is {res}.", " My confirmation number is {res}.", " Reservation {res}."]
CONFIRM_ASK = [
    "Do you confirm that I should proceed? Please answer yes or no.",
    "Shall I go ahead with this? Please confirm with yes.",
    "Would you like me to proceed (yes/no)?",
]
YES = ["Yes.", "Yes, please go ahead.", "yes", "Yes, I confirm.", "Yes, that's right, please proceed."]
PICK = [
    "I'd like {choice}, please.",
    "Let's go with {choice}.",
    "{choice} works for me.",
    "Okay, {choice} sounds good.",
]
ELSE = [
    "Is there anything else I can help you with?",
    "Is there anything else you need today?",
    "Anything else I can do for you?",
]
BYE = ["No, that's all. Thank you!", "That's everything, thanks.", "No, thanks. Have a nice day!",
       "Nope, that's it. Thanks for your help."]
CONTINUE = ["Okay.", "I see.", "Okay, thanks.", "Right.", "Got it, thank you."]


class Conversation:
    def __init__(self, domain, rng: random.Random):
        self.domain, self.rng = domain, rng
        self.messages = [{"role": "system", "content": domain.system_prompt}]
        self.toolkit = None
        self.ids: set[str] = set()

    def new_task(self) -> None:
        """Each task starts from tau2's initial db, as tau2 runs it."""
        self.toolkit = self.domain.toolkit()

    def pick(self, options: list[str], **fmt) -> str:
        return self.rng.choice(options).format(**fmt)

    def say(self, text: str) -> None:
        self.messages.append({"role": "assistant", "content": text})

    def user(self, text: str) -> None:
        self.messages.append({"role": "user", "content": text})

    def _call_id(self) -> str:
        alphabet = string.ascii_letters + string.digits
        while True:
            cid = "call_" + "".join(self.rng.choice(alphabet) for _ in range(24))
            if cid not in self.ids:
                self.ids.add(cid)
                return cid

    def call(self, name: str, arguments: dict):
        """One tool call: the assistant message, the real result, and that result parsed when it is JSON."""
        cid = self._call_id()
        self.messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": cid, "type": "function",
             "function": {"name": name, "arguments": json.dumps(arguments)}}]})
        out = self.domain.run(self.toolkit, name, arguments)
        self.messages.append({"role": "tool", "tool_call_id": cid, "content": out})
        try:
            return json.loads(out)
        except ValueError:
            return out


_PRONOUNS = [
    (r"\bYou are\b", "I am"), (r"\byou are\b", "I am"), (r"\bYou're\b", "I'm"), (r"\byou're\b", "I'm"),
    (r"\bYou've\b", "I've"), (r"\byou've\b", "I've"), (r"\bYour\b", "My"), (r"\byour\b", "my"),
    (r"\byourself\b", "myself"), (r"\b[Yy]ou were\b", "I was"), (r"\bYou\b", "I"),
    (r"\b(to|for|with|told|help|let|allows|ask|give|tell|call|sent|send) you\b", r"\1 me"), (r"\byou\b", "I"),
]
_STAGE_DIRECTIONS = re.compile(r"\b(the agent|[Mm]ention|[Ii]nsist|[Pp]retend|make up|Halfway)\b|^If ")


def first_person(reason: str) -> str:
    """The user's opening line: tau2's `reason_for_call` (written to the simulated user, in the
    second person) turned into the first person, without the sentences that direct the simulation."""
    sentences = re.split(r"(?<=[.!?])\s+", " ".join(reason.split()))
    kept = []
    for s in sentences:
        if _STAGE_DIRECTIONS.search(s):
            if kept:
                break
            continue
        kept.append(s)
    text = " ".join(kept)
    for pat, rep in _PRONOUNS:
        text = re.sub(pat, rep, text)
    return text


def user_id_of(known_info: str) -> str:
    return re.search(r"\b[a-z]+_[a-z]+_\d{4}\b", known_info).group(0)


def reservation_of(known_info: str) -> str | None:
    m = re.search(r"\b(?=[A-Z0-9]*\d)(?=[A-Z0-9]*[A-Z])[A-Z0-9]{6}\b", known_info)
    return m.group(0) if m else None
