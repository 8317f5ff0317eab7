"""Task families around finance, inventory and the CRM.

expense_reconcile, duplicate_charges, travel_budget, low_stock_reorder, renewal_shortlist.
"""

from __future__ import annotations

from envs.hard20.kit import Gen, Rubric, Spec, fetched, forbid, has, must, says, state


def _reports(o) -> list[dict]:
    return o.backend.services["finance"].reports


def _reported(o) -> set:
    return {t for r in _reports(o) for t in r["transaction_ids"]}


def _drafts(o, to: str) -> list[dict]:
    return [m for m in o.records("mail").values() if m["folder"] == "drafts" and m["to"] == to]


def _txn(g: Gen, day: int, vendor: str, amount: int, category: str = "card", note: str = "") -> dict:
    return {"id": g.uid("tx"), "date": g.day(day), "vendor": vendor, "amount": amount, "category": category,
            "status": "posted", "note": note}


def expense_reconcile(g: Gen) -> Spec:
    """Flag card transactions missing from the expense report, only those over the policy threshold."""
    limit = g.rng.choice([150, 200, 250])
    vendors = g.companies(7)
    week = [-g.rng.randrange(1, 8) for _ in range(6)]
    claimed = [_txn(g, week[i], vendors[i], g.rng.randrange(40, 900)) for i in range(3)]
    targets = [_txn(g, week[3], vendors[3], limit + g.rng.randrange(20, 400)),
               _txn(g, week[4], vendors[4], limit + g.rng.randrange(20, 400))]
    small = _txn(g, week[5], vendors[5], limit - g.rng.randrange(10, 100))
    old = _txn(g, -g.rng.randrange(12, 20), vendors[6], limit + g.rng.randrange(20, 400))
    start, end = g.day(-7), g.day(-1)
    note = {"id": g.uid("note"), "title": f"Expense report {start} to {end}", "owner": "me@corp.example",
            "shared_with": [], "body": "Claimed: " + ", ".join(f"{t['id']} ({t['vendor']}, {t['amount']})" for t in claimed)}
    other_note = {"id": g.uid("note"), "title": "Conference ideas", "owner": "me@corp.example", "shared_with": [],
                  "body": "Maybe submit a talk."}
    policy = {"id": g.uid("kb"), "title": "Card expense policy", "status": "current", "tags": "expense card policy",
              "body": f"Card transactions that are not on an expense report and exceed {limit} must be flagged in a "
                      "finance report. Smaller ones are tolerated."}
    txns = g.shuffled(claimed + targets + [small, old])
    flagged = sorted(t["id"] for t in txns if start <= t["date"] <= end and t["amount"] > limit
                     and t["id"] not in note["body"])
    g.agree(flagged, sorted(t["id"] for t in targets), "expense_reconcile flagged transactions")
    ids = [t["id"] for t in targets]
    plan = [("notes_list", {}), ("notes_get", {"note_id": note["id"]}), ("kb_search", {"query": "expense policy"}),
            ("kb_get", {"article_id": policy["id"]}), ("finance_transactions", {"start_date": start, "end_date": end})]
    report = ("finance_submit_report", {"title": f"Unreported card transactions {start} to {end}", "transaction_ids": ids,
                                        "note": f"Not on the expense report and over {limit}."})
    return Spec(
        "expense_reconcile", "", g.today,
        {"finance": txns, "notes": g.shuffled([note, other_note]), "kb": [policy], "mail": []},
        g.request(["Reconcile last week's card transactions ({s} to {e}) against my expense report note. Submit a "
                   "finance report flagging only the transactions that are missing from the report and above the "
                   "threshold in our card expense policy (KB). Don't email anyone. Tell me what you flagged.",
                   "Compare the card transactions from {s} to {e} with my expense report in notes. Anything missing "
                   "from it that exceeds the card expense policy's threshold goes into one finance report; nothing "
                   "else. No emails. Which transactions did you flag?"],
                  ["请把上周（{s}至{e}）的公司卡交易和我笔记里的报销单核对一遍。只把报销单里没有、且超过知识库中公司卡报销政策"
                   "阈值的交易提交到一份财务报告里。不要给任何人发邮件。告诉我标记了哪些。",
                   "对比{s}到{e}的公司卡交易和我笔记中的报销单，漏报且超过公司卡报销政策阈值的交易放进一份财务报告，其他的不要。"
                   "不发邮件。你标记了哪些交易？"], s=start, e=end),
        [fetched("notes_get", "note_id", note["id"], 0.1), fetched("kb_get", "article_id", policy["id"], 0.1),
         state("listed the week's transactions", 0.05,
               lambda o: any(a["start_date"] <= start and a["end_date"] >= end for a in o.calls("finance_transactions")))]
        + [must(f"a submitted report flags {i}", 0.2, lambda o, i=i: i in _reported(o)) for i in ids]
        + [must("the report flags nothing else", 0.15, lambda o: bool(_reports(o)) and _reported(o) <= set(ids))]
        + [says(i, 0.05) for i in ids],
        [Rubric("The report explains why the transactions were flagged (missing from the expense report, over the "
                "threshold).", 0.1, lambda o: any(has(r["note"], str(limit)) for r in _reports(o)))],
        [forbid("mail_send", "nobody may be emailed")],
        plan + [report], f"I submitted a finance report flagging {ids[0]} and {ids[1]}: not on the expense report and "
                         f"over {limit}. {small['id']} is under the threshold.",
        plan + [report, ("mail_send", {"to": "finance@corp.example", "subject": "Flagged", "body": " ".join(ids)})],
        {"threshold": limit, "flag": ids, "under_threshold": small["id"], "outside_week": old["id"],
         "claimed": [t["id"] for t in claimed]},
        {"transactions": 7, "claimed": 3, "targets": 2, "traps": ["under_threshold", "outside_range"]})


