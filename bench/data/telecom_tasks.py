"""The scripted agent's moves for one tau2 telecom task.

Per task (tau2's telecom `base` tasks): the user states the problem (`reason_for_call`
in the first person) and gives the phone number when asked (`known_info`, with where
they are). The agent looks the customer up by phone, reads the customer's lines until
it finds the one with that number (sometimes one more), the line's plan, maybe the
device and the bills, and summarises. It then walks tau2's tech-support manual for
the problem (no service, mobile data, MMS), deciding each step from what the phone
and the tools really show: it asks the user to check or change one thing on the phone,
the user does it and pastes the output; on the carrier side it lifts an overdue-bill
suspension (payment request, bill check, resume), enables roaming for a user abroad,
refuels data the user asks for (the amount tau2's instructions give the user), and
transfers to a human when the manual says to escalate or nothing is left to try.

After the task, `check` compares what was done with tau2's grading of the task: every
expected action (`evaluation_criteria.actions`, agent's and user's) performed with its
exact arguments, and every `env_assertions` true on the final state.
"""
from __future__ import annotations

import re

from telecom_agent import (BYE, CONFIRM_ASK, CONTINUE, ELSE, GREETINGS, ASK_PHONE, YES, TelecomConversation,
                           give_phone, opening)

TODAY = "2025-02-25"   # main_policy.md: "The current time is 2025-02-25 12:08:00 EST."
TRANSFER_SUMMARY = "I cannot fix the issue."
TRANSFER_MESSAGE = "YOU ARE BEING TRANSFERRED TO A HUMAN AGENT. PLEASE HOLD ON."
FAST_ENOUGH = "4g_5g_preferred"   # the manual's fix for a 2G/3G network mode preference


class Transferred(Exception):
    """The task ended with a transfer to a human agent."""


def status_bar(output: str) -> str:
    lines = [ln for ln in output.splitlines() if ln.startswith("Status Bar:")]
    return lines[-1] if lines else ""


def has_signal(output: str) -> bool:
    bar = status_bar(output)
    return "📶" in bar and "Airplane Mode" not in bar


