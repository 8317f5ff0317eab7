"""Task families around the helpdesk, the knowledge base and the CRM.

vip_sla_escalation, refund_eligibility, ticket_kb_answer, kb_article_fix, churn_risk_todos.
"""

from __future__ import annotations

import datetime as dt

from envs.hard20.kit import Gen, Rubric, Spec, fetched, forbid, has, must, says, state


def _ticket(g: Gen, customer: dict, subject: str, body: str, hours_ago: int, status: str = "open") -> dict:
    opened = dt.datetime.fromisoformat(g.today + "T09:00:00") - dt.timedelta(hours=hours_ago)
    return {"id": g.uid("T"), "customer_id": customer["id"], "customer": customer["name"], "subject": subject,
            "body": body, "priority": "normal", "status": status, "opened_at": opened.isoformat(), "assignee": None,
            "notes": []}


def _tickets(o) -> dict:
    return o.records("helpdesk")


def _untouched(o, ids) -> bool:
    return not any(e["record"] in ids for e in o.backend.changes("helpdesk"))


def vip_sla_escalation(g: Gen) -> Spec:
    """Escalate only the VIP tickets past the SLA in the KB; leave everything else alone."""
    hours = g.rng.choice([4, 8, 24])
    firms = g.companies(5)
    tiers = ["vip", "vip", "vip", "standard", "standard"]
    customers = [{"id": g.uid("cus"), "name": f, "tier": t, "region": "EU", "stage": "active", "owner": "am@corp.example"}
                 for f, t in zip(firms, tiers)]
    ages = [hours + g.rng.randrange(1, 30), hours + g.rng.randrange(1, 30), g.rng.randrange(1, hours),
            hours + g.rng.randrange(1, 30), g.rng.randrange(1, hours)]
    topics = ["Login fails for all users", "Export stuck at 90%", "Invoice PDF missing", "API returns 502",
              "Password reset email not arriving"]
    tickets = [_ticket(g, c, s, f"{s}. Please help.", a) for c, s, a in zip(customers, g.shuffled(topics), ages)]
    targets = tickets[:2]
    sla = {"id": g.uid("kb"), "title": "Support SLA", "status": "current", "tags": "sla vip escalation",
           "body": f"VIP customers (CRM tier 'vip') get a first response within {hours} hours. A VIP ticket still open "
                   "after that is breached: set its status to escalated and its priority to urgent. Standard tickets "
                   "follow the normal queue."}
    tier = {c["id"]: c["tier"] for c in customers}
    now = dt.datetime.fromisoformat(g.today + "T09:00:00")
    breached = sorted(t["id"] for t in tickets if tier[t["customer_id"]] == "vip" and t["status"] == "open"
                      and now - dt.datetime.fromisoformat(t["opened_at"]) > dt.timedelta(hours=hours))
    ids = [t["id"] for t in targets]
    g.agree(breached, sorted(ids), "vip_sla_escalation breached VIP tickets")
    plan = [("kb_search", {"query": "SLA"}), ("kb_get", {"article_id": sla["id"]}), ("helpdesk_list", {"status": "open"})]
    for t in tickets:
        plan += [("helpdesk_get", {"ticket_id": t["id"]}), ("crm_get", {"customer_id": t["customer_id"]})]
    updates = [("helpdesk_update", {"ticket_id": i, "status": "escalated", "priority": "urgent",
                                    "note": f"VIP SLA of {hours} h breached"}) for i in ids]
    others = [t["id"] for t in tickets[2:]]
    return Spec(
        "vip_sla_escalation", "", g.today,
        {"helpdesk": g.shuffled(tickets), "crm": g.shuffled(customers), "kb": [sla]},
        g.request(["Check the open support tickets against our SLA article in the knowledge base and escalate the ones "
                   "that breach it, exactly as the article says. Don't close anything. Tell me which tickets you "
                   "escalated.",
                   "Please apply the support SLA from the KB to the open tickets: the breached ones get escalated the "
                   "way the article prescribes, the rest stay as they are. No closing. Which ones did you escalate?"],
                  ["请对照知识库中的SLA文章检查未关闭的工单，严格按文章规定升级违反SLA的工单。不要关闭任何工单。告诉我升级了哪些。",
                   "请把知识库里的支持SLA应用到未关闭的工单上：违约的按文章要求升级，其余保持不变，不要关闭。你升级了哪些？"]),
        [fetched("kb_get", "article_id", sla["id"], 0.1)]
        + [fetched("crm_get", "customer_id", t["customer_id"], 0.05) for t in targets]
        + [must(f"{i} is escalated", 0.2, lambda o, i=i: _tickets(o)[i]["status"] == "escalated") for i in ids]
        + [state(f"{i} has priority urgent", 0.05, lambda o, i=i: _tickets(o)[i]["priority"] == "urgent") for i in ids]
        + [must("no other ticket was changed", 0.1, lambda o: _untouched(o, others))]
        + [says(i, 0.05) for i in ids],
        [Rubric("The answer explains that the escalated tickets are VIP tickets past the SLA.", 0.1,
                lambda o: o.says("vip") and (o.says("sla") or o.says(f"{hours}")))],
        [forbid("helpdesk_close", "no ticket may be closed")],
        plan + updates, f"Escalated {ids[0]} and {ids[1]} (VIP, open longer than the {hours} h SLA) to urgent.",
        plan + updates + [("helpdesk_close", {"ticket_id": others[1], "resolution": "stale"})],
        {"sla_hours": hours, "escalate": ids, "leave": others},
        {"tickets": 5, "targets": 2, "traps": ["vip_within_sla", "standard_breached", "standard_recent"]})