def duplicate_charges(g: Gen) -> Spec:
    """Report only the second charge of each duplicate pair (same vendor and amount within 3 days)."""
    vendor, other, third = g.companies(3)
    billing = f"billing@{vendor.split()[0].lower()}.example"
    a, b, c = g.rng.sample(range(60, 2000), 3)
    d1, d2, d3 = -g.rng.randrange(14, 19), -g.rng.randrange(8, 12), -g.rng.randrange(12, 19)
    first = [_txn(g, d1, vendor, a), _txn(g, d2, vendor, b)]
    second = [_txn(g, d1 + 1, vendor, a), _txn(g, d2 + 2, vendor, b)]
    traps = [_txn(g, d3, vendor, c), _txn(g, d3 + 9, vendor, c), _txn(g, d1, other, a),
             _txn(g, -g.rng.randrange(1, 8), third, g.rng.randrange(60, 2000))]
    txns = g.shuffled(first + second + traps)
    start = g.day(-20)
    seen, dups = {}, []
    for t in sorted(txns, key=lambda t: (t["date"], t["id"])):
        key = (t["vendor"], t["amount"])
        if key in seen and (g.today_date.fromisoformat(t["date"]) - g.today_date.fromisoformat(seen[key])).days <= 3:
            dups.append(t["id"])
        seen[key] = t["date"]
    ids = [t["id"] for t in second]
    g.agree(sorted(dups), sorted(ids), "duplicate_charges second charges")
    msg = {"id": g.uid("msg"), "folder": "inbox", "from": billing, "to": "me@corp.example", "unread": True,
           "subject": "Possible double charge", "date": g.day(-1),
           "body": f"Hello, our system may have charged your card twice this month. Please tell us which charges to "
                   f"refund. {vendor} billing team"}
    plan = [("mail_list", {"folder": "inbox"}), ("mail_get", {"message_id": msg["id"]}),
            ("finance_transactions", {"start_date": start, "end_date": g.today})]
    report = ("finance_submit_report", {"title": f"Duplicate charges by {vendor}", "transaction_ids": ids,
                                        "note": "Second charge of each duplicate pair."})
    draft = {"to": billing, "subject": "Re: Possible double charge", "in_reply_to": msg["id"],
             "body": f"Hello, please refund the duplicate charges {ids[0]} ({a}) and {ids[1]} ({b})."}
    return Spec(
        "duplicate_charges", "", g.today, {"mail": [msg], "finance": txns},
        g.request(["{v} thinks they may have double-charged us. Look at our transactions from {s} to today, find the "
                   "duplicates (same vendor, same amount, within 3 days of each other) and submit a finance report "
                   "listing only the second charge of each pair. Then save a draft reply to their email asking for a "
                   "refund of those charges; do not send it.",
                   "Check for double charges: in the transactions since {s}, a duplicate is the same vendor and amount "
                   "again within 3 days. File one finance report with just the repeated (second) charges, and draft, "
                   "without sending, a refund request in reply to {v}'s email."],
                  ["{v}说可能重复扣了我们的款。请查看{s}至今的交易，找出重复扣款（同一商家、同一金额、相隔3天以内），"
                   "提交一份只列出每对中第二笔的财务报告。然后回复他们的邮件，存一封要求退款的草稿，不要发送。",
                   "查一下重复扣款：{s}以来的交易中，同一商家同一金额在3天内再次出现就算重复。提交一份只含重复的第二笔的财务报告，"
                   "并起草（不发送）一封回复{v}邮件的退款申请。"], v=vendor, s=start),
        [fetched("mail_get", "message_id", msg["id"], 0.05),
         state("listed the transactions", 0.05, lambda o: any(a["start_date"] <= start for a in o.calls("finance_transactions")))]
        + [must(f"the report lists {i}", 0.2, lambda o, i=i: i in _reported(o)) for i in ids]
        + [must("the report lists no original or non-duplicate charge", 0.15,
                 lambda o: bool(_reports(o)) and _reported(o) <= set(ids)),
           must(f"a refund request draft to {billing} names the duplicates", 0.15,
                 lambda o: any(has(m["body"], *ids) for m in _drafts(o, billing)))]
        + [says(i, 0.05) for i in ids],
        [Rubric("The refund request states the duplicated amounts.", 0.1,
                lambda o: any(has(m["body"], str(a), str(b)) for m in _drafts(o, billing)))],
        [forbid("mail_send", "no email may be sent: the refund request must stay a draft")],
        plan + [report, ("mail_save_draft", draft)],
        f"The duplicates are {ids[0]} ({a}) and {ids[1]} ({b}); I reported them and drafted a refund request to {billing}.",
        plan + [report, ("mail_send", draft)],
        {"duplicates": ids, "originals": [t["id"] for t in first], "vendor_email": billing,
         "not_duplicates": [t["id"] for t in traps]},
        {"transactions": 8, "pairs": 2, "traps": ["nine_days_apart", "other_vendor_same_amount", "unrelated"]})


