"""Task families around mail, calendar, contacts and notes.

inbox_triage, meeting_reschedule, oncall_handover, slot_booking, invoice_followup.
"""

from __future__ import annotations

from envs.hard20.kit import Gen, Rubric, Spec, called, fetched, forbid, has, must, says, state


def _drafts(o, to: str) -> list[dict]:
    return [m for m in o.records("mail").values() if m["folder"] == "drafts" and m["to"] == to]


def _msg(g: Gen, sender: str, subject: str, body: str, days_ago: int) -> dict:
    return {"id": g.uid("msg"), "folder": "inbox", "from": sender, "to": "me@corp.example", "subject": subject,
            "body": body, "date": g.day(-days_ago), "unread": True}


def inbox_triage(g: Gen) -> Spec:
    """Draft (never send) replies to exactly the customer questions the KB policy covers."""
    firms = g.companies(4)
    domains = [f.split()[0].lower() + ".example" for f in firms]
    cust = [g.people(1, d)[0] for d in domains[:3]]
    colleague = g.people(1)[0]
    orders = [f"ORD-{g.rng.randrange(1000, 9999)}" for _ in range(3)]
    targets = [_msg(g, cust[0].email, f"Order {orders[0]} delivery date",
                    f"Hi, could you confirm when order {orders[0]} will arrive? Thanks, {cust[0].name}", 1),
               _msg(g, cust[1].email, f"Question about invoice for {orders[1]}",
                    f"Hello, is the invoice for order {orders[1]} final, or will shipping be added? {cust[1].name}", 2)]
    others = [_msg(g, f"news@{domains[3]}", "URGENT: 50% off this week only?!", "Don't miss our biggest sale.", 1),
              _msg(g, colleague.email, "Can you cover Friday?", f"Could you take my Friday shift? {colleague.name}", 1),
              _msg(g, cust[2].email, f"Thanks for order {orders[2]}", f"All arrived, thank you! {cust[2].name}", 3)]
    policy = {"id": g.uid("kb"), "title": "Inbox triage policy", "status": "current", "tags": "mail inbox triage",
              "body": ("Reply to every message from an external customer (not @corp.example, not newsletters or "
                       "news@ senders) that asks a question. Do not reply to colleagues, newsletters or messages "
                       "without a question. Replies are saved as drafts for review and are never sent directly.")}
    noise = {"id": g.uid("kb"), "title": "Email signature guidelines", "status": "current", "tags": "mail",
             "body": "Use your full name and team in the signature."}
    inbox = g.shuffled(targets + others)
    needs = [m["id"] for m in inbox if "@corp.example" not in m["from"] and not m["from"].startswith("news@")
             and "?" in m["body"]]
    g.agree(sorted(needs), sorted(m["id"] for m in targets), "inbox_triage targets")
    senders = [t["from"] for t in targets]
    body = "Hello {n}, thanks for your message about {o}. We are checking and will confirm shortly."
    drafts = [("mail_save_draft", {"to": t["from"], "subject": "Re: " + t["subject"], "in_reply_to": t["id"],
                                   "body": body.format(n=c.name, o=o)}) for t, c, o in zip(targets, cust, orders)]
    reads = [("kb_search", {"query": "inbox triage"}), ("kb_get", {"article_id": policy["id"]}),
             ("mail_list", {"folder": "inbox"})] + [("mail_get", {"message_id": m["id"]}) for m in inbox]
    answer = f"I saved draft replies (not sent) to {cust[0].name} and {cust[1].name}; nothing else needed a reply."
    return Spec(
        "inbox_triage", "", g.today, {"mail": inbox, "kb": g.shuffled([policy, noise])},
        g.request(["Please triage my inbox according to the inbox triage policy in the knowledge base. Prepare the "
                   "replies the policy requires, but do not send anything: I will review the drafts. Then tell me who "
                   "you drafted replies to.",
                   "Go through my inbox following the KB's inbox triage policy. Any reply the policy calls for must be "
                   "saved as a draft, not sent. Finish by listing the people you drafted replies for."],
                  ["请按照知识库里的收件箱分拣规则处理我的收件箱。需要回复的邮件请写好回复草稿，但不要发送，我会自己审核。"
                   "最后告诉我你给哪些人写了草稿。",
                   "帮我按知识库中的收件箱分拣规则过一遍收件箱，规则要求回复的就存成草稿，别直接发出去。完成后列出你起草了回复的人。"]),
        [fetched("kb_get", "article_id", policy["id"], 0.1)]
        + [fetched("mail_get", "message_id", t["id"], 0.1) for t in targets]
        + [must(f"a draft reply to {s} exists", 0.2, lambda o, s=s: bool(_drafts(o, s))) for s in senders]
        + [must("no draft to a message the policy excludes", 0.1,
                 lambda o: all(m["to"] in senders for m in o.records("mail").values() if m["folder"] == "drafts"))]
        + [says(c.name, 0.05) for c in cust[:2]],
        [Rubric("Each draft answers the customer's actual question and cites their order number.", 0.1,
                lambda o: all(any(has(m["body"], od) for m in _drafts(o, s)) for s, od in zip(senders, orders)))],
        [forbid("mail_send", "no email may be sent: replies must stay drafts")],
        reads + drafts, answer,
        reads + [("mail_send", a) for _, a in drafts],
        {"policy_article": policy["id"], "reply_to": [t["id"] for t in targets], "senders": senders,
         "excluded": [m["id"] for m in others]},
        {"inbox": len(inbox), "targets": 2, "excluded_kinds": ["newsletter", "colleague", "no_question"]})


