"""Fixture-backed services, re-implemented from the behaviour of upstream's mock servers
(routes, request fields, response and audit keys), not from their code. Response keys
and audit list names must match upstream's exactly: the task graders read them.

This module holds inventory and notes and the registry ``SERVICES``; the others live in
``services_office`` (gmail, calendar, todo, contacts), ``services_business`` (finance,
crm, helpdesk, kb, config, scheduler) and ``services_content`` (rss, web, ocr,
documents).
"""

from __future__ import annotations

import copy
from typing import Any

from pydantic import BaseModel

from envs.claw_eval.mock import MockService, missing, route
from envs.claw_eval.services_business import (
    ConfigService,
    CRMService,
    FinanceService,
    HelpdeskService,
    KBService,
    SchedulerService,
)
from envs.claw_eval.services_content import DocumentsService, OCRService, RSSService, WebService
from envs.claw_eval.services_office import CalendarService, ContactsService, GmailService, TodoService


class ListProducts(BaseModel):
    category: str | None = None


class GetProduct(BaseModel):
    product_id: str


class CreateOrder(BaseModel):
    product_id: str
    quantity: int
    supplier: str | None = None


class InventoryService(MockService):
    module = "inventory"
    fixture_var = "INVENTORY_FIXTURES"

    def load(self, data: Any) -> None:
        self.products: list[dict] = list(data or [])
        self.orders: list[dict] = []

    def actions(self) -> dict[str, list]:
        return {"orders": self.orders}

    @route("/inventory/products", ListProducts)
    def list_products(self, req: ListProducts) -> dict:
        found = [copy.deepcopy(p) for p in self.products if not req.category or p["category"] == req.category]
        return {"products": found, "total": len(found)}

    @route("/inventory/products/get", GetProduct)
    def get_product(self, req: GetProduct) -> dict:
        match = next((p for p in self.products if p["product_id"] == req.product_id), None)
        return copy.deepcopy(match) if match else missing("Product", req.product_id)

    @route("/inventory/orders/create", CreateOrder)
    def create_order(self, req: CreateOrder) -> dict:
        order = req.model_dump()  # no timestamp: upstream's order record has none
        self.orders.append(order)
        return {"status": "created", "order": copy.deepcopy(order)}


class ListNotes(BaseModel):
    max_results: int = 10


class GetNote(BaseModel):
    note_id: str


class ShareNote(BaseModel):
    note_id: str
    recipients: list[str]


class NotesService(MockService):
    module = "notes"
    fixture_var = "NOTES_FIXTURES"
    SUMMARY_KEYS = ("note_id", "title", "created_at", "participants", "duration_minutes")

    def load(self, data: Any) -> None:
        self.notes: list[dict] = list(data or [])
        self.shared: list[dict] = []

    def actions(self) -> dict[str, list]:
        return {"shared": self.shared}

    @route("/notes/list", ListNotes)
    def list_notes(self, req: ListNotes) -> dict:
        # a fixture note lacking a summary key is a server error upstream too
        found = [{k: copy.deepcopy(n[k]) for k in self.SUMMARY_KEYS} for n in self.notes[:req.max_results]]
        return {"notes": found, "total": len(found)}

    @route("/notes/get", GetNote)
    def get_note(self, req: GetNote) -> dict:
        match = next((n for n in self.notes if n["note_id"] == req.note_id), None)
        return copy.deepcopy(match) if match else missing("Note", req.note_id)

    @route("/notes/share", ShareNote)
    def share_note(self, req: ShareNote) -> dict:
        record = req.model_dump()  # no timestamp, as upstream's share record
        self.shared.append(record)
        return {"status": "shared", "record": copy.deepcopy(record)}


#: module name -> implementation: every fixture-backed module (``tasks.FIXTURE_SERVICES``)
SERVICES: dict[str, type[MockService]] = {cls.module: cls for cls in (
    InventoryService, NotesService, GmailService, CalendarService, TodoService, ContactsService, FinanceService,
    CRMService, HelpdeskService, KBService, ConfigService, SchedulerService, RSSService, WebService, OCRService,
    DocumentsService)}