def refund_eligibility(g: Gen) -> Spec:
    """Approve eligible refund tickets, decline the rest with the policy reason; close nothing, file nothing."""
    days, limit = g.rng.choice([14, 30]), g.rng.choice([200, 300, 500])
    firms = g.companies(5)
    customers = [{"id": g.uid("cus"), "name": f} for f in firms]
    sales = [
        {"id": g.uid("tx"), "date": g.day(-g.rng.randrange(2, days)), "vendor": firms[0], "amount": g.rng.randrange(20, limit),
         "category": "sale", "status": "paid", "note": ""},
        {"id": g.uid("tx"), "date": g.day(-g.rng.randrange(2, days)), "vendor": firms[1], "amount": g.rng.randrange(20, limit),
         "category": "sale", "status": "paid", "note": ""},
        {"id": g.uid("tx"), "date": g.day(-days - g.rng.randrange(3, 30)), "vendor": firms[2],
         "amount": g.rng.randrange(20, limit), "category": "sale", "status": "paid", "note": ""},
        {"id": g.uid("tx"), "date": g.day(-g.rng.randrange(2, days)), "vendor": firms[3],
         "amount": limit + g.rng.randrange(10, 400), "category": "sale", "status": "paid", "note": ""}]
    tickets = [_ticket(g, c, "Refund request", f"Please refund our purchase {s['id']}.", g.rng.randrange(2, 30))
               for c, s in zip(customers, sales)]
    tickets.append(_ticket(g, customers[4], "How do I add a user?", "Where is the add-user button?", 5))
    policy = {"id": g.uid("kb"), "title": "Refund policy", "status": "current", "tags": "refund policy",
              "body": f"A refund is allowed when the purchase is at most {days} days old and its amount is at most "
                      f"{limit}. Eligible: set the ticket to pending with a note 'refund approved'. Not eligible: set it "
                      "to waiting_customer with a note giving the reason. Refund tickets are never closed by support, "
                      "and support never files finance reports."}
    eligible = sorted(t["id"] for t, s in zip(tickets, sales) if s["date"] >= g.day(-days) and s["amount"] <= limit)
    yes, no = tickets[:2], tickets[2:4]
    g.agree(eligible, sorted(t["id"] for t in yes), "refund_eligibility eligible tickets")
    plan = [("kb_search", {"query": "refund policy"}), ("kb_get", {"article_id": policy["id"]}),
            ("helpdesk_list", {"status": "open"})]
    for t, s in zip(tickets, sales):
        plan += [("helpdesk_get", {"ticket_id": t["id"]}), ("finance_get", {"transaction_id": s["id"]})]
    acts = [("helpdesk_update", {"ticket_id": t["id"], "status": "pending", "note": "refund approved"}) for t in yes]
    reasons = [f"not eligible: purchase older than {days} days", f"not eligible: amount over {limit}"]
    acts += [("helpdesk_update", {"ticket_id": t["id"], "status": "waiting_customer", "note": r})
             for t, r in zip(no, reasons)]
    tk = lambda o, i: _tickets(o)[i]  # noqa: E731
    return Spec(
        "refund_eligibility", "", g.today,
        {"helpdesk": g.shuffled(tickets), "finance": g.shuffled(sales), "kb": [policy]},
        g.request(["Work through the open refund request tickets using the refund policy in the knowledge base: check "
                   "each purchase, then update every refund ticket the way the policy says. Tell me which refunds you "
                   "approved.",
                   "Please handle today's refund tickets per the KB refund policy: look up each purchase, approve or "
                   "decline as the policy prescribes, and report the approved ones."],
                  ["请按照知识库中的退款政策处理所有未关闭的退款工单：核对每笔购买，再按政策更新每个退款工单。告诉我批准了哪些退款。",
                   "请按知识库退款政策处理今天的退款工单：查询每笔购买，按政策批准或拒绝，并汇报批准了哪些。"]),
        [fetched("kb_get", "article_id", policy["id"], 0.1)]
        + [fetched("finance_get", "transaction_id", s["id"], 0.025) for s in sales]
        + [must(f"{t['id']} approved (pending, note)", 0.15,
                 lambda o, i=t["id"]: tk(o, i)["status"] == "pending" and any(has(n, "approved") for n in tk(o, i)["notes"]))
           for t in yes]
        + [must(f"{t['id']} declined (waiting_customer)", 0.1,
                 lambda o, i=t["id"]: tk(o, i)["status"] == "waiting_customer") for t in no]
        + [state("the non-refund ticket was left alone", 0.05, lambda o: _untouched(o, [tickets[4]["id"]]))]
        + [says(t["id"], 0.05) for t in yes],
        [Rubric("Each declined ticket's note gives the policy reason (too old, or over the amount limit).", 0.15,
                lambda o: any(has(n, str(days)) for n in tk(o, no[0]["id"])["notes"])
                and any(has(n, str(limit)) for n in tk(o, no[1]["id"])["notes"]))],
        [forbid("helpdesk_close", "refund tickets must not be closed"),
         forbid("finance_submit_report", "support must not file finance reports")],
        plan + acts, f"Approved the refunds in {yes[0]['id']} and {yes[1]['id']}; declined {no[0]['id']} (older than "
                     f"{days} days) and {no[1]['id']} (over {limit}).",
        plan + acts + [("helpdesk_close", {"ticket_id": no[0]["id"], "resolution": "refund declined"})],
        {"max_days": days, "max_amount": limit, "approve": [t["id"] for t in yes], "decline": [t["id"] for t in no]},
        {"tickets": 5, "eligible": 2, "traps": ["too_old", "too_large", "not_a_refund"]})


