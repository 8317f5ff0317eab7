"""The operations services: knowledge base, scheduler, todo, config (integrations)."""

from __future__ import annotations

from envs.base import ToolError
from envs.hard20.service import BOOL, STR, Service, ToolDef, brief, enum, matches


class KnowledgeBase(Service):
    name, noun = "kb", "article"
    TOOLS = (
        ToolDef("kb_search", "read", "Search knowledge-base articles by words.", {"query": STR}, ("query",)),
        ToolDef("kb_get", "read", "Read one article in full.", {"article_id": STR}, ("article_id",)),
        ToolDef("kb_update", "write", "Replace the body of an article.", {"article_id": STR, "body": STR},
                ("article_id", "body")),
    )

    def search(self, query: str):
        hits = [a for a in self.records.values() if matches(a, query, ("title", "body", "tags"))]
        if not hits:  # any word, so that a long query still finds something
            words = query.casefold().split()
            hits = [a for a in self.records.values()
                    if any(w in f"{a['title']} {a.get('tags', '')}".casefold() for w in words)]
        return [brief(a, ("id", "title", "status")) for a in hits]

    def get(self, article_id: str):
        return super().get(article_id)

    def update(self, article_id: str, body: str):
        article = super().get(article_id)
        if not body.strip():
            raise ToolError("body must not be empty")
        before = article["body"]
        article["body"] = body
        self.backend.change(self.name, "update", article_id, before=before, after=body)
        return {"id": article_id, "status": "updated"}


class Scheduler(Service):
    name, noun = "scheduler", "job"
    TOOLS = (
        ToolDef("scheduler_list", "read", "List scheduled jobs, optionally by last status (ok, failed).",
                {"status": STR}),
        ToolDef("scheduler_get", "read", "Get one job in full.", {"job_id": STR}, ("job_id",)),
        ToolDef("scheduler_history", "read", "Recent runs of a job.", {"job_id": STR}, ("job_id",)),
        ToolDef("scheduler_create", "write", "Create a job.", {"name": STR, "cron": STR, "command": STR},
                ("name", "cron", "command")),
        ToolDef("scheduler_update", "write", "Change a job's schedule, command or enabled flag.",
                {"job_id": STR, "cron": STR, "command": STR, "enabled": BOOL}, ("job_id",)),
        ToolDef("scheduler_rerun", "write", "Run a job again now.", {"job_id": STR}, ("job_id",)),
        ToolDef("scheduler_delete", "write", "Delete a job and its history.", {"job_id": STR}, ("job_id",)),
    )

    def list(self, status: str | None = None):
        rows = [j for j in self.records.values() if status is None or j["last_status"] == status]
        return [brief(j, ("id", "name", "enabled", "last_status")) for j in rows]

    def get(self, job_id: str):
        job = dict(super().get(job_id))
        job.pop("history", None)
        return job

    def history(self, job_id: str):
        return super().get(job_id).get("history", [])

    def create(self, name: str, cron: str, command: str):
        if len(cron.split()) != 5:
            raise ToolError(f"cron must have 5 fields (minute hour day month weekday), got {cron!r}")
        job = {"id": self.new_id("job"), "name": name, "cron": cron, "command": command, "enabled": True,
               "last_status": "never_run", "history": []}
        self.add(job)
        return {"id": job["id"], "status": "created"}

    def update(self, job_id: str, cron: str | None = None, command: str | None = None, enabled: bool | None = None):
        job = super().get(job_id)
        fields = {k: v for k, v in {"cron": cron, "command": command, "enabled": enabled}.items() if v is not None}
        if not fields:
            raise ToolError("nothing to update: give cron, command or enabled")
        if "cron" in fields and len(fields["cron"].split()) != 5:
            raise ToolError(f"cron must have 5 fields (minute hour day month weekday), got {cron!r}")
        before = {k: job.get(k) for k in fields}
        job.update(fields)
        self.backend.change(self.name, "update", job_id, before=before, after=fields)
        return {"id": job_id, **{k: job[k] for k in ("cron", "enabled")}}

    def rerun(self, job_id: str):
        job = super().get(job_id)
        if not job["enabled"]:
            raise ToolError(f"job {job_id} is disabled; enable it before rerunning")
        job["last_status"] = "queued"
        job.setdefault("history", []).insert(0, {"run_at": self.backend.now(), "status": "queued", "message": "manual rerun"})
        self.backend.change(self.name, "rerun", job_id)
        return {"id": job_id, "status": "queued"}

    def delete(self, job_id: str):
        job = super().get(job_id)
        del self.records[job_id]
        self.backend.change(self.name, "delete", job_id, before=job)
        return {"id": job_id, "status": "deleted"}