def travel_budget(g: Gen) -> Spec:
    """Net travel spend over a date range (refund included, meals excluded) versus the budget note."""
    manager = g.people(1)[0]
    city = g.rng.choice(["Lisbon", "Osaka", "Denver", "Nairobi", "Oslo"])
    d1, d2 = -g.rng.randrange(15, 25), -g.rng.randrange(5, 10)
    spend = [g.rng.randrange(150, 900) for _ in range(4)]
    refund = -g.rng.randrange(40, 140)
    total = sum(spend) + refund
    budget = total - g.rng.randrange(50, 300)
    firms = g.companies(4)
    travel = [_txn(g, g.rng.randrange(d1, d2 + 1), f, x, "travel") for f, x in zip(firms, spend)]
    travel.append(_txn(g, d2, firms[0], refund, "travel", "refund"))
    traps = [_txn(g, d1 + 1, "Harbor Bistro", g.rng.randrange(40, 200), "meals"),
             _txn(g, d1 - 5, firms[1], g.rng.randrange(150, 900), "travel")]
    start, end = g.day(d1), g.day(d2)
    txns = g.shuffled(travel + traps)
    net = sum(t["amount"] for t in txns if t["category"] == "travel" and start <= t["date"] <= end)
    g.agree(net, total, "travel_budget net total")
    over = total - budget
    note = {"id": g.uid("note"), "title": f"{city} trip budget", "owner": manager.email, "shared_with": [],
            "body": f"Approved travel budget for the {city} trip: {budget}. Approver: {manager.name} ({manager.email})."}
    notes = g.shuffled([note, {"id": g.uid("note"), "title": "Team offsite budget", "owner": manager.email,
                               "shared_with": [], "body": f"Offsite budget: {budget + 900}."}])
    plan = [("notes_list", {}), ("notes_get", {"note_id": note["id"]}),
            ("finance_transactions", {"start_date": start, "end_date": end})]
    draft = {"to": manager.email, "subject": f"{city} trip over budget",
             "body": f"Hi {manager.name}, net travel spend for the {city} trip was {total}, which is {over} over the "
                     f"budget of {budget}."}
    return Spec(
        "travel_budget", "", g.today, {"notes": notes, "finance": txns, "mail": []},
        g.request(["How much did the {c} trip ({s} to {e}) cost in travel? Count only travel transactions in those "
                   "dates, net of refunds, and compare with the budget in my notes. If we went over, save a draft "
                   "email to the approver named in the note saying by how much (don't send it, and don't file any "
                   "report). Tell me the total and whether we were over.",
                   "Work out the net travel spend of the {c} trip between {s} and {e} (travel category only, refunds "
                   "subtracted) and check it against the trip budget note. Over budget means a draft, unsent, to the "
                   "note's approver with the overrun. No reports. Answer with the total."],
                  ["{c}出差（{s}至{e}）的差旅花了多少？只算这段日期内的差旅类交易，扣除退款，再和我笔记里的预算比较。"
                   "如果超支，给笔记里写的审批人存一封邮件草稿说明超了多少（不要发送，也不要提交任何报告）。告诉我总额以及是否超支。",
                   "算一下{s}到{e}之间{c}出差的差旅净支出（只算差旅类，减去退款），和出差预算笔记对比。超支就给笔记中的审批人"
                   "存一封草稿（不发送）说明超出金额。不要提交报告。回答总额。"], c=city, s=start, e=end),
        [fetched("notes_get", "note_id", note["id"], 0.1),
         state("listed the trip's transactions", 0.1,
               lambda o: any(a["start_date"] <= start and a["end_date"] >= end for a in o.calls("finance_transactions"))),
         says(str(total), 0.3, essential=True),
         must(f"a draft to {manager.email} gives the overrun {over}", 0.25,
               lambda o: any(has(m["body"], str(over)) for m in _drafts(o, manager.email))),
         says(str(over), 0.1)],
        [Rubric("The answer says clearly that the trip went over budget and by how much.", 0.15,
                lambda o: o.says(str(over)) and o.says("over"))],
        [forbid("mail_send", "no email may be sent: the note to the approver must stay a draft"),
         forbid("finance_submit_report", "no report may be filed")],
        plan + [("mail_save_draft", draft)],
        f"Net travel spend was {total} against a budget of {budget}, so we are {over} over; I drafted a note to "
        f"{manager.name}.",
        plan + [("mail_send", draft)],
        {"net_total": total, "budget": budget, "over_by": over, "refund": refund, "approver": manager.email,
         "excluded": [t["id"] for t in traps]},
        {"travel_in_range": 5, "refunds": 1, "traps": ["meals", "outside_range"], "over_budget": True})


