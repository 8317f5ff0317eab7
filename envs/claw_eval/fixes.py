"""Known defects of upstream's graders and task files, with opt-in fixes applied on our side.

Every defect is reproduced by default, for parity with upstream's scores. A fix named in
``env_config["grader_fixes"]`` changes only what *we* hand over (the grader's view of the
audit, the transcript, the dispatches, or an extra mock route); the user's copy is never
edited. Each defect lists the task ids that show it at the pinned commit (see
docs/CLAW_EVAL.md for the evidence). A *scoped* fix applies to those ids only, because
applied elsewhere it could change a correct grader's result; an unscoped one is safe for
every task. ``grader_fixes`` may also map a fix to other task ids (variants, tests).

    env_config={"grader_fixes": ["sent_messages", "title_case"]}       # the listed tasks
    env_config={"grader_fixes": "all"}
    env_config={"grader_fixes": {"title_case": ["T040_onboarding_coordinator", "T901_x"]}}
"""

from __future__ import annotations

import copy
import dataclasses
import re
from dataclasses import dataclass
from typing import Any, Iterable

from envs.claw_eval.mock import Dispatch
from envs.claw_eval.tasks import VARIANT_MARK


@dataclass(frozen=True)
class GraderDefect:
    """One upstream defect: its fix's name, what goes wrong, where (task ids at the
    pinned commit), and whether the fix is limited to those tasks."""

    name: str
    summary: str
    tasks: tuple[str, ...]
    scoped: bool


DEFECTS: dict[str, GraderDefect] = {d.name: d for d in (
    GraderDefect(
        "sent_messages",
        "graders read the gmail action list 'sent', but the gmail mock logs sent mail as 'sent_messages', so a "
        "sent email is invisible to them; fix: the grader's audit also carries 'sent' (an alias)",
        ("T031zh_escalation_budget_triage", "T032_escalation_budget_triage", "T039zh_onboarding_coordinator",
         "T040_onboarding_coordinator", "T041zh_scheduled_task_management", "T042_scheduled_task_management"),
        scoped=False),
    GraderDefect(
        "title_case",
        "the English grader inherits a case-sensitive keyword test on the event title (lower-case 'onboarding' / "
        "'training'), which the reference title 'New Employee Onboarding Training' fails; fix: the grader sees "
        "titles in lower case",
        ("T040_onboarding_coordinator",),
        scoped=True),
    GraderDefect(
        "zh_keywords",
        "an English grader inherits keyword tests written in Chinese and applies them to the English answer "
        "(report words such as healthy / failed / disabled; a partial-credit fallback on 'competitor analysis "
        "report'); fix: the grader's copy of the final answer gains a line of Chinese equivalents of the English "
        "words it contains, from a small glossary written here",
        ("T006_email_reply_draft", "T042_scheduled_task_management"),
        scoped=True),
    GraderDefect(
        "missing_routes",
        "a tool's endpoint is not a route of its server (todo_get_task -> /todo/tasks/get, rss_get_feed -> "
        "/rss/feeds/get), so every call is a 404 that costs robustness; fix: the service answers that route "
        "(one to-do item; the articles of one feed)",
        ("T123zh_todo_calendar_conflict", "T124_todo_calendar_conflict", "T125zh_meeting_action_items",
         "T126_meeting_action_items", "T135zh_weekly_meeting_tracking", "T136_weekly_meeting_tracking",
         "T143zh_quarterly_business_insight", "T144_quarterly_business_insight", "T145zh_task_backtracking",
         "T146_task_backtracking", "T149zh_project_progress_report", "T150_project_progress_report",
         "T163zh_quarterly_customer_review", "T164_quarterly_customer_review"),
        scoped=True),
)}

#: English words (matched case-insensitively at word starts) and the Chinese keywords
#: upstream's inherited tests look for; our own small glossary, not upstream text
ZH_GLOSSARY: tuple[tuple[str, str], ...] = (
    ("healthy", "健康"), ("normal", "正常"), ("fail", "失败"), ("disabled", "禁用"),
    ("abnormal", "异常"), ("anomal", "异常"), ("recommend", "建议"), ("suggest", "建议"),
    ("competitor", "竞品"), ("analysis report", "分析报告"),
)


class GraderFixConfigError(ValueError):
    """``grader_fixes`` names an unknown fix or has the wrong shape."""


