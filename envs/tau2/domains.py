"""Assembling a fresh τ² environment for a domain: databases, toolkits, sync and policy.

Each database is parsed and normalised once per process; every environment then gets its
own copy by unmarshalling the canonical form (an in-process ``marshal`` snapshot: about
twice as fast as ``json.loads`` and many times faster than ``copy.deepcopy`` on the 7 MB
airline DB, and it keeps ints and floats apart exactly as the fingerprint needs).
"""

from __future__ import annotations

import functools
import marshal

from envs.tau2 import airline, retail, telecom_crm, telecom_phone, telecom_user
from envs.tau2.data import Tau2Data
from envs.tau2.environment import Tau2Environment

DOMAINS = ("airline", "retail", "telecom")


@functools.lru_cache(maxsize=8)
def _canonical_db(root: str, domain: str, side: str) -> bytes:
    data = Tau2Data(root)
    if domain == "airline":
        db = airline.normalise_db(data.json("domains/airline/db.json"))
    elif domain == "retail":
        db = retail.normalise_db(data.json("domains/retail/db.json"))
    elif side == "agent":
        db = telecom_crm.normalise_db(data.toml("domains/telecom/db.toml"))
    else:
        db = telecom_phone.normalise_db(data.toml("domains/telecom/user_db.toml"))
    return marshal.dumps(db)


def fresh_db(data: Tau2Data, domain: str, side: str = "agent") -> dict:
    return marshal.loads(_canonical_db(str(data.root), domain, side))


def build_environment(data: Tau2Data, domain: str, solo: bool = False) -> Tau2Environment:
    """A fresh, uninitialised environment (databases as loaded from the domain files)."""
    if domain == "airline":
        return Tau2Environment(domain, airline.AirlineTools(fresh_db(data, domain)), solo=solo)
    if domain == "retail":
        return Tau2Environment(domain, retail.RetailTools(fresh_db(data, domain)), solo=solo)
    if domain == "telecom":
        return Tau2Environment(domain, telecom_crm.TelecomAgentTools(fresh_db(data, domain, "agent")),
                               telecom_user.PhoneTools(fresh_db(data, domain, "user")),
                               sync=telecom_phone.sync_phone_with_crm, solo=solo)
    raise ValueError(f"unknown τ² domain {domain!r}; choose one of {DOMAINS}")


def policy_text(data: Tau2Data, domain: str, solo: bool = False, tech_support: str = "manual") -> str:
    """The policy shown to the agent (the domain's policy document). ``tech_support`` picks the
    telecom variant: ``"manual"`` (the paper's) or ``"workflow"`` (upstream's telecom-workflow)."""
    if domain in ("airline", "retail"):
        if solo:
            raise ValueError(f"the {domain} domain has no solo mode (only telecom does)")
        return data.text(f"domains/{domain}/policy.md")
    if tech_support not in ("manual", "workflow"):
        raise ValueError(f"tech_support must be 'manual' or 'workflow', got {tech_support!r}")
    main = data.text("domains/telecom/main_policy_solo.md" if solo else "domains/telecom/main_policy.md")
    second = {"manual": "tech_support_manual.md",
              "workflow": "tech_support_workflow_solo.md" if solo else "tech_support_workflow.md"}[tech_support]
    if not (data.root / "domains/telecom" / second).is_file():
        raise FileNotFoundError(f"the telecom {tech_support} policy needs {data.root / 'domains/telecom' / second}")
    return (f"<main_policy>\n{main}\n</main_policy>\n"
            f"<tech_support_policy>\n{data.text('domains/telecom/' + second)}\n</tech_support_policy>")