class TroubleshootPlayer:
    """Plays one task on a TelecomConversation (fresh environment)."""

    def __init__(self, conv: TelecomConversation, task):
        self.conv, self.rng, self.task = conv, conv.rng, task
        ins = task.user_scenario.instructions
        self.reason, self.known = ins.reason_for_call, ins.known_info
        refuel = re.search(r"refuel ([\d.]+) GB", ins.task_instructions or "")
        self.refuel_gb = float(refuel.group(1)) if refuel else None
        self.abroad = "abroad" in self.known
        self.note = ""   # the account summary, said before the agent's first request to the user

    # -- tools ---------------------------------------------------------------
    def read(self, name: str, args: dict):
        return self.conv.call(name, args)

    def ask(self, *moves: tuple[str, dict], frustrated: bool = False) -> str:
        """One request to the user for phone actions (after the pending account summary, if any)."""
        before, self.note = self.note, ""
        return "\n".join(self.conv.ask_device(list(moves), frustrated, before))

    def batch(self, moves: list[tuple[str, dict]], frustrated: bool = False) -> str:
        """Several independent checks or fixes: asked all at once, or two at a time (seeded), as agents do."""
        if not moves:
            return ""
        size = len(moves) if self.rng.random() < 0.5 else 2
        outs = [self.ask(*moves[i:i + size], frustrated=frustrated and i == 0) for i in range(0, len(moves), size)]
        return "\n".join(outs)

    def say(self, text: str) -> None:
        before, self.note = self.note, ""
        self.conv.say((before + " " if before else "") + text)

    def confirm(self, text: str) -> None:
        self.say(f"{text} {self.conv.pick(CONFIRM_ASK)}")
        self.conv.user(self.conv.pick(YES))

    def transfer(self) -> None:
        self.conv.call("transfer_to_human_agents", {"summary": TRANSFER_SUMMARY})
        self.conv.say(TRANSFER_MESSAGE)
        self.conv.user(self.conv.pick(CONTINUE))
        raise Transferred

    # -- the call --------------------------------------------------------------
    def play(self) -> None:
        conv = self.conv
        conv.new_task(self.task)
        conv.say(conv.pick(GREETINGS))
        conv.user(opening(self.reason))
        conv.say(conv.pick(ASK_PHONE))
        phone = re.search(r"\d{3}-\d{3}-\d{4}", self.known).group(0)
        name = re.search(r"You are ([A-Z][a-z]+ [A-Z][a-z]+)", self.known).group(1)
        conv.user(give_phone(conv, self.known, phone, name))
        self.identify(phone)
        try:
            fixed = self.troubleshoot()
        except Transferred:
            return
        self.say(f"Great, {fixed}. {conv.pick(ELSE)}")
        conv.user(conv.pick(BYE))

    def troubleshoot(self) -> str:
        text = self.reason.lower()
        if "mms" in text:
            if "cannot" not in self.ask(("can_send_mms", {})):
                return "your messaging app can send MMS"
            self.restore_data(need_excellent=False)
            self.fix_mms()
            return "you can send MMS messages again"
        if "mobile data" in text:
            self.restore_data(need_excellent=True)
            return "your mobile data is working at excellent speed again"
        self.restore_service()
        return "your phone has service again"

    def identify(self, phone: str) -> None:
        """Customer by phone, its lines up to the caller's (maybe one more), the plan, maybe device and bills;
        the summary goes before the first request to the user."""
        cust = self.read("get_customer_by_phone", {"phone_number": phone})
        self.cid, lines = cust["customer_id"], cust["line_ids"]
        for lid in lines:
            line = self.read("get_details_by_id", {"id": lid})
            if line["phone_number"] == phone:
                break
        self.line, self.lid = line, line["line_id"]
        others = lines[lines.index(self.lid) + 1:]
        if others and self.rng.random() < 0.35:
            self.read("get_details_by_id", {"id": self.rng.choice(others)})
        self.plan = self.read("get_details_by_id", {"id": line["plan_id"]})
        if line.get("device_id") and self.rng.random() < 0.5:
            self.read("get_details_by_id", {"id": line["device_id"]})
        self.bills = None
        if line["status"] != "Active" or self.rng.random() < 0.4:
            self.bills = self.read("get_bills_for_customer", {"customer_id": self.cid})
        p = self.plan
        self.note = (
            f"Thank you. I found your account: {cust['full_name']}, customer {self.cid}. Your line {self.lid} "
            f"({phone}) is {line['status']} on the {p['name']} ({p['plan_id']}: {p['data_limit_gb']} GB a month, "
            f"${p['price_per_month']}), roaming {'enabled' if line['roaming_enabled'] else 'not enabled'}, "
            f"contract until {line['contract_end_date']}.")

    # -- no service --------------------------------------------------------------
    def restore_service(self, out: str | None = None) -> None:
        """The manual's cellular-service section: suspension, Airplane Mode, SIM, APN; escalate otherwise.
        `out`: a status bar the user has just pasted."""
        if self.line["status"] == "Suspended":
            out = self.lift_suspension()
        out = out or self.ask(("check_status_bar", {}))
        if "Airplane Mode" in status_bar(out):
            out = self.ask(("toggle_airplane_mode", {}))
        if has_signal(out):
            return
        found = self.batch([("check_sim_status", {}), ("check_apn_settings", {})], frustrated=True)
        if "locked" in found:
            self.say("Your SIM card is locked, which I cannot unlock from here; I need to escalate this.")
            self.transfer()
        fixes = [("reseat_sim_card", {})] if "No SIM card" in found else []
        if "APN Name: broken" in found:
            fixes += [("reset_apn_settings", {}), ("reboot_device", {})]
        if not fixes or not has_signal(self.batch(fixes)):
            self.transfer()

    def lift_suspension(self) -> str:
        """main_policy.md: a line suspended for an overdue bill is resumed once the bill is paid,
        never when its contract has ended."""
        if self.bills is None:
            self.bills = self.read("get_bills_for_customer", {"customer_id": self.cid})
        overdue = [b for b in self.bills if b["status"] == "Overdue"]
        if not overdue or self.line["contract_end_date"] < TODAY:
            self.say(f"Your line {self.lid} is suspended and I am not able to lift this suspension.")
            self.transfer()
        bill = self.read("get_details_by_id", {"id": overdue[0]["bill_id"]})
        bid = bill["bill_id"]
        self.confirm(f"Your line {self.lid} is suspended because bill {bid} (${bill['total_due']}, due "
                     f"{bill['due_date']}) is {bill['status'].lower()}. I can send you a payment request for it.")
        self.conv.call("send_payment_request", {"customer_id": self.cid, "bill_id": bid})
        self.ask(("check_payment_request", {}), ("make_payment", {}))
        if self.read("get_details_by_id", {"id": bid})["status"] != "Paid":
            self.transfer()
        self.line = self.conv.call("resume_line", {"customer_id": self.cid, "line_id": self.lid})["line"]
        self.say(f"Bill {bid} is paid and line {self.lid} is active again. You need to restart your phone "
                 "to get service back.")
        return self.ask(("reboot_device", {}))

    # -- mobile data ------------------------------------------------------------
    def restore_data(self, need_excellent: bool) -> None:
        """The manual's mobile-data section, after making sure there is service."""
        out = self.ask(("check_status_bar", {}))
        if not has_signal(out) or self.line["status"] != "Active":
            self.restore_service(out)
        if self.fast_enough(self.ask(("run_speed_test", {})), need_excellent):
            return
        found = self.batch([("check_network_status", {}), ("check_data_restriction_status", {}),
                            ("check_vpn_status", {}), ("check_network_mode_preference", {})], frustrated=True)
        if self.abroad and not self.line["roaming_enabled"]:
            self.confirm(f"You are abroad and line {self.lid} does not have roaming enabled. "
                         "I can enable it for you at no cost.")
            self.conv.call("enable_roaming", {"customer_id": self.cid, "line_id": self.lid})
        self.check_usage()
        fixes = [("toggle_data", {})] if "Mobile Data Enabled: No" in found else []
        if self.abroad and "Data Roaming Enabled: No" in found:
            fixes.append(("toggle_roaming", {}))
        if "Data Saver mode is ON" in found:
            fixes.append(("toggle_data_saver_mode", {}))
        if "VPN is ON and connected" in found and "poor" in found.lower():
            fixes.append(("disconnect_vpn", {}))
        if re.search(r"Network Mode Preference: [23]g_only", found):
            fixes.append(("set_network_mode_preference", {"mode": FAST_ENOUGH}))
        self.batch(fixes)
        if not self.fast_enough(self.ask(("run_speed_test", {})), need_excellent):
            self.transfer()

    @staticmethod
    def fast_enough(speed: str, need_excellent: bool) -> bool:
        return "(Excellent)" in speed if need_excellent else speed.startswith("Speed Test Result")

    def check_usage(self) -> None:
        """Data plan limits: over the limit, the user may refuel (at most 2 GB, at the plan's price)."""
        use = self.read("get_data_usage", {"customer_id": self.cid, "line_id": self.lid})
        used, limit, refuel = (float(use[k]) for k in ("data_used_gb", "data_limit_gb", "data_refueling_gb"))
        if used < limit + refuel:
            return
        price = self.plan["data_refueling_price_per_gb"]
        self.say(f"Line {self.lid} has used {use['data_used_gb']} GB of its {use['data_limit_gb']} GB this "
                 f"cycle, so mobile data is cut off until {use['cycle_end_date']}. I can add data at "
                 f"${price} per GB, up to 2 GB. How much would you like to add?")
        if self.refuel_gb is None:
            self.conv.user("I don't want to add data.")
            self.transfer()
        self.conv.user(f"Let's add {self.refuel_gb} GB.")
        self.confirm(f"Adding {self.refuel_gb} GB to line {self.lid} costs ${self.refuel_gb * price:.2f}, "
                     "charged to your next bill.")
        self.conv.call("refuel_data", {"customer_id": self.cid, "line_id": self.lid, "gb_amount": self.refuel_gb})

    # -- MMS ---------------------------------------------------------------------
    def fix_mms(self) -> None:
        """The manual's MMS section: network type, MMSC URL, Wi-Fi Calling, the messaging app's permissions."""
        found = self.batch([("check_network_status", {}), ("check_apn_settings", {}),
                            ("check_wifi_calling_status", {}), ("check_app_permissions", {"app_name": "messaging"})])
        fixes = []
        if "Cellular Network Type: 2G" in found:
            fixes.append(("set_network_mode_preference", {"mode": FAST_ENOUGH}))
        if "MMSC URL (for picture messages): Not Set" in found:
            fixes += [("reset_apn_settings", {}), ("reboot_device", {})]
        if "Wi-Fi Calling is currently turned ON" in found:
            fixes.append(("toggle_wifi_calling", {}))
        perms = re.search(r"App 'messaging' (has permission for: .*|currently has no permissions granted)", found)
        granted = perms.group(1) if perms else ""
        fixes += [("grant_app_permission", {"app_name": "messaging", "permission": p})
                  for p in ("storage", "sms") if not re.search(rf"\b{p}\b", granted)]
        self.batch(fixes)
        if "cannot" in self.ask(("can_send_mms", {})):
            self.transfer()


def check(player: TroubleshootPlayer) -> list[str]:
    """What tau2 would fault in the play: an expected action not performed, an env assertion false."""
    conv, task, errors = player.conv, player.task, []
    done = [(r, n, a) for r, n, a in conv.performed]
    for a in task.evaluation_criteria.actions or []:
        if (a.requestor, a.name, a.arguments) not in done:
            errors.append(f"{task.id}: expected {a.requestor} action {a.name}{a.arguments} not performed")
    for e in task.evaluation_criteria.env_assertions or []:
        if not conv.toolkit.run_env_assertion(e, raise_assertion_error=False):
            errors.append(f"{task.id}: assertion {e.func_name}{e.arguments} fails")
    return errors