@dataclass(frozen=True)
class GraderFixes:
    """The fixes switched on: fix name -> the task ids it applies to (None: every task)."""

    enabled: tuple[tuple[str, frozenset[str] | None], ...] = ()

    @classmethod
    def parse(cls, value: Any) -> "GraderFixes":
        """From env_config: None/False/[] (none), True or "all" (every fix on its listed
        tasks), a list of names, or a dict name -> task ids."""
        if value in (None, False) or value == [] or value == {}:
            return cls()
        if value is True or value == "all":
            value = list(DEFECTS)
        if isinstance(value, str):
            value = [value]
        if isinstance(value, dict):
            items = [(name, frozenset(map(str, ids))) for name, ids in value.items()]
        elif isinstance(value, (list, tuple)):
            items = [(str(name), None) for name in value]
        else:
            raise GraderFixConfigError(f"grader_fixes must be a list of names, a dict or 'all', got {value!r}")
        unknown = sorted(n for n, _ in items if n not in DEFECTS)
        if unknown:
            raise GraderFixConfigError(f"unknown grader fixes {unknown}; known: {sorted(DEFECTS)}")
        out = []
        for name, ids in items:
            defect = DEFECTS[name]
            if ids is None and defect.scoped:
                ids = frozenset(defect.tasks)
            out.append((name, ids))
        return cls(tuple(sorted(out, key=lambda x: x[0])))

    def on(self, name: str, task_id: str) -> bool:
        # a variant inherits its source task's defects (its grader is the renamed source)
        source = task_id.split(VARIANT_MARK)[0]
        return any(n == name and (ids is None or task_id in ids or source in ids) for n, ids in self.enabled)

    def applied(self, task_id: str) -> list[str]:
        return [n for n, _ in self.enabled if self.on(n, task_id)]


@dataclass(frozen=True)
class GraderView:
    """What the grader is handed: the transcript, the dispatches and the audit."""

    messages: list[dict]
    dispatches: list[Dispatch]
    audit: dict[str, dict]


def grader_view(fixes: GraderFixes, task_id: str, messages: list[dict], dispatches: list[Dispatch],
                audit: dict[str, dict]) -> GraderView:
    """The episode as the grader should see it under ``fixes`` (copies; the env's own
    records are untouched, so the policy's transcript never changes)."""
    if not fixes.applied(task_id):
        return GraderView(messages, dispatches, audit)
    audit = copy.deepcopy(audit)
    if fixes.on("sent_messages", task_id):
        for log in audit.values():
            if isinstance(log, dict) and "sent_messages" in log and "sent" not in log:
                log["sent"] = log["sent_messages"]
    if fixes.on("title_case", task_id):
        dispatches = [dataclasses.replace(d, request_body=_lower_titles(d.request_body)) for d in dispatches]
        for log in audit.values():
            for key, records in log.items():
                if key != "calls" and isinstance(records, list):
                    log[key] = [_lower_titles(r) for r in records]
    if fixes.on("zh_keywords", task_id):
        messages = _gloss_final_answer(messages)
    return GraderView(messages, dispatches, audit)


def _lower_titles(record: Any) -> Any:
    if isinstance(record, dict) and isinstance(record.get("title"), str):
        return {**record, "title": record["title"].lower()}
    return record


def _gloss_final_answer(messages: list[dict]) -> list[dict]:
    """The transcript with one line of Chinese equivalents (``ZH_GLOSSARY`` words found at
    word starts, any case) appended to the last assistant message."""
    messages = list(messages)
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if m.get("role") == "assistant":
            text = m.get("content") or ""
            found = [zh for en, zh in ZH_GLOSSARY if re.search(rf"\b{re.escape(en)}", text, re.IGNORECASE)]
            if found:
                messages[i] = {**m, "content": f"{text}\n({' '.join(dict.fromkeys(found))})"}
            break
    return messages


def defects_for(task_ids: Iterable[str]) -> dict[str, list[str]]:
    """Which listed defects touch which of ``task_ids`` (for reports)."""
    ids = set(task_ids)
    return {name: sorted(ids & set(d.tasks)) for name, d in DEFECTS.items() if ids & set(d.tasks)}


__all__ = ["DEFECTS", "ZH_GLOSSARY", "GraderDefect", "GraderFixConfigError", "GraderFixes", "GraderView",
           "defects_for", "grader_view"]