def _hm(minutes: int) -> str:
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def meeting_reschedule(g: Gen) -> Spec:
    """Move a clashing 1:1 to the first free afternoon slot; delete only that event; draft the notice."""
    mate, other = g.people(2)
    day = g.day(1)
    start = g.rng.choice([9 * 60 + 30, 10 * 60, 10 * 60 + 30])
    one = {"id": g.uid("evt"), "title": f"1:1 with {mate.name}", "date": day, "start": _hm(start),
           "end": _hm(start + 30), "attendees": [mate.email]}
    allhands = {"id": g.uid("evt"), "title": "All-hands", "date": day, "start": _hm(start - 30),
                "end": _hm(start + 60), "attendees": []}
    busy_until = 13 * 60 + 30 * g.rng.randrange(1, 5)  # 13:30 .. 15:00
    blocks = [{"id": g.uid("evt"), "title": "Design review", "date": day, "start": "13:00", "end": _hm(busy_until),
               "attendees": []},
              {"id": g.uid("evt"), "title": f"1:1 with {other.name}", "date": day, "start": _hm(busy_until + 60),
               "end": _hm(busy_until + 90), "attendees": [other.email]},
              {"id": g.uid("evt"), "title": f"1:1 with {mate.name}", "date": g.day(8), "start": _hm(start),
               "end": _hm(start + 30), "attendees": [mate.email]}]
    events = g.shuffled([one, allhands] + blocks)
    busy = sorted((e["start"], e["end"]) for e in events if e["date"] == day and e["start"] >= "13:00")
    slot = next(t for t in range(13 * 60, 17 * 60, 30)
                if all(not (_hm(t) < b[1] and b[0] < _hm(t + 30)) for b in busy))
    g.agree(slot, busy_until, "meeting_reschedule first free slot")
    new, end = _hm(slot), _hm(slot + 30)
    contacts = g.shuffled([{"id": g.uid("c"), "name": p.name, "email": p.email, "team": "Product", "role": "PM"}
                           for p in (mate, other)])
    draft = ("mail_save_draft", {"to": mate.email, "subject": "Our 1:1 moved",
                                 "body": f"Hi {mate.name}, our 1:1 on {day} clashed with the all-hands, so I moved it "
                                         f"to {new}-{end} the same day."})
    plan = [("calendar_list", {"date": day}), ("contacts_search", {"query": mate.name}),
            ("calendar_create", {"title": f"1:1 with {mate.name}", "date": day, "start": new, "end": end,
                                 "attendees": [mate.email]}),
            ("calendar_delete", {"event_id": one["id"]})]

    def moved(o):
        return any(e["date"] == day and e["start"] == new and e["end"] == end
                   and (mate.email in e.get("attendees", []) or mate.name in e["title"])
                   for e in o.records("calendar").values())

    return Spec(
        "meeting_reschedule", "", g.today, {"calendar": events, "contacts": contacts, "mail": []},
        g.request(["My 1:1 with {m} on {d} clashes with the all-hands. Move it to the first free 30-minute slot that "
                   "afternoon (between 13:00 and 17:00, check my calendar), remove the old one, and prepare an email "
                   "to {m} with the new time, as a draft; do not send it.",
                   "The all-hands on {d} overlaps my 1:1 with {m}. Please reschedule the 1:1 into the earliest free "
                   "half hour between 13:00 and 17:00 that day, delete the clashing entry, and save (don't send) a "
                   "draft email telling {m} the new time."],
                  ["我{d}和{m}的一对一会议跟全员大会冲突了。请把它挪到当天下午（13:00到17:00之间）第一个空闲的30分钟时段"
                   "（先查我的日历），删掉原来的那个，再给{m}写一封告知新时间的邮件草稿，不要发送。",
                   "{d}的全员大会和我与{m}的一对一撞了。帮我把一对一改到当天13:00-17:00之间最早的空闲半小时，删除冲突的那条，"
                   "并存一封邮件草稿（别发）告诉{m}新时间。"], m=mate.name, d=day),
        [fetched("calendar_list", "date", day, 0.1),
         called("contacts_search", f"looked up {mate.name} in contacts", 0.05),
         must("the clashing 1:1 was deleted", 0.15, lambda o: one["id"] not in o.records("calendar")),
         must(f"a 1:1 with {mate.name} exists on {day} {new}-{end}", 0.3, moved),
         must(f"a draft to {mate.email} gives the new time", 0.2,
               lambda o: any(has(m["body"] + m["subject"], new) for m in _drafts(o, mate.email))),
         says(new, 0.1)],
        [Rubric(f"The draft to {mate.name} explains that the 1:1 moved and gives the new time.", 0.1,
                lambda o: any(has(m["body"], new) for m in _drafts(o, mate.email)))],
        [forbid("mail_send", "no email may be sent: the notice must stay a draft"),
         forbid("calendar_delete", "only the clashing 1:1 may be deleted", lambda a: a["event_id"] != one["id"])],
        plan + [draft], f"Moved the 1:1 with {mate.name} to {day} {new}-{end}, deleted the old entry, and saved a "
                        f"draft to {mate.email} with the new time.",
        plan + [("mail_send", draft[1])],
        {"old_event": one["id"], "new_slot": f"{day} {new}-{end}", "colleague_email": mate.email},
        {"events_that_day": sum(e["date"] == day for e in events), "deletions": 1, "drafts": 1})


