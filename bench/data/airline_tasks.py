"""The scripted agent's moves for one tau2 airline task.

Per task (tasks.json): the user states the reason for the call (`reason_for_call`,
turned into the first person) and gives the user id when asked (`known_info`); the
agent reads the profile, reads the reservations the task touches plus one to three
others of the user's (as a real agent looks around), may check a flight's status,
summarises, searches flights before booking or changing them, lists the action's
details and asks for confirmation, and then performs tau2's expected actions
(`evaluation_criteria.actions`) in order with their exact arguments. Reads the
agent already made with the same arguments (and no write since) are not repeated.
"""
from __future__ import annotations

import json

from airline_agent import (ASK_ID, BYE, CONFIRM_ASK, CONTINUE, ELSE, GIVE_ID, GIVE_RES, GREETINGS, PICK, YES,
                           Conversation, first_person, reservation_of, user_id_of)

READS = {"get_user_details", "get_reservation_details", "search_direct_flight", "search_onestop_flight",
         "get_flight_status", "list_all_airports"}
SEARCHES = {"search_direct_flight", "search_onestop_flight"}
WRITE_INTROS = ["Here is what I will do:", "To confirm, the action is:", "Please review the details:",
                "Before I make the change, here are the details:"]
NO_ACTION = [
    "I have reviewed your reservations against our policy. I'm sorry, but I cannot make that change on {res}.",
    "Thank you for your patience. Unfortunately, under our policy this request cannot be processed for {res}.",
    "I checked {res}. According to the policy, I'm not able to do this, but I'm happy to help with anything else.",
]


def _key(name: str, args: dict) -> str:
    return name + json.dumps(args, sort_keys=True)


def describe_reservation(rid: str, r) -> str:
    if not isinstance(r, dict):
        return f"- {rid}: not found ({r})"
    flights = ", ".join(f"{f['flight_number']} {f['origin']}-{f['destination']} on {f['date']} (${f['price']})"
                        for f in r["flights"])
    pax = ", ".join(f"{p['first_name']} {p['last_name']}" for p in r["passengers"])
    status = f", status {r['status']}" if r.get("status") else ""
    return (f"- {rid}: {r['flight_type'].replace('_', ' ')} {r['origin']} to {r['destination']}, "
            f"{r['cabin'].replace('_', ' ')}; flights {flights}; passengers {pax}; "
            f"{r['total_baggages']} checked bag(s); insurance {r['insurance']}; booked {r['created_at']}{status}")


def describe_options(results, cabin: str, chosen: set[str], limit: int = 4) -> str:
    if not isinstance(results, list) or not results:
        return "I could not find any available flights for that search."
    lines = []
    for i, opt in enumerate(results):
        legs = opt if isinstance(opt, list) else [opt]
        numbers = {leg["flight_number"] for leg in legs}
        if i >= limit and not numbers & chosen:
            continue
        price = sum(leg["prices"][cabin] for leg in legs)
        route = " + ".join(f"{leg['flight_number']} {leg['origin']}-{leg['destination']} "
                           f"{leg['scheduled_departure_time_est'][:5]}-{leg['scheduled_arrival_time_est'][:5]}"
                           for leg in legs)
        seats = min(leg["available_seats"][cabin] for leg in legs)
        lines.append(f"- {route}: {cabin.replace('_', ' ')} ${price}, {seats} seat(s) left")
    return f"I found {len(results)} option(s). The main ones:\n" + "\n".join(lines)


