"""The people-facing services: mail, calendar, contacts, notes."""

from __future__ import annotations

from envs.base import ToolError
from envs.hard20.service import (
    BOOL,
    DATE,
    STR,
    STR_LIST,
    Service,
    ToolDef,
    brief,
    check_date,
    check_time,
    enum,
    matches,
)


class Mail(Service):
    name, noun = "mail", "message"
    TOOLS = (
        ToolDef("mail_list", "read", "List messages in a folder (newest first): id, from, subject, date.",
                {"folder": enum("inbox", "sent", "drafts"), "unread_only": BOOL}),
        ToolDef("mail_get", "read", "Read one message in full.", {"message_id": STR}, ("message_id",)),
        ToolDef("mail_send", "write", "Send an email now. It cannot be recalled.",
                {"to": STR, "subject": STR, "body": STR, "in_reply_to": STR}, ("to", "subject", "body")),
        ToolDef("mail_save_draft", "write", "Save an email as a draft (not sent).",
                {"to": STR, "subject": STR, "body": STR, "in_reply_to": STR}, ("to", "subject", "body")),
    )

    def list(self, folder: str = "inbox", unread_only: bool = False):
        rows = [m for m in self.records.values() if m["folder"] == folder and (m.get("unread") or not unread_only)]
        rows.sort(key=lambda m: m["date"], reverse=True)
        keys = ("id", "from", "subject", "date") if folder == "inbox" else ("id", "to", "subject", "date")
        return [brief(m, keys) for m in rows]

    def get(self, message_id: str):
        return super().get(message_id)

    def _compose(self, folder: str, to: str, subject: str, body: str, in_reply_to: str | None) -> dict:
        if "@" not in to:
            raise ToolError(f"'to' must be an email address, got {to!r}")
        if in_reply_to is not None:
            super().get(in_reply_to)
        record = {"id": self.new_id("msg"), "folder": folder, "from": "me@corp.example", "to": to,
                  "subject": subject, "body": body, "date": self.backend.now()[:10]}
        if in_reply_to is not None:
            record["in_reply_to"] = in_reply_to
        self.add(record)
        return {"id": record["id"], "status": "sent" if folder == "sent" else "draft saved"}

    def send(self, to: str, subject: str, body: str, in_reply_to: str | None = None):
        return self._compose("sent", to, subject, body, in_reply_to)

    def save_draft(self, to: str, subject: str, body: str, in_reply_to: str | None = None):
        return self._compose("drafts", to, subject, body, in_reply_to)


class Calendar(Service):
    name, noun = "calendar", "event"
    TOOLS = (
        ToolDef("calendar_list", "read", "List the events on a date.", {"date": DATE}, ("date",)),
        ToolDef("calendar_get", "read", "Get one event in full.", {"event_id": STR}, ("event_id",)),
        ToolDef("calendar_create", "write", "Create an event (times HH:MM, 24 h).",
                {"title": STR, "date": DATE, "start": STR, "end": STR, "attendees": STR_LIST},
                ("title", "date", "start", "end")),
        ToolDef("calendar_delete", "write", "Delete an event.", {"event_id": STR}, ("event_id",)),
    )

    def list(self, date: str):
        check_date(date)
        rows = sorted((e for e in self.records.values() if e["date"] == date), key=lambda e: e["start"])
        return [brief(e, ("id", "title", "start", "end")) for e in rows]

    def get(self, event_id: str):
        return super().get(event_id)

    def create(self, title: str, date: str, start: str, end: str, attendees: list | None = None):
        check_date(date)
        check_time(start, "start")
        check_time(end, "end")
        if end <= start:
            raise ToolError(f"end {end} must be after start {start}")
        record = {"id": self.new_id("evt"), "title": title, "date": date, "start": start, "end": end,
                  "attendees": list(attendees or [])}
        self.add(record)
        return {"id": record["id"], "status": "created"}

    def delete(self, event_id: str):
        record = super().get(event_id)
        del self.records[event_id]
        self.backend.change(self.name, "delete", event_id, before=record)
        return {"id": event_id, "status": "deleted"}


class Contacts(Service):
    name, noun = "contacts", "contact"
    TOOLS = (
        ToolDef("contacts_search", "read", "Search contacts by name, email, team or role.", {"query": STR}, ("query",)),
        ToolDef("contacts_get", "read", "Get one contact in full.", {"contact_id": STR}, ("contact_id",)),
        ToolDef("contacts_message", "write", "Send a chat message to a contact now.",
                {"contact_id": STR, "text": STR}, ("contact_id", "text")),
    )

    def search(self, query: str):
        return [brief(c, ("id", "name", "email", "role", "status")) for c in self.records.values()
                if matches(c, query, ("name", "email", "team", "role"))]

    def get(self, contact_id: str):
        return super().get(contact_id)

    def message(self, contact_id: str, text: str):
        contact = super().get(contact_id)
        self.backend.change(self.name, "message", contact_id, text=text)
        return {"to": contact["name"], "status": "delivered"}


class Notes(Service):
    name, noun = "notes", "note"
    TOOLS = (
        ToolDef("notes_list", "read", "List notes: id, title, owner.", {}),
        ToolDef("notes_get", "read", "Read one note in full.", {"note_id": STR}, ("note_id",)),
        ToolDef("notes_share", "write", "Share a note with people (email addresses).",
                {"note_id": STR, "recipients": STR_LIST}, ("note_id", "recipients")),
    )

    def list(self):
        return [brief(n, ("id", "title", "owner")) for n in self.records.values()]

    def get(self, note_id: str):
        return super().get(note_id)

    def share(self, note_id: str, recipients: list):
        note = super().get(note_id)
        bad = [r for r in recipients if "@" not in r]
        if not recipients or bad:
            raise ToolError(f"recipients must be a non-empty list of email addresses; not addresses: {bad}")
        before = list(note["shared_with"])
        note["shared_with"] = sorted(set(before) | set(recipients))
        self.backend.change(self.name, "share", note_id, before=before, after=note["shared_with"])
        return {"id": note_id, "shared_with": note["shared_with"]}