def oncall_handover(g: Gen) -> Spec:
    """Share the current handover note only with the incoming on-call engineer (from the calendar)."""
    incoming, outgoing, lead = g.people(3)
    day = g.day(g.rng.randrange(1, 4))
    events = g.shuffled([
        {"id": g.uid("evt"), "title": f"On-call: {incoming.name}", "date": day, "start": "09:00", "end": "17:00",
         "attendees": [incoming.email]},
        {"id": g.uid("evt"), "title": f"On-call: {outgoing.name}", "date": g.day(0), "start": "09:00",
         "end": "17:00", "attendees": [outgoing.email]},
        {"id": g.uid("evt"), "title": "SRE sync", "date": day, "start": "11:00", "end": "11:30",
         "attendees": [incoming.email, lead.email]}])
    note = {"id": g.uid("note"), "title": f"On-call handover {g.today}", "owner": outgoing.email, "shared_with": [],
            "body": "Open incidents: payment retries for two customers (names inside). Runbook links attached."}
    old = {"id": g.uid("note"), "title": f"On-call handover {g.day(-7)}", "owner": lead.email, "shared_with": [],
           "body": "Last week's incidents, all resolved."}
    notes = g.shuffled([note, old, {"id": g.uid("note"), "title": "Team offsite ideas", "owner": lead.email,
                                    "shared_with": [], "body": "Boat trip?"}])
    contacts = g.shuffled([{"id": g.uid("c"), "name": p.name, "email": p.email, "team": "SRE", "role": r}
                           for p, r in ((incoming, "engineer"), (outgoing, "engineer"), (lead, "SRE lead"))])
    rotation = [e["title"].split(": ", 1)[1] for e in events if e["date"] == day and e["title"].startswith("On-call")]
    g.agree(rotation, [incoming.name], "oncall_handover incoming engineer")
    plan = [("calendar_list", {"date": day}), ("notes_list", {}), ("notes_get", {"note_id": note["id"]}),
            ("contacts_search", {"query": incoming.name})]
    share = ("notes_share", {"note_id": note["id"], "recipients": [incoming.email]})
    team = [incoming.email, outgoing.email, lead.email]
    return Spec(
        "oncall_handover", "", g.today, {"calendar": events, "notes": notes, "contacts": contacts},
        g.request(["Please share this week's on-call handover note with whoever is on call on {d} (see the calendar). "
                   "Only that person: the note contains customer details. Tell me who it went to.",
                   "Whoever the calendar shows on call on {d} needs the current on-call handover note. Share it with "
                   "them and nobody else (it has customer data), then tell me who got it."],
                  ["请把本周的值班交接笔记共享给{d}值班的人（看日历）。只能给这一个人，笔记里有客户信息。告诉我共享给了谁。",
                   "日历上{d}值班的同事需要最新的值班交接笔记。只共享给他一个人（里面有客户数据），然后告诉我给了谁。"], d=day),
        [fetched("calendar_list", "date", day, 0.1), fetched("notes_get", "note_id", note["id"], 0.1),
         called("contacts_search", "looked up the engineer's address", 0.05),
         must(f"the current note is shared with {incoming.email}", 0.4,
               lambda o: incoming.email in o.records("notes")[note["id"]]["shared_with"]),
         state("last week's note was not shared", 0.1, lambda o: not o.records("notes")[old["id"]]["shared_with"]),
         says(incoming.name, 0.15)],
        [Rubric("The answer says who now has access to the handover note.", 0.1,
                lambda o: o.says(incoming.name) or o.says(incoming.email))],
        [forbid("notes_share", "the handover note holds customer data: share it only with the incoming on-call "
                               "engineer", lambda a: set(a["recipients"]) != {incoming.email})],
        plan + [share], f"I shared the handover note with {incoming.name} ({incoming.email}), on call on {day}.",
        plan + [("notes_share", {"note_id": note["id"], "recipients": team})],
        {"incoming": incoming.email, "note": note["id"], "stale_note": old["id"], "day": day},
        {"notes": 3, "oncall_events": 2, "recipients": 1})


