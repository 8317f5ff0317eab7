"""The Hard20 suite: twenty families, the held-out task and eight training variants of each.

Task ids: ``hard20-<family>`` is the held-out original (split "test", 20 tasks);
``hard20-<family>-v1`` .. ``-v8`` are its structure-preserving training variants (split
"train", 160 tasks). A task is a pure function of (family, variant): the generator is
seeded with both, so every process builds the same suite.
"""

from __future__ import annotations

import functools
import re

from envs.hard20 import families_comms as comms
from envs.hard20 import families_finance as finance
from envs.hard20 import families_ops as ops
from envs.hard20 import families_support as support
from envs.hard20.kit import Gen, Spec

FAMILIES = {f.__name__: f for f in (
    comms.inbox_triage, comms.meeting_reschedule, comms.oncall_handover, comms.slot_booking, comms.invoice_followup,
    finance.expense_reconcile, finance.duplicate_charges, finance.travel_budget, finance.low_stock_reorder,
    finance.renewal_shortlist,
    support.vip_sla_escalation, support.refund_eligibility, support.ticket_kb_answer, support.kb_article_fix,
    support.churn_risk_todos,
    ops.failed_job_rerun, ops.token_rotation, ops.access_review, ops.maintenance_pause, ops.retro_action_items)}
# One line per family (its generator's docstring), for reports and the README.
SUMMARIES = {name: (fn.__doc__ or "").strip().splitlines()[0] for name, fn in FAMILIES.items()}
NUM_VARIANTS = 8
SPLITS = ("train", "test")
_ID = re.compile(r"^hard20-([a-z_]+?)(?:-v(\d+))?$")


def check_families(families) -> list[str]:
    """The requested families in suite order; unknown names are an error listing the valid ones."""
    if families is None:
        return list(FAMILIES)
    if isinstance(families, str):
        families = [families]
    unknown = [f for f in families if f not in FAMILIES]
    if unknown:
        raise ValueError(f"unknown Hard20 families {unknown}; valid families: {list(FAMILIES)}")
    return [f for f in FAMILIES if f in set(families)]


def task_id(family: str, variant: int) -> str:
    return f"hard20-{family}" if variant == 0 else f"hard20-{family}-v{variant}"


def split_ids(split: str, families=None) -> list[str]:
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r} for Hard20; valid splits: {list(SPLITS)}")
    chosen = check_families(families)
    if split == "test":
        return [task_id(f, 0) for f in chosen]
    return [task_id(f, v) for f in chosen for v in range(1, NUM_VARIANTS + 1)]


def parse_task_id(tid: str) -> tuple[str, int]:
    m = _ID.match(tid)
    if not m or m.group(1) not in FAMILIES or int(m.group(2) or 0) > NUM_VARIANTS:
        raise ValueError(f"not a Hard20 task id: {tid!r} (expected hard20-<family> or hard20-<family>-v1..v{NUM_VARIANTS})")
    return m.group(1), int(m.group(2) or 0)


@functools.lru_cache(maxsize=None)
def build_spec(family: str, variant: int) -> Spec:
    """The task (fixtures, request, grading, scripts) of one family and variant. Cached:
    callers must not mutate it (services copy the fixtures they are built from)."""
    check_families([family])
    if not 0 <= variant <= NUM_VARIANTS:
        raise ValueError(f"variant must be 0 (held-out) .. {NUM_VARIANTS}, got {variant}")
    spec = FAMILIES[family](Gen(family, variant))
    spec.task_id = task_id(family, variant)
    return spec


def spec_for(tid: str) -> Spec:
    return build_spec(*parse_task_id(tid))