class Todo(Service):
    name, noun = "todo", "todo item"
    TOOLS = (
        ToolDef("todo_list", "read", "List todo items.", {}),
        ToolDef("todo_create", "write", "Create a todo item.", {"title": STR, "due": STR, "assignee": STR}, ("title",)),
        ToolDef("todo_update", "write", "Change a todo item.",
                {"todo_id": STR, "title": STR, "due": STR, "assignee": STR, "done": BOOL}, ("todo_id",)),
        ToolDef("todo_delete", "write", "Delete a todo item.", {"todo_id": STR}, ("todo_id",)),
    )

    def list(self):
        return [brief(t, ("id", "title", "due", "assignee", "done")) for t in self.records.values()]

    def create(self, title: str, due: str | None = None, assignee: str | None = None):
        if not title.strip():
            raise ToolError("title must not be empty")
        item = {"id": self.new_id("todo"), "title": title, "due": due, "assignee": assignee, "done": False}
        self.add(item)
        return {"id": item["id"], "status": "created"}

    def update(self, todo_id: str, title: str | None = None, due: str | None = None, assignee: str | None = None,
               done: bool | None = None):
        item = super().get(todo_id)
        fields = {k: v for k, v in {"title": title, "due": due, "assignee": assignee, "done": done}.items()
                  if v is not None}
        if not fields:
            raise ToolError("nothing to update: give title, due, assignee or done")
        before = {k: item.get(k) for k in fields}
        item.update(fields)
        self.backend.change(self.name, "update", todo_id, before=before, after=fields)
        return {"id": todo_id, "status": "updated"}

    def delete(self, todo_id: str):
        item = super().get(todo_id)
        del self.records[todo_id]
        self.backend.change(self.name, "delete", todo_id, before=item)
        return {"id": todo_id, "status": "deleted"}


class Config(Service):
    name, noun = "config", "integration"
    TOOLS = (
        ToolDef("config_integrations", "read", "List integrations: id, enabled.", {}),
        ToolDef("config_get", "read", "Get one integration's settings.", {"integration_id": STR}, ("integration_id",)),
        ToolDef("config_update", "write", "Change an integration: enable/disable it, or set settings (merged).",
                {"integration_id": STR, "enabled": BOOL, "settings": {"type": "object"}}, ("integration_id",)),
        ToolDef("config_notify", "write", "Post a message to a notification channel.",
                {"channel": enum("ops", "engineering", "customers", "all-staff"), "message": STR},
                ("channel", "message")),
    )

    def __init__(self, backend, records):
        super().__init__(backend, records)
        self.notifications: list[dict] = []

    def integrations(self):
        return [brief(i, ("id", "enabled")) for i in self.records.values()]

    def get(self, integration_id: str):
        return super().get(integration_id)

    def update(self, integration_id: str, enabled: bool | None = None, settings: dict | None = None):
        item = super().get(integration_id)
        if enabled is None and not settings:
            raise ToolError("nothing to update: give enabled or settings")
        unknown = sorted(set(settings or {}) - set(item["settings"]))
        if unknown:
            raise ToolError(f"unknown settings {unknown} for {integration_id}; known: {sorted(item['settings'])}")
        before = {"enabled": item["enabled"], "settings": dict(item["settings"])}
        if enabled is not None:
            item["enabled"] = enabled
        item["settings"].update(settings or {})
        self.backend.change(self.name, "update", integration_id, before=before,
                            after={"enabled": item["enabled"], "settings": dict(item["settings"])})
        return {"id": integration_id, "enabled": item["enabled"], "settings": item["settings"]}

    def notify(self, channel: str, message: str):
        if not message.strip():
            raise ToolError("message must not be empty")
        self.notifications.append({"channel": channel, "message": message})
        self.backend.change(self.name, "notify", channel, message=message)
        return {"channel": channel, "status": "posted"}

    def snapshot(self) -> dict:
        return {**super().snapshot(), "_notifications": [dict(n) for n in self.notifications]}