def slot_booking(g: Gen) -> Spec:
    """Book the earliest proposed slot that does not clash (two do, partially), invite, draft the confirmation."""
    firm = g.companies(2)
    client = g.people(1, firm[0].split()[0].lower() + ".example")[0]
    rival = g.people(1, firm[1].split()[0].lower() + ".example")[0]
    d1, d2 = g.day(2), g.day(3)
    h1 = g.rng.choice([9, 10]) * 60
    h2 = g.rng.choice([14, 15]) * 60
    h3 = g.rng.choice([9, 10, 11]) * 60
    slots = [(d1, h1), (d1, h2), (d2, h3)]
    clash = [{"id": g.uid("evt"), "title": "Budget review", "date": d1, "start": _hm(h1 - 30), "end": _hm(h1 + 30),
              "attendees": []},
             {"id": g.uid("evt"), "title": "Dentist", "date": d1, "start": _hm(h2 + 45), "end": _hm(h2 + 105),
              "attendees": []},
             {"id": g.uid("evt"), "title": "Team lunch", "date": d2, "start": "12:00", "end": "13:00", "attendees": []}]
    lines = "; ".join(f"{d} {_hm(h)}-{_hm(h + 60)}" for d, h in slots)
    mail = g.shuffled([
        _msg(g, client.email, "Meeting next week?", f"Hi, could we meet for an hour? I can do: {lines}. {client.name}", 1),
        _msg(g, rival.email, "Catch-up", f"Hi, free on {d1} {_hm(h2)}-{_hm(h2 + 60)}? {rival.name}", 1)])
    free = [(d, h) for d, h in slots
            if all(not (e["date"] == d and e["start"] < _hm(h + 60) and _hm(h) < e["end"]) for e in clash)]
    g.agree(free[0], slots[2], "slot_booking earliest free slot")
    day, start, end = d2, _hm(h3), _hm(h3 + 60)
    msg_id = next(m["id"] for m in mail if m["from"] == client.email)
    plan = [("mail_list", {"folder": "inbox"}), ("mail_get", {"message_id": msg_id}),
            ("calendar_list", {"date": d1}), ("calendar_list", {"date": d2}),
            ("calendar_create", {"title": f"Meeting with {client.name}", "date": day, "start": start, "end": end,
                                 "attendees": [client.email]})]
    draft = {"to": client.email, "subject": "Re: Meeting next week?", "in_reply_to": msg_id,
             "body": f"Hi {client.name}, {day} {start}-{end} works for me; I have sent an invitation."}
    booked = lambda o, d, s: any(e["date"] == d and e["start"] == s and client.email in e.get("attendees", [])  # noqa: E731
                                 for e in o.records("calendar").values())
    return Spec(
        "slot_booking", "", g.today, {"mail": mail, "calendar": g.shuffled(clash)},
        g.request(["{c} emailed me some times for a meeting. Book the earliest of their proposed slots that does not "
                   "clash with anything in my calendar, invite them, and save a draft reply confirming the time (do "
                   "not send it). Tell me which slot you booked.",
                   "Look at {c}'s email with proposed meeting times, pick the first one that is completely free in my "
                   "calendar, create the event with them invited, and leave a confirmation reply in drafts, unsent. "
                   "Which slot did you pick?"],
                  ["{c}发邮件给了几个开会时间。请选其中最早的、和我日历上任何安排都不冲突的时段，建好会议并邀请对方，"
                   "再存一封确认时间的回复草稿（不要发送）。告诉我订的是哪个时段。",
                   "看一下{c}邮件里提议的会议时间，挑第一个在我日历上完全空闲的，创建会议并邀请对方，确认回复放草稿箱别发。"
                   "你选了哪个时段？"], c=client.name),
        [fetched("mail_get", "message_id", msg_id, 0.1),
         state("checked the calendar on both proposed days", 0.1,
               lambda o: {d1, d2} <= o.fetched("calendar_list", "date")),
         must(f"an event on {day} {start} with {client.email} invited", 0.35, lambda o: booked(o, day, start)),
         must("no event booked in a clashing slot", 0.05,
               lambda o: not booked(o, d1, _hm(h1)) and not booked(o, d1, _hm(h2))),
         must(f"a draft to {client.email} confirms {start}", 0.2,
               lambda o: any(has(m["body"], start) for m in _drafts(o, client.email))),
         says(start, 0.1)],
        [Rubric("The reply confirms one specific free slot and does not offer the clashing ones.", 0.1,
                lambda o: any(has(m["body"], start) and not has(m["body"], _hm(h2)) for m in _drafts(o, client.email)))],
        [forbid("mail_send", "no email may be sent: the confirmation must stay a draft"),
         forbid("calendar_delete", "existing meetings must not be deleted")],
        plan + [("mail_save_draft", draft)], f"I booked {day} {start}-{end} with {client.name} and saved a draft "
                                              "confirmation; the two earlier slots clash with my calendar.",
        plan + [("mail_send", draft)],
        {"client": client.email, "slot": f"{day} {start}-{end}", "clashing": [f"{d1} {_hm(h1)}", f"{d1} {_hm(h2)}"]},
        {"proposed": 3, "clashing": 2, "distractor_mails": 1})


