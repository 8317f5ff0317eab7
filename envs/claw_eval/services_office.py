"""Office services: gmail, calendar, todo, contacts (see ``services`` for the rules).

gmail and calendar are the two services that read the clock against their records:
gmail lists mail newer than ``days_back`` days before "now", and upstream shifts both
services' fixture dates against the wall clock. Under ``Clock("wall")`` the shift is
applied as upstream does it; under the default frozen clock the dates stay as written
and gmail anchors the clock one day after its newest mail instead, which keeps the same
"newest mail is a day old" relation without moving any date the prompt names.
"""

from __future__ import annotations

import copy
from datetime import datetime, timedelta, timezone
from typing import Any

from pydantic import BaseModel, Field

from envs.claw_eval.mock import MockService, format_instant, missing, parse_instant, route


def find(records: list[dict], key: str, value: Any) -> dict | None:
    """The first record whose ``key`` equals ``value`` (a record lacking the key is a
    server error, as upstream indexes it directly)."""
    return next((r for r in records if r[key] == value), None)


def _day(text: str) -> datetime | None:
    try:
        return datetime.strptime(text, "%Y-%m-%d").replace(tzinfo=timezone.utc)
    except ValueError:
        return None


# ---- gmail ------------------------------------------------------------------------------------

class ListMessages(BaseModel):
    days_back: int = 7
    max_results: int = 20


class MessageId(BaseModel):
    message_id: str


class SendMail(BaseModel):
    to: str
    subject: str
    body: str


class SaveDraft(BaseModel):
    to: str
    subject: str
    body: str
    reply_to_message_id: str | None = None


class GmailService(MockService):
    module = "gmail"
    fixture_var = "GMAIL_FIXTURES"
    SUMMARY_KEYS = ("message_id", "from", "subject", "date", "is_read", "labels")

    def load(self, data: Any) -> None:
        self.emails: list[dict] = list(data or [])
        self.sent_messages: list[dict] = []
        self.drafts: list[dict] = []
        if self.clock.wall and self.emails:
            # upstream: move every date so that the newest mail is one day old
            newest = max(parse_instant(e["date"]) for e in self.emails)
            delta = (datetime.now(timezone.utc) - timedelta(days=1)) - newest
            for e in self.emails:
                e["date"] = format_instant(parse_instant(e["date"]) + delta)

    def frozen_anchor(self) -> datetime | None:
        if not self.emails:
            return None
        try:
            newest = max(parse_instant(e["date"]) for e in self.emails)
        except (KeyError, TypeError, ValueError):
            return None
        newest = newest if newest.tzinfo else newest.replace(tzinfo=timezone.utc)
        return newest + timedelta(days=1)

    def actions(self) -> dict[str, list]:
        return {"sent_messages": self.sent_messages, "drafts": self.drafts}

    @route("/gmail/messages", ListMessages)
    def list_messages(self, req: ListMessages) -> dict:
        cutoff = self.clock.now() - timedelta(days=req.days_back)
        found = [{k: copy.deepcopy(e[k]) for k in self.SUMMARY_KEYS}
                 for e in self.emails if parse_instant(e["date"]) >= cutoff][:req.max_results]
        return {"messages": found, "total": len(found)}

    @route("/gmail/messages/get", MessageId)
    def get_message(self, req: MessageId) -> dict:
        match = find(self.emails, "message_id", req.message_id)
        return copy.deepcopy(match) if match else missing("Message", req.message_id)

    @route("/gmail/send", SendMail)
    def send(self, req: SendMail) -> dict:
        message = {**req.model_dump(), "timestamp": self.clock.iso()}
        self.sent_messages.append(message)
        return {"status": "sent", "message": copy.deepcopy(message)}

    @route("/gmail/drafts/save", SaveDraft)
    def save_draft(self, req: SaveDraft) -> dict:
        draft = {**req.model_dump(), "timestamp": self.clock.iso()}
        self.drafts.append(draft)
        return {"status": "draft_saved", "draft": copy.deepcopy(draft)}


# ---- calendar ---------------------------------------------------------------------------------

class ListEvents(BaseModel):
    date: str
    days: int = 1


class EventId(BaseModel):
    event_id: str


class CreateEvent(BaseModel):
    title: str
    start_time: str
    end_time: str
    attendees: list[str] = Field(default_factory=list)
    location: str = ""


class UserEvents(BaseModel):
    user: str
    date: str


