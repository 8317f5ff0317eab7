"""Stand-in task definition, read from a task.yaml (unknown fields ignored)."""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict


class Prompt(BaseModel):
    text: str
    language: str = "zh"


class TaskDefinition(BaseModel):
    model_config = ConfigDict(extra="ignore")

    task_id: str
    task_name: str = ""
    prompt: Prompt
    judge_rubric: str = ""

    @classmethod
    def from_yaml(cls, path: str | Path) -> "TaskDefinition":
        return cls.model_validate(yaml.safe_load(Path(path).read_text(encoding="utf-8")))