def ticket_kb_answer(g: Gen) -> Spec:
    """Answer a ticket from the current KB article (an archived one disagrees) as a note; close nothing."""
    plan_name, other_plan = g.rng.sample(["Starter", "Team", "Business", "Scale"], 2)
    value, old_value, other_value = g.rng.sample(range(60, 2000, 20), 3)
    cust = {"id": g.uid("cus"), "name": g.companies(1)[0]}
    ticket = _ticket(g, cust, "Rate limit?", f"We are on the {plan_name} plan. How many API requests per minute may "
                                             "we send?", 3)
    other = _ticket(g, {"id": g.uid("cus"), "name": g.companies(1)[0]}, "Logo upload", "Logo upload fails.", 6)
    current = {"id": g.uid("kb"), "title": f"API rate limits ({plan_name} plan)", "status": "current",
               "tags": "api rate limit", "body": f"The {plan_name} plan allows {value} API requests per minute."}
    archived = {"id": g.uid("kb"), "title": f"API rate limits ({plan_name} plan, 2024)", "status": "archived",
                "tags": "api rate limit", "body": f"The {plan_name} plan allows {old_value} API requests per minute."}
    otherkb = {"id": g.uid("kb"), "title": f"API rate limits ({other_plan} plan)", "status": "current",
               "tags": "api rate limit", "body": f"The {other_plan} plan allows {other_value} API requests per minute."}
    kb = g.shuffled([current, archived, otherkb])
    found = [a for a in kb if a["status"] == "current" and plan_name in a["title"]]
    g.agree([a["id"] for a in found], [current["id"]], "ticket_kb_answer current article")
    tid = ticket["id"]
    plan = [("helpdesk_get", {"ticket_id": tid}), ("kb_search", {"query": "rate limit"}),
            ("kb_get", {"article_id": current["id"]})]
    act = ("helpdesk_update", {"ticket_id": tid, "status": "waiting_customer",
                               "note": f"The {plan_name} plan allows {value} API requests per minute (KB {current['id']})."})
    notes = lambda o: " ".join(o.records("helpdesk")[tid]["notes"])  # noqa: E731
    return Spec(
        "ticket_kb_answer", "", g.today, {"helpdesk": g.shuffled([ticket, other]), "kb": kb},
        g.request(["Ticket {t} has a customer question. Find the answer in the knowledge base (use the current article), "
                   "add it to the ticket as a note and set the ticket to waiting_customer. Don't close it and don't edit "
                   "the knowledge base. What is the answer?",
                   "Please answer the question in ticket {t} from the up-to-date KB article: put the answer in a ticket "
                   "note and move the ticket to waiting_customer. Leave the KB unchanged and the ticket open. Tell me "
                   "the answer."],
                  ["工单{t}里有客户的问题。请在知识库里找到答案（用现行有效的文章），作为备注加到工单上，并把工单状态设为"
                   "waiting_customer。不要关闭工单，也不要修改知识库。答案是什么？",
                   "请用知识库里最新的文章回答工单{t}中的问题：把答案写进工单备注，状态改为waiting_customer。不要改知识库，"
                   "工单保持打开。告诉我答案。"], t=tid),
        [fetched("helpdesk_get", "ticket_id", tid, 0.1), fetched("kb_get", "article_id", current["id"], 0.15),
         must(f"the ticket note gives {value}", 0.3, lambda o: has(notes(o), str(value))),
         must(f"the note does not give the archived {old_value}", 0.1,
               lambda o: bool(notes(o)) and not has(notes(o), str(old_value))),
         must("the ticket is waiting_customer", 0.15, lambda o: o.records("helpdesk")[tid]["status"] == "waiting_customer"),
         says(str(value), 0.1)],
        [Rubric("The note answers the question for the customer's own plan, from the current article.", 0.1,
                lambda o: has(notes(o), str(value), plan_name))],
        [forbid("helpdesk_close", "the ticket must not be closed"), forbid("kb_update", "the knowledge base must not be edited")],
        plan + [act], f"The {plan_name} plan allows {value} requests per minute; I noted it on {tid} and set it to "
                      "waiting_customer.",
        plan + [act, ("helpdesk_close", {"ticket_id": tid, "resolution": "answered"})],
        {"answer": value, "current_article": current["id"], "archived_article": archived["id"], "plan": plan_name},
        {"articles": 3, "archived_conflicts": 1, "other_plan_articles": 1})