class CalendarService(MockService):
    module = "calendar"
    fixture_var = "CALENDAR_FIXTURES"

    def load(self, data: Any) -> None:
        self.events: list[dict] = list(data or [])
        self.deleted: list[dict] = []
        self.created_events: list[dict] = []
        if self.clock.wall and self.events:
            # upstream: move every event so the earliest starts tomorrow at its own hour
            earliest = min(parse_instant(e["start_time"]) for e in self.events)
            target = (datetime.now(timezone.utc) + timedelta(days=1)).replace(
                hour=earliest.hour, minute=earliest.minute, second=0, microsecond=0)
            delta = target - earliest
            for e in self.events:
                for key in ("start_time", "end_time"):
                    if e.get(key):
                        e[key] = format_instant(parse_instant(e[key]) + delta)

    def actions(self) -> dict[str, list]:
        return {"deleted": self.deleted, "created_events": self.created_events}

    def _on_days(self, start: datetime, days: int) -> list[dict]:
        end = start + timedelta(days=days)
        found = [copy.deepcopy(e) for e in self.events if start <= parse_instant(e["start_time"]) < end]
        return sorted(found, key=lambda e: e["start_time"])

    @route("/calendar/events", ListEvents)
    def list_events(self, req: ListEvents) -> dict:
        start = _day(req.date)
        if start is None:
            return {"error": f"Invalid date format: {req.date}"}
        found = self._on_days(start, req.days)
        return {"events": found, "total": len(found)}

    @route("/calendar/events/get", EventId)
    def get_event(self, req: EventId) -> dict:
        match = find(self.events, "event_id", req.event_id)
        return copy.deepcopy(match) if match else missing("Event", req.event_id)

    @route("/calendar/events/create", CreateEvent)
    def create_event(self, req: CreateEvent) -> dict:
        event = {"event_id": f"evt_{len(self.events) + 1:03d}", **req.model_dump(), "recurring": False}
        self.events.append(event)
        self.created_events.append(copy.deepcopy(event))
        return {"status": "created", "event": copy.deepcopy(event)}

    @route("/calendar/user_events", UserEvents)
    def user_events(self, req: UserEvents) -> dict:
        start = _day(req.date)
        if start is None:
            return {"error": f"Invalid date format: {req.date}"}
        # a substring of an attendee entry counts, so "alice" finds "alice@corp.com"
        found = [e for e in self._on_days(start, 1)
                 if any(req.user == a or req.user in a for a in e.get("attendees", []))]
        return {"events": found, "total": len(found), "user": req.user}

    @route("/calendar/events/delete", EventId)
    def delete_event(self, req: EventId) -> dict:
        match = find(self.events, "event_id", req.event_id)
        if match is None:
            return missing("Event", req.event_id)
        self.events.remove(match)
        self.deleted.append(match)
        return {"status": "deleted", "event": copy.deepcopy(match)}


# ---- todo -------------------------------------------------------------------------------------

class ListTasks(BaseModel):
    status: str = "all"


class UpdateTask(BaseModel):
    task_id: str
    title: str | None = None
    priority: str | None = None
    status: str | None = None
    tags: list[str] | None = None


class CreateTask(BaseModel):
    title: str
    description: str | None = None
    priority: str = "medium"
    due_date: str | None = None


class TaskId(BaseModel):
    task_id: str


class TodoService(MockService):
    module = "todo"
    fixture_var = "TODO_FIXTURES"

    def load(self, data: Any) -> None:
        self.tasks: list[dict] = list(data or [])
        self.deleted: list[dict] = []
        self.updated_tasks: list[dict] = []

    def actions(self) -> dict[str, list]:
        return {"deleted": self.deleted, "updated_tasks": self.updated_tasks}

    @route("/todo/tasks", ListTasks)
    def list_tasks(self, req: ListTasks) -> dict:
        found = [copy.deepcopy(t) for t in self.tasks if req.status == "all" or t["status"] == req.status]
        return {"tasks": found, "total": len(found)}

    @route("/todo/tasks/update", UpdateTask)
    def update_task(self, req: UpdateTask) -> dict:
        match = find(self.tasks, "task_id", req.task_id)
        if match is None:
            return missing("Task", req.task_id)
        match.update({k: v for k, v in req.model_dump(exclude={"task_id"}).items() if v is not None})
        self.updated_tasks.append(copy.deepcopy(match))
        return {"status": "updated", "task": copy.deepcopy(match)}

    @route("/todo/tasks/create", CreateTask)
    def create_task(self, req: CreateTask) -> dict:
        task = {"task_id": f"todo_{len(self.tasks) + 1:03d}", "title": req.title,
                "description": req.description or "", "status": "pending", "priority": req.priority,
                "due_date": req.due_date, "tags": [], "created_at": self.clock.iso()}
        self.tasks.append(task)
        return {"status": "created", "task": copy.deepcopy(task)}

    @route("/todo/tasks/get", TaskId, fix="missing_routes")
    def get_task(self, req: TaskId) -> dict:
        # upstream's tasks expose todo_get_task on this path, which its server lacks
        match = find(self.tasks, "task_id", req.task_id)
        return {"task": copy.deepcopy(match)} if match else missing("Task", req.task_id)

    @route("/todo/tasks/delete", TaskId)
    def delete_task(self, req: TaskId) -> dict:
        match = find(self.tasks, "task_id", req.task_id)
        if match is None:
            return missing("Task", req.task_id)
        self.tasks.remove(match)
        self.deleted.append(match)
        return {"status": "deleted", "task": copy.deepcopy(match)}


# ---- contacts ---------------------------------------------------------------------------------

class SearchContacts(BaseModel):
    query: str
    department: str | None = None


class ContactId(BaseModel):
    contact_id: str


class MessageContact(BaseModel):
    contact_id: str
    message: str


class ContactsService(MockService):
    module = "contacts"
    fixture_var = "CONTACTS_FIXTURES"

    def load(self, data: Any) -> None:
        self.contacts: list[dict] = list(data or [])
        self.sent_messages: list[dict] = []

    def actions(self) -> dict[str, list]:
        return {"sent_messages": self.sent_messages}

    @route("/contacts/search", SearchContacts)
    def search(self, req: SearchContacts) -> dict:
        # substring matches, case-sensitive, on the name (and the department when given)
        found = [copy.deepcopy(c) for c in self.contacts
                 if req.query in c["name"] and (req.department is None or req.department in c["department"])]
        return {"contacts": found, "total": len(found)}

    @route("/contacts/get", ContactId)
    def get_contact(self, req: ContactId) -> dict:
        match = find(self.contacts, "contact_id", req.contact_id)
        return copy.deepcopy(match) if match else missing("Contact", req.contact_id)

    @route("/contacts/send_message", MessageContact)
    def send_message(self, req: MessageContact) -> dict:
        record = {**req.model_dump(), "timestamp": self.clock.iso()}
        self.sent_messages.append(record)
        return {"status": "sent", "record": copy.deepcopy(record)}
