"""The telecom conversation and the scripted user's and agent's phrasing.

`TelecomConversation` is the airline `Conversation` (messages, seeded phrasing,
agent tool calls run at once with their real results) over tau2's telecom
environment, plus `device`: the user running one of their phone's tools. The user's
message then carries the phone's real output as the user pastes it, after a short
first-person lead-in ("Here's what it shows:"); the agent's tool calls and their
outputs are ordinary tool messages.
"""
from __future__ import annotations

from airline_agent import Conversation, first_person

GREETINGS = [
    "Hi! How can I help you today?",
    "Hello, thank you for contacting customer support. How can I help you today?",
    "Hi there! What can I do for you today?",
]
ASK_PHONE = [
    "I'm sorry to hear that. To look up your account, could you give me the phone number on the line?",
    "I can help with that. First, what is the phone number of the line that has the problem?",
    "Sure. May I have your phone number so I can find your account?",
    "Let's sort this out. Could you share the phone number associated with your account, please?",
]
GIVE_PHONE = ["It's {phone}.", "My number is {phone}.", "Sure, {phone}. The account is under {name}.", "{known}"]
PASTE = ["Here's what it shows:", "Okay, I checked. It says:", "This is what I see:", "Done. My phone shows:"]
DID = ["Done. Now it says:", "Okay, I did that. It shows:", "I did it. Here's the result:", "Done:"]
FRUSTRATED = ["Still not working, this is frustrating.", "Hmm, that didn't fix it.", "It's still not right."]
CONFIRM_ASK = [
    "Do you confirm that I should proceed? Please answer yes or no.",
    "Shall I go ahead with this?",
    "Would you like me to proceed (yes/no)?",
]
YES = ["Yes.", "Yes, please go ahead.", "yes", "Yes, I confirm.", "Yes, that's fine."]
ELSE = [
    "Is there anything else I can help you with?",
    "Is there anything else you need today?",
    "Anything else I can do for you?",
]
BYE = ["No, that's all. Thank you!", "That's everything, thanks.", "No, thanks. Have a nice day!",
       "Nope, that's it. Thanks for your help."]
CONTINUE = ["Okay.", "I see.", "Okay, thanks.", "Right.", "Got it, thank you."]

# What the agent asks the user to do on the phone, one line per tool (tau2's user tools).
DEVICE_ASK = {
    "check_status_bar": "check what your phone's status bar shows",
    "check_network_status": "open your network status and tell me what it shows",
    "check_network_mode_preference": "check your network mode preference",
    "check_sim_status": "check the status of your SIM card",
    "check_data_restriction_status": "check whether any data restriction such as Data Saver is on",
    "check_apn_settings": "check your APN settings",
    "check_wifi_calling_status": "check whether Wi-Fi Calling is on",
    "check_vpn_status": "check your VPN status",
    "check_app_permissions": "check the permissions of the {app_name} app",
    "check_payment_request": "check your payment requests",
    "run_speed_test": "run a speed test",
    "can_send_mms": "try sending an MMS from your messaging app",
    "toggle_airplane_mode": "turn Airplane Mode off",
    "reseat_sim_card": "take out your SIM card and put it back in",
    "toggle_data": "turn mobile data on",
    "toggle_roaming": "turn Data Roaming on",
    "toggle_data_saver_mode": "turn Data Saver mode off",
    "disconnect_vpn": "disconnect the VPN",
    "set_network_mode_preference": "set your network mode preference to {mode}",
    "reset_apn_settings": "reset your APN settings to the default",
    "reboot_device": "restart your phone",
    "toggle_wifi_calling": "turn Wi-Fi Calling off",
    "grant_app_permission": "grant the {app_name} app the {permission} permission",
    "make_payment": "accept the payment request",
}
ASK_LEAD = ["Could you please {what}?", "Please {what}.", "Next, could you {what}?", "Can you {what} for me?"]


class TelecomConversation(Conversation):
    """The airline Conversation over tau2's telecom environment, with the user's phone tools."""

    def new_task(self, task=None) -> None:
        """Each task starts from tau2's initial db and phone, with the task's initial state applied."""
        self.toolkit = self.domain.environment(task)
        self.performed: list[tuple[str, str, dict]] = []   # (requestor, tool, arguments), as tau2 grades

    def call(self, name: str, arguments: dict):
        self.performed.append(("assistant", name, arguments))
        return super().call(name, arguments)

    def device(self, name: str, arguments: dict | None = None) -> str:
        """The user runs one of their phone's tools; the real output (not yet in the conversation)."""
        self.performed.append(("user", name, arguments or {}))
        return self.domain.run(self.toolkit, name, arguments or {}, requestor="user")

    def ask_device(self, moves: list[tuple[str, dict]], frustrated: bool = False, before: str = "") -> list[str]:
        """The agent (after `before`, when given) asks for phone actions; the user does them in order
        and pastes the outputs."""
        whats = [DEVICE_ASK[n].format(**a) for n, a in moves]
        what = ", ".join(whats[:-1]) + " and then " + whats[-1] if len(whats) > 1 else whats[0]
        self.say((before + " " if before else "") + self.pick(ASK_LEAD, what=what))
        outs = [self.device(n, a) for n, a in moves]
        lead = self.pick(DID if moves[0][0] not in DEVICE_CHECKS else PASTE)
        pre = self.pick(FRUSTRATED) + " " if frustrated else ""
        self.user(pre + lead + "\n" + "\n".join(outs))
        return outs


DEVICE_CHECKS = {n for n in DEVICE_ASK if n.startswith(("check_", "run_", "can_"))}


def opening(reason: str) -> str:
    """The user's first line: tau2's reason_for_call in the first person (tau2 writes "You mobile
    data" for "Your mobile data" in one reason; fixed before the rewrite)."""
    return first_person(reason.replace("You mobile", "Your mobile"))


def give_phone(conv: TelecomConversation, known: str, phone: str, name: str) -> str:
    """The user's answer to the phone-number question: known_info in the first person, or a short
    answer followed by where the user is when known_info says so."""
    known = first_person(known)
    template = conv.rng.choice(GIVE_PHONE)
    text = template.format(phone=phone, name=name, known=known)
    where = known.split(". ", 1)[1] if ". " in known else ""
    return text if "{known}" in template or not where else f"{text} {where}"