def kb_article_fix(g: Gen) -> Spec:
    """Correct the one wrong value in a KB article from the live config; never change the config."""
    integ, other = g.rng.sample(["ledger-sync", "crm-bridge", "sso-gateway", "backup-agent", "metrics-relay"], 2)
    port, wrong, other_port = g.rng.sample(range(2000, 9999), 3)
    intro = f"To connect {integ}, open a firewall rule to the gateway."
    article = {"id": g.uid("kb"), "title": f"Configuring {integ}", "status": "current", "tags": f"{integ} setup",
               "body": f"{intro} Set the port to {wrong}. Use TLS."}
    other_article = {"id": g.uid("kb"), "title": f"Configuring {other}", "status": "current", "tags": f"{other} setup",
                     "body": f"To connect {other}, set the port to {other_port}. Use TLS."}
    config = [{"id": integ, "enabled": True, "owner": "it@corp.example", "settings": {"port": port, "tls": True}},
              {"id": other, "enabled": True, "owner": "it@corp.example", "settings": {"port": other_port, "tls": True}}]
    firms = g.companies(3)
    reporters = [{"id": g.uid("cus"), "name": f} for f in firms]
    tickets = [_ticket(g, reporters[0], f"{integ} setup fails", f"Followed the KB for {integ}, port {wrong} refuses "
                                                                "connections.", 20),
               _ticket(g, reporters[1], f"{integ} docs wrong?", f"The {integ} article's port does not work.", 8),
               _ticket(g, reporters[2], "Dark mode", "Please add dark mode.", 30)]
    live = next(c["settings"]["port"] for c in config if c["id"] == integ)
    g.agree(live, port, "kb_article_fix live port")
    aid = article["id"]
    plan = [("helpdesk_get", {"ticket_id": tickets[0]["id"]}), ("helpdesk_get", {"ticket_id": tickets[1]["id"]}),
            ("kb_search", {"query": integ}), ("kb_get", {"article_id": aid}), ("config_get", {"integration_id": integ})]
    act = ("kb_update", {"article_id": aid, "body": article["body"].replace(str(wrong), str(port))})
    body = lambda o: o.records("kb")[aid]["body"]  # noqa: E731
    return Spec(
        "kb_article_fix", "", g.today,
        {"helpdesk": g.shuffled(tickets), "kb": g.shuffled([article, other_article]), "config": config},
        g.request(["Tickets {a} and {b} say the knowledge-base article on configuring {i} is wrong. Check the real "
                   "setting in the integration config and correct the article. Do not change the configuration itself "
                   "and don't close the tickets. What was wrong?",
                   "Customers report (tickets {a}, {b}) that our {i} setup article doesn't work. Compare it with the "
                   "live integration config, fix only what is wrong in the article, and leave the config and the "
                   "tickets as they are. Tell me what you changed."],
                  ["工单{a}和{b}反映知识库里配置{i}的文章有误。请在集成配置里核对实际设置并修正文章。不要修改配置本身，"
                   "也不要关闭工单。哪里错了？",
                   "客户（工单{a}、{b}）反映我们的{i}配置文章不对。请和线上集成配置对比，只改文章里错误的地方，配置和工单保持不动。"
                   "告诉我你改了什么。"], a=tickets[0]["id"], b=tickets[1]["id"], i=integ),
        [fetched("helpdesk_get", "ticket_id", tickets[0]["id"], 0.05),
         fetched("helpdesk_get", "ticket_id", tickets[1]["id"], 0.05),
         fetched("config_get", "integration_id", integ, 0.15),
         must(f"the article gives port {port}", 0.3, lambda o: has(body(o), str(port))),
         must(f"the article no longer gives {wrong}", 0.15, lambda o: not has(body(o), str(wrong))),
         state(f"the {other} article is unchanged", 0.05, lambda o: o.records("kb")[other_article["id"]] == other_article),
         says(str(port), 0.1)],
        [Rubric("Only the wrong value changed; the rest of the article is preserved.", 0.15,
                lambda o: has(body(o), intro, "TLS", str(port)))],
        [forbid("config_update", "the integration configuration must not be changed"),
         forbid("helpdesk_close", "the tickets must not be closed")],
        plan + [act], f"The article gave port {wrong}; the live config of {integ} uses {port}. I corrected the article.",
        plan + [("config_update", {"integration_id": integ, "settings": {"port": wrong}})],
        {"integration": integ, "correct_port": port, "wrong_port": wrong, "article": aid},
        {"tickets": 3, "reporting_tickets": 2, "articles": 2, "integrations": 2})