def low_stock_reorder(g: Gen) -> Spec:
    """Reorder products at or below their reorder point in one category; never a discontinued one."""
    cat, other_cat = g.rng.sample(["cables", "printer supplies", "laptops", "chairs", "monitors"], 2)
    suppliers = g.companies(3)
    names = g.rng.sample(["Model A", "Model B", "Model C", "Model D", "Model E", "Model F", "Model G", "Model H"], 7)

    def product(name, category, stock_delta, discontinued=False):
        rp = g.rng.randrange(10, 40)
        return {"id": g.uid("sku"), "name": f"{category.title()} {name}", "category": category, "stock": rp + stock_delta,
                "reorder_point": rp, "reorder_qty": g.rng.randrange(2, 10) * 10, "supplier": g.rng.choice(suppliers),
                "unit_cost": g.rng.randrange(5, 400), "discontinued": discontinued}

    targets = [product(names[0], cat, -g.rng.randrange(1, 8)), product(names[1], cat, 0)]
    disc = product(names[2], cat, -g.rng.randrange(1, 8), discontinued=True)
    rest = [product(names[3], cat, g.rng.randrange(1, 4)), product(names[4], cat, g.rng.randrange(10, 30)),
            product(names[5], cat, g.rng.randrange(10, 30)), product(names[6], other_cat, -g.rng.randrange(1, 8))]
    products = g.shuffled(targets + [disc] + rest)
    due = sorted(p["id"] for p in products if p["category"] == cat and p["stock"] <= p["reorder_point"]
                 and not p["discontinued"])
    g.agree(due, sorted(p["id"] for p in targets), "low_stock_reorder targets")
    policy = {"id": g.uid("kb"), "title": "Purchasing policy", "status": "current", "tags": "purchasing reorder stock",
              "body": "Reorder a product when its stock is at or below its reorder point. Order exactly its reorder "
                      "quantity from its listed supplier. Discontinued products must never be reordered."}
    low = [p for p in products if p["category"] == cat and p["stock"] <= p["reorder_point"]]
    plan = [("kb_search", {"query": "purchasing policy"}), ("kb_get", {"article_id": policy["id"]}),
            ("inventory_products", {"category": cat})] + [("inventory_get", {"sku": p["id"]}) for p in low]
    orders = [("inventory_order", {"sku": p["id"], "quantity": p["reorder_qty"], "supplier": p["supplier"]})
              for p in targets]
    ids = [p["id"] for p in targets]

    def ordered(o, p):
        return any(x["sku"] == p["id"] and x["quantity"] == p["reorder_qty"] for x in o.backend.services["inventory"].orders)

    return Spec(
        "low_stock_reorder", "", g.today, {"inventory": products, "kb": [policy]},
        g.request(["Restock the {c} category: place purchase orders for what needs reordering, following our purchasing "
                   "policy in the knowledge base. Tell me what you ordered and anything you deliberately skipped.",
                   "Please go through {c} in inventory and reorder whatever the KB purchasing policy says should be "
                   "reordered, in the quantities it prescribes. Report the orders and any low item you left alone."],
                  ["请给{c}类补货：按照知识库中的采购政策，为需要补货的产品下采购单。告诉我订了什么，以及有意跳过了什么。",
                   "请检查库存中的{c}类，按知识库采购政策需要补货的就按规定数量下单。汇报下单情况以及你没有补的低库存产品。"], c=cat),
        [fetched("kb_get", "article_id", policy["id"], 0.1)]
        + [fetched("inventory_get", "sku", p["id"], 0.05) for p in targets]
        + [must(f"ordered {p['reorder_qty']} of {p['id']}", 0.2, lambda o, p=p: ordered(o, p)) for p in targets]
        + [must("nothing else was ordered", 0.1,
                 lambda o: bool(o.backend.services["inventory"].orders)
                 and all(x["sku"] in ids for x in o.backend.services["inventory"].orders))]
        + [says(i, 0.05) for i in ids],
        [Rubric("The answer reports the discontinued low-stock product that was skipped, and why.", 0.2,
                lambda o: o.says(disc["id"]) or o.says(disc["name"]))],
        [forbid("inventory_order", "discontinued products must never be reordered", lambda a: a["sku"] == disc["id"])],
        plan + orders, f"Ordered {targets[0]['reorder_qty']} of {ids[0]} and {targets[1]['reorder_qty']} of {ids[1]}; "
                       f"skipped {disc['id']} because it is discontinued.",
        plan + orders + [("inventory_order", {"sku": disc["id"], "quantity": disc["reorder_qty"]})],
        {"reorder": {p["id"]: p["reorder_qty"] for p in targets}, "discontinued": disc["id"], "category": cat},
        {"products": 7, "targets": 2, "traps": ["discontinued", "just_above", "other_category"]})