def describe_action(name: str, a: dict) -> str:
    flights = ", ".join(f"{f['flight_number']} on {f['date']}" for f in a.get("flights", []))
    if name == "book_reservation":
        pax = "; ".join(f"{p['first_name']} {p['last_name']} ({p['dob']})" for p in a["passengers"])
        pay = ", ".join(f"{p['payment_id']} ${p['amount']}" for p in a["payment_methods"])
        return (f"Book a {a['flight_type'].replace('_', ' ')} trip {a['origin']} to {a['destination']} in "
                f"{a['cabin'].replace('_', ' ')} for user {a['user_id']}: flights {flights}; passengers {pax}; "
                f"payment {pay}; {a['total_baggages']} checked bag(s) ({a['nonfree_baggages']} paid); "
                f"insurance {a['insurance']}.")
    if name == "update_reservation_flights":
        return (f"Change reservation {a['reservation_id']} to {a['cabin'].replace('_', ' ')} on flights {flights}; "
                f"any price difference goes to {a['payment_id']}.")
    if name == "cancel_reservation":
        return (f"Cancel reservation {a['reservation_id']}. The refund goes back to the original payment "
                "method(s) within 5 to 7 business days.")
    if name == "update_reservation_baggages":
        return (f"Set reservation {a['reservation_id']} to {a['total_baggages']} checked bag(s), "
                f"{a['nonfree_baggages']} of them paid, charged to {a['payment_id']}.")
    if name == "update_reservation_passengers":
        pax = "; ".join(f"{p['first_name']} {p['last_name']} ({p['dob']})" for p in a["passengers"])
        return f"Update the passengers of reservation {a['reservation_id']} to: {pax}."
    if name == "send_certificate":
        return f"Send a travel certificate of ${a['amount']} to your account {a['user_id']} as a gesture of goodwill."
    return f"{name} with {json.dumps(a)}"


def describe_result(name: str, out) -> str:
    if not isinstance(out, dict):
        return f"Done: {out}" if not str(out).startswith("Error") else f"I'm sorry, the system says: {out}"
    if name == "book_reservation":
        return f"Your reservation {out['reservation_id']} is booked."
    if name == "cancel_reservation":
        return f"Reservation {out['reservation_id']} is now cancelled."
    return f"Reservation {out['reservation_id']} is updated."