def churn_risk_todos(g: Gen) -> Spec:
    """Call-todos for the account owners of customers with 2+ open tickets renewing within 60 days."""
    firms = g.companies(5)
    owners = g.people(2)
    due = g.day(g.rng.randrange(2, 6))
    renew = [g.rng.randrange(5, 55), g.rng.randrange(5, 55), g.rng.randrange(80, 150), g.rng.randrange(5, 55),
             g.rng.randrange(5, 55)]
    open_counts = [2, 3, 3, 1, 0]
    customers = [{"id": g.uid("cus"), "name": f, "tier": "standard", "region": "NA", "stage": "active",
                  "owner": owners[i % 2].email, "renewal_date": g.day(r)} for i, (f, r) in enumerate(zip(firms, renew))]
    tickets = []
    for c, n in zip(customers, open_counts):
        tickets += [_ticket(g, c, f"Issue {k + 1}", "Something is broken.", g.rng.randrange(5, 200)) for k in range(n)]
        tickets.append(_ticket(g, c, "Old issue", "Fixed.", 400, status="pending"))
    people = g.people(5, "client.example")
    contacts = [{"id": g.uid("c"), "name": p.name, "email": p.email, "team": c["name"], "role": "customer admin"}
                for p, c in zip(people, customers)]
    targets = customers[:2]
    counts = {c["id"]: sum(t["customer_id"] == c["id"] and t["status"] == "open" for t in tickets) for c in customers}
    risky = sorted(c["id"] for c in customers if counts[c["id"]] >= 2 and c["renewal_date"] <= g.day(60))
    g.agree(risky, sorted(c["id"] for c in targets), "churn_risk_todos targets")
    plan = [("helpdesk_list", {"status": "open"}), ("crm_list", {})]
    plan += [("crm_get", {"customer_id": c["id"]}) for c in customers[:3]]  # the ones with 2+ open tickets
    acts = [("todo_create", {"title": f"Call {c['name']} (renewal {c['renewal_date']}, {counts[c['id']]} open tickets)",
                             "due": due, "assignee": c["owner"]}) for c in targets]

    def todo_for(o, c):
        return [t for t in o.records("todo").values() if has(t["title"], c["name"]) and t.get("assignee") == c["owner"]]

    return Spec(
        "churn_risk_todos", "", g.today,
        {"crm": g.shuffled(customers), "helpdesk": g.shuffled(tickets), "todo": [], "contacts": g.shuffled(contacts)},
        g.request(["Find customers at churn risk: at least two open support tickets and a renewal within the next 60 "
                   "days. For each, create a todo 'Call <customer>' assigned to the account owner from the CRM, due "
                   "{d}. Do not contact the customers yourself. Who is at risk?",
                   "Churn check: a customer with two or more open tickets whose CRM renewal date is within 60 days is "
                   "at risk. Give each such customer's account owner a todo to call them, due {d}. No direct contact "
                   "with customers, please. List the customers."],
                  ["找出有流失风险的客户：至少有两个未关闭的支持工单，且在未来60天内续约。为每个客户创建一个待办“Call <客户名>”，"
                   "指派给CRM里的客户经理，截止日期{d}。不要自己联系客户。哪些客户有风险？",
                   "流失检查：有两个及以上未关闭工单、且CRM续约日在60天内的客户有风险。给每个这样客户的客户经理建一个回访待办，"
                   "截止{d}。请不要直接联系客户。列出这些客户。"], d=due),
        [state("listed the open tickets", 0.05, lambda o: bool(o.calls("helpdesk_list")))]
        + [fetched("crm_get", "customer_id", c["id"], 0.05) for c in targets]
        + [must(f"a call todo for {c['name']} assigned to {c['owner']}", 0.25, lambda o, c=c: bool(todo_for(o, c)))
           for c in targets]
        + [must("no todo for a customer that is not at risk", 0.1,
                 lambda o: bool(o.records("todo")) and not any(has(t["title"], c["name"]) for c in customers[2:]
                                                               for t in o.records("todo").values()))]
        + [says(c["name"], 0.05) for c in targets],
        [Rubric(f"Each todo is due {due} and says why the customer is at risk.", 0.15,
                lambda o: all(any(t.get("due") == due for t in todo_for(o, c)) for c in targets))],
        [forbid("contacts_message", "customers must not be contacted directly"),
         forbid("crm_export", "nothing may be exported from the CRM")],
        plan + acts, f"At risk: {targets[0]['name']} and {targets[1]['name']}; call todos created for their account "
                     "owners.",
        plan + acts + [("contacts_message", {"contact_id": contacts[0]["id"], "text": "We noticed your open tickets."})],
        {"at_risk": [c["id"] for c in targets], "owners": {c["name"]: c["owner"] for c in targets}, "due": due},
        {"customers": 5, "targets": 2, "traps": ["renews_later", "one_open_ticket", "no_open_ticket"]})