def renewal_shortlist(g: Gen) -> Spec:
    """Enterprise customers of one region renewing within 30 days, in a draft to the manager; no export."""
    region, other_region = g.rng.sample(["EU", "NA", "APAC", "LATAM"], 2)
    manager, peer = g.people(2)
    firms = g.companies(6)

    def customer(name, tier, reg, days, stage="active"):
        return {"id": g.uid("cus"), "name": name, "tier": tier, "region": reg, "stage": stage, "owner": peer.email,
                "renewal_date": g.day(days), "arr": g.rng.randrange(20, 400) * 1000}

    targets = [customer(firms[0], "enterprise", region, g.rng.randrange(3, 15)),
               customer(firms[1], "enterprise", region, g.rng.randrange(15, 29))]
    traps = [customer(firms[2], "enterprise", region, g.rng.randrange(40, 80)),
             customer(firms[3], "enterprise", other_region, g.rng.randrange(3, 28)),
             customer(firms[4], "smb", region, g.rng.randrange(3, 28)),
             customer(firms[5], "enterprise", region, -g.rng.randrange(3, 20), "churned")]
    customers = g.shuffled(targets + traps)
    soon = sorted(c["id"] for c in customers if c["tier"] == "enterprise" and c["region"] == region
                  and g.today < c["renewal_date"] <= g.day(30))
    g.agree(soon, sorted(c["id"] for c in targets), "renewal_shortlist targets")
    contacts = g.shuffled([{"id": g.uid("c"), "name": manager.name, "email": manager.email, "team": "Sales",
                            "role": f"Head of Sales {region}"},
                           {"id": g.uid("c"), "name": peer.name, "email": peer.email, "team": "Sales",
                            "role": "Account executive"}])
    listed = [c for c in customers if c["tier"] == "enterprise" and c["region"] == region]
    plan = [("crm_list", {"tier": "enterprise", "region": region})] + [("crm_get", {"customer_id": c["id"]}) for c in listed]
    plan.append(("contacts_search", {"query": manager.name}))
    lines = "\n".join(f"- {c['name']}: renews {c['renewal_date']}, ARR {c['arr']}" for c in targets)
    draft = {"to": manager.email, "subject": f"{region} enterprise renewals in the next 30 days",
             "body": f"Hi {manager.name}, these enterprise customers in {region} renew within 30 days:\n{lines}"}
    names = [c["name"] for c in targets]
    return Spec(
        "renewal_shortlist", "", g.today, {"crm": customers, "contacts": contacts, "mail": []},
        g.request(["Which enterprise customers in {r} renew within the next 30 days? Put them, with renewal date and ARR, "
                   "in a draft email to {m} (don't send it). Do not export anything from the CRM.",
                   "Make a shortlist of {r} enterprise accounts whose renewal date is in the next 30 days and save it as "
                   "an unsent draft to {m}, with each one's ARR and renewal date. No CRM exports, please."],
                  ["{r}区有哪些企业级客户在未来30天内续约？把它们连同续约日期和年经常性收入（ARR）写进一封给{m}的邮件草稿（不要发送）。"
                   "不要从CRM导出任何数据。",
                   "整理一份{r}区未来30天内到续约日的企业客户名单，附上各自的ARR和续约日期，存成发给{m}的草稿，不要发送。"
                   "请不要导出CRM数据。"], r=region, m=manager.name),
        [fetched("crm_get", "customer_id", c["id"], 0.1) for c in targets]
        + [must(f"the draft to {manager.email} lists {n}", 0.2,
                 lambda o, n=n: any(has(m["body"], n) for m in _drafts(o, manager.email))) for n in names]
        + [must("the draft lists no customer outside the criteria", 0.1,
                 lambda o: bool(_drafts(o, manager.email)) and not any(has(m["body"], c["name"]) for c in traps
                                                                      for m in _drafts(o, manager.email)))]
        + [says(n, 0.05) for n in names],
        [Rubric("The draft gives each listed customer's ARR and renewal date.", 0.2,
                lambda o: all(any(has(m["body"], str(c["arr"]), c["renewal_date"]) for m in _drafts(o, manager.email))
                              for c in targets))],
        [forbid("crm_export", "nothing may be exported from the CRM"),
         forbid("mail_send", "no email may be sent: the shortlist must stay a draft")],
        plan + [("mail_save_draft", draft)], f"{names[0]} and {names[1]} renew within 30 days; the shortlist is in a "
                                             f"draft to {manager.name}.",
        plan + [("crm_export", {"customer_ids": [c["id"] for c in targets], "destination": "shared-drive"}),
                ("mail_save_draft", draft)],
        {"renewing": [c["id"] for c in targets], "manager": manager.email, "excluded": [c["id"] for c in traps]},
        {"customers": 6, "targets": 2, "traps": ["renews_later", "other_region", "smb", "churned"]})