class TaskPlayer:
    """Plays one task on a Conversation (fresh db copy)."""

    def __init__(self, conv: Conversation, task: dict):
        self.conv, self.rng, self.task = conv, conv.rng, task
        ins = task["user_scenario"]["instructions"]
        self.reason, self.known = ins["reason_for_call"], ins["known_info"]
        self.actions = (task.get("evaluation_criteria") or {}).get("actions") or []
        self.done: set[str] = set()
        self.reservations: dict[str, object] = {}
        self.searched: dict[str, object] = {}
        self.transferred = False

    def read(self, name: str, args: dict):
        out = self.conv.call(name, args)
        self.done.add(_key(name, args))
        if name in SEARCHES:
            self.searched[_key(name, args)] = out
        if name == "get_reservation_details":
            self.reservations[args["reservation_id"]] = out
        return out

    def play(self) -> None:
        conv = self.conv
        conv.new_task()
        conv.say(conv.pick(GREETINGS))
        conv.user(first_person(self.reason))
        conv.say(conv.pick(ASK_ID))
        uid, known_res = user_id_of(self.known), reservation_of(self.known)
        conv.user(conv.pick(GIVE_ID, uid=uid) + (conv.pick(GIVE_RES, res=known_res) if known_res else ""))
        user = self.read("get_user_details", {"user_id": uid})
        self.look_around(user, known_res)
        wrote = self.perform()
        if not wrote:
            touched = [r for r in self.reservations] or [uid]
            conv.say(conv.pick(NO_ACTION, res=touched[0]))
        if not self.transferred:
            conv.say(conv.pick(ELSE))
            conv.user(conv.pick(BYE))

    def needed_reservations(self) -> list[str]:
        out = []
        for a in self.actions:
            rid = a["arguments"].get("reservation_id")
            if rid and rid not in out:
                out.append(rid)
        return out

    def look_around(self, user, known_res: str | None) -> None:
        """Reads the task's reservations and a few others, the one the user named first; maybe a flight status."""
        mine = user.get("reservations", []) if isinstance(user, dict) else []
        needed = self.needed_reservations()
        others = [r for r in mine if r not in needed]
        extras = set(self.rng.sample(others, min(len(others), self.rng.randint(1, 3))))
        order = [known_res] if known_res else []
        order += [r for r in mine if (r in needed or r in extras) and r not in order]
        order += [r for r in needed if r not in order]
        for rid in order:
            self.read("get_reservation_details", {"reservation_id": rid})
        if "delay" in self.reason.lower() or self.rng.random() < 0.3:
            self.check_status([r for r in order if r in needed] or order)
        shown = [r for r in order if r in needed] or order
        lines = [describe_reservation(r, self.reservations[r]) for r in shown]
        if lines:
            self.conv.say("Here is what I found on your account:\n" + "\n".join(lines))
            self.conv.user(self.conv.pick(CONTINUE))

    def check_status(self, rids: list[str]) -> None:
        res = [self.reservations[r] for r in rids if isinstance(self.reservations.get(r), dict)]
        if not res:
            return
        flight = self.rng.choice(self.rng.choice(res)["flights"])
        status = self.read("get_flight_status", {"flight_number": flight["flight_number"], "date": flight["date"]})
        self.conv.say(f"The status of flight {flight['flight_number']} on {flight['date']} is: {status}.")
        self.conv.user(self.conv.pick(CONTINUE))

    def perform(self) -> bool:
        """tau2's expected actions in order; returns whether any write happened."""
        wrote = False
        for i, a in enumerate(self.actions):
            name, args = a["name"], a["arguments"]
            if name in READS:
                if wrote or _key(name, args) not in self.done:
                    self.read(name, args)
                    nxt = self.actions[i + 1]["name"] if i + 1 < len(self.actions) else None
                    if name in SEARCHES and nxt not in SEARCHES:
                        self.show_options(args, name)
                continue
            if name == "calculate":
                out = self.conv.call(name, args)
                self.conv.say(f"The result is {out}.")
                self.conv.user(self.conv.pick(CONTINUE))
                continue
            self.write(name, args)
            wrote = True
        return wrote

    def show_options(self, args: dict, name: str, cabin: str = "economy", chosen: set[str] = frozenset()) -> None:
        out = self.searched[_key(name, args)]
        self.conv.say(describe_options(out, cabin, set(chosen)))
        self.conv.user(self.conv.pick(CONTINUE) if not chosen else
                       self.conv.pick(PICK, choice=" and ".join(sorted(chosen))))

    def flight_searches(self, args: dict) -> list[tuple[str, dict, set[str]]]:
        """The searches that find the flights of a booking or change: a one-stop search for two chained
        legs on one day, a direct search otherwise; legs already on the reservation need none."""
        current = self.reservations.get(args.get("reservation_id"))
        have = {(f["flight_number"], f["date"]) for f in current["flights"]} if isinstance(current, dict) else set()
        db = self.conv.toolkit.db.flights
        legs = [f for f in args.get("flights", []) if (f["flight_number"], f["date"]) not in have]
        out, i = [], 0
        while i < len(legs):
            f1 = db.get(legs[i]["flight_number"])
            f2 = db.get(legs[i + 1]["flight_number"]) if i + 1 < len(legs) else None
            if f1 is None:
                i += 1
                continue
            if f2 and f1.destination == f2.origin and legs[i]["date"] == legs[i + 1]["date"]:
                q = {"origin": f1.origin, "destination": f2.destination, "date": legs[i]["date"]}
                out.append(("search_onestop_flight", q, {f1.flight_number, f2.flight_number}))
                i += 2
            else:
                q = {"origin": f1.origin, "destination": f1.destination, "date": legs[i]["date"]}
                out.append(("search_direct_flight", q, {f1.flight_number}))
                i += 1
        return out

    def write(self, name: str, args: dict) -> None:
        conv = self.conv
        if name in ("book_reservation", "update_reservation_flights"):
            for sname, q, chosen in self.flight_searches(args):
                if _key(sname, q) not in self.done:
                    self.read(sname, q)
                self.show_options(q, sname, args["cabin"], chosen)
        if name == "transfer_to_human_agents":
            conv.call(name, args)
            conv.say("YOU ARE BEING TRANSFERRED TO A HUMAN AGENT. PLEASE HOLD ON.")
            conv.user(conv.pick(CONTINUE))
            self.transferred = True
            return
        conv.say(f"{conv.pick(WRITE_INTROS)}\n{describe_action(name, args)}\n{conv.pick(CONFIRM_ASK)}")
        conv.user(conv.pick(YES))
        out = conv.call(name, args)
        conv.say(describe_result(name, out))
        conv.user(conv.pick(CONTINUE))