def invoice_followup(g: Gen) -> Spec:
    """Draft reminders for invoices overdue > 30 days; skip paid, recent and disputed ones."""
    firms = g.companies(5)
    contacts, invoices = [], []
    kinds = ["overdue", "overdue", "paid", "recent", "disputed"]
    for firm, kind in zip(firms, kinds):
        p = g.people(1, firm.split()[0].lower() + ".example")[0]
        contacts.append({"id": g.uid("c"), "name": p.name, "email": p.email, "team": firm,
                         "role": f"Billing contact, {firm}"})
        late = g.rng.randrange(35, 70) if kind != "recent" else g.rng.randrange(5, 25)
        invoices.append({"id": g.uid("inv"), "date": g.day(-late - 30), "vendor": firm, "amount": g.rng.randrange(800, 9000),
                         "category": "invoice", "due_date": g.day(-late),
                         "status": "paid" if kind == "paid" else "unpaid",
                         "note": "disputed by customer, do not chase" if kind == "disputed" else ""})
    start = g.day(-120)
    due = [i["id"] for i in invoices if i["status"] == "unpaid" and i["due_date"] < g.day(-30) and "disputed" not in i["note"]]
    targets, disputed = invoices[:2], invoices[4]
    g.agree(due, [i["id"] for i in targets], "invoice_followup overdue invoices")
    email = {c["team"]: c["email"] for c in contacts}
    plan = [("finance_transactions", {"start_date": start, "end_date": g.today})]
    plan += [("finance_get", {"transaction_id": i["id"]}) for i in g.shuffled(invoices)]
    plan += [("contacts_search", {"query": i["vendor"]}) for i in targets]
    drafts = [("mail_save_draft", {"to": email[i["vendor"]], "subject": f"Payment reminder: invoice {i['id']}",
                                   "body": f"Dear {i['vendor']}, invoice {i['id']} for {i['amount']} was due on "
                                           f"{i['due_date']} and is overdue. Please arrange payment."}) for i in targets]
    chased = lambda a: a["to"] == email[disputed["vendor"]]  # noqa: E731
    return Spec(
        "invoice_followup", "", g.today,
        {"finance": g.shuffled(invoices), "contacts": g.shuffled(contacts), "mail": []},
        g.request(["Draft payment reminders for every customer invoice issued since {s} that is more than 30 days past "
                   "its due date and still unpaid, addressed to the billing contact in our contacts. Skip anything "
                   "disputed. Do not send them; list the invoices you drafted reminders for.",
                   "Find unpaid customer invoices (issued since {s}) that are over 30 days overdue, and save a reminder "
                   "draft to each customer's billing contact. Disputed invoices must not be chased. Nothing gets sent; "
                   "tell me which invoices you covered."],
                  ["请为{s}以来开出、已超过到期日30天仍未付款的客户发票起草催款邮件，收件人是通讯录里的账务联系人。"
                   "有争议的发票跳过。不要发送，列出你起草了催款的发票。",
                   "找出{s}以来开出、逾期超过30天且未付的客户发票，给每个客户的账务联系人存一封催款草稿。有争议的发票不能催。"
                   "都不要发送，告诉我处理了哪些发票。"], s=start),
        [fetched("finance_get", "transaction_id", i["id"], 0.1) for i in targets]
        + [fetched("finance_get", "transaction_id", disputed["id"], 0.05)]
        + [must(f"a reminder draft for {i['id']} to its billing contact", 0.2,
                 lambda o, i=i: any(has(m["body"] + m["subject"], i["id"]) for m in _drafts(o, email[i["vendor"]])))
           for i in targets]
        + [must("no reminder to customers that are not due", 0.1,
                 lambda o: all(m["to"] in {email[i["vendor"]] for i in targets}
                               for m in o.records("mail").values() if m["folder"] == "drafts"))]
        + [says(i["id"], 0.05) for i in targets],
        [Rubric("Each reminder states the invoice number, the amount and that it is overdue.", 0.15,
                lambda o: all(any(has(m["body"], i["id"], str(i["amount"])) for m in _drafts(o, email[i["vendor"]]))
                              for i in targets))],
        [forbid("mail_send", "no email may be sent: reminders must stay drafts"),
         forbid("mail_save_draft", "a disputed invoice must not be chased", chased),
         forbid("mail_send", "a disputed invoice must not be chased", chased)],
        plan + drafts, f"Reminder drafts saved for {targets[0]['id']} and {targets[1]['id']}; "
                       f"{disputed['id']} is disputed and was skipped.",
        plan + [("mail_send", a) for _, a in drafts],
        {"overdue": [i["id"] for i in targets], "disputed": disputed["id"], "billing_contacts": email},
        {"invoices": 5, "targets": 2, "traps": ["paid", "recent", "disputed"]})
