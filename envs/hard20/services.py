"""The twelve mock services by name, and a backend built from a task's fixtures."""

from __future__ import annotations

from envs.base import Tool
from envs.hard20.backend import Backend
from envs.hard20.services_business import CRM, Finance, Helpdesk, Inventory
from envs.hard20.services_ops import Config, KnowledgeBase, Scheduler, Todo
from envs.hard20.services_people import Calendar, Contacts, Mail, Notes

SERVICES = {cls.name: cls for cls in (Mail, Calendar, Contacts, CRM, Finance, Helpdesk, Inventory, KnowledgeBase,
                                      Notes, Scheduler, Todo, Config)}


def build_backend(today: str, fixtures: dict[str, list[dict]], fault_rate: float = 0.0,
                  fault_seed: str = "") -> tuple[Backend, list[Tool]]:
    """A backend holding one service per fixture key, and the tools of those services."""
    unknown = sorted(set(fixtures) - set(SERVICES))
    if unknown:
        raise ValueError(f"unknown services {unknown}; valid services: {sorted(SERVICES)}")
    backend = Backend(today, fault_rate, fault_seed)
    tools: list[Tool] = []
    for name in SERVICES:  # a fixed order, so the tool list of a task is stable
        if name in fixtures:
            tools += SERVICES[name](backend, fixtures[name]).tools()
    return backend, tools
