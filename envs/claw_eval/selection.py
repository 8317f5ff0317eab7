"""Which tasks an env serves: selection and a train/test split that keeps test tasks out
of training.

Selections (``env_config["tasks"]``):
    "offline"      every task that runs offline (the default)
    "hard20"       the 20 tasks chosen by ``HARD20_RULE`` (the paper's filter, whose ids
                   are not published, re-stated as a fixed rule over task.yaml fields)
    [ids...]       an explicit list of task ids (each must run offline)
plus optional ``language`` and ``difficulty`` filters.

Splits are made per family (the name a task's zh/en twins share), never per task, so a
task's translation cannot sit in train while the task itself is in test.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

from envs.claw_eval.tasks import ClawTask

HARD20_SIZE = 20
HARD20_RULE = ("the offline tasks in the requested language (English by default) that use at "
               "least two mock services, ranked by difficulty (hard, then medium, then easy), then "
               "number of mock services (most first), then number of tools (most first), then "
               "task id; the first 20")
_DIFFICULTY_RANK = {"hard": 0, "medium": 1, "easy": 2}
DEFAULT_TEST_FRACTION = 0.3


def _filter(tasks: Iterable[ClawTask], language: str | None, difficulty: str | None) -> list[ClawTask]:
    return [t for t in tasks
            if (language is None or t.language == language)
            and (difficulty is None or t.difficulty == difficulty)]


def hard20(tasks: Sequence[ClawTask], language: str = "en", size: int = HARD20_SIZE) -> list[ClawTask]:
    """The Hard20 set by ``HARD20_RULE``, sorted by id. The paper picked hard
    multi-service tasks; single-service tasks (one document to read, one inbox) are left
    out even when labelled hard. An error if fewer than ``size`` qualify: a partial copy
    of the data must not silently shrink the benchmark."""
    # variants are training material, never benchmark tasks
    pool = [t for t in _filter(tasks, language, None) if t.offline and len(t.services) >= 2 and not t.is_variant]
    pool.sort(key=lambda t: (_DIFFICULTY_RANK.get(t.difficulty, 3), -len(t.services), -len(t.tools), t.task_id))
    if len(pool) < size:
        raise ValueError(f"hard20 needs {size} offline multi-service tasks in language {language!r}, "
                         f"found {len(pool)}: is the Claw-Eval copy complete?")
    return sorted(pool[:size], key=lambda t: t.task_id)


def select_tasks(tasks: Sequence[ClawTask], selection: str | Sequence[str] = "offline", *,
                 language: str | None = None, difficulty: str | None = None,
                 hard20_size: int = HARD20_SIZE) -> list[ClawTask]:
    """The tasks a selection names (see the module docstring), sorted by id."""
    if isinstance(selection, str):
        if selection == "offline":
            chosen = [t for t in tasks if t.offline]
        elif selection == "hard20":
            chosen = hard20(tasks, language or "en", hard20_size)
        else:
            raise ValueError(f"unknown task selection {selection!r}; use 'offline', 'hard20' or a list of ids")
    else:
        by_id = {t.task_id: t for t in tasks}
        unknown = [i for i in selection if i not in by_id]
        if unknown:
            raise KeyError(f"unknown Claw-Eval task ids: {unknown}")
        online = {i: by_id[i].offline_problems for i in selection if not by_id[i].offline}
        if online:
            raise ValueError(f"these tasks cannot run offline: {online}")
        chosen = [by_id[i] for i in dict.fromkeys(selection)]
    return sorted(_filter(chosen, language, difficulty), key=lambda t: t.task_id)


def family_in_test(family: str, test_fraction: float = DEFAULT_TEST_FRACTION, seed: int = 0) -> bool:
    """Whether a family is held out: a hash of (seed, family) below ``test_fraction``.
    A threshold on a hash, not a rank, so adding or removing other tasks (another data
    version, a filter) never moves a family between train and test."""
    digest = hashlib.sha256(f"{seed}:{family}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0 ** 64 < test_fraction


def split_tasks(tasks: Sequence[ClawTask], split: str, *, test_fraction: float = DEFAULT_TEST_FRACTION,
                seed: int = 0, test_families: Iterable[str] | None = None) -> list[ClawTask]:
    """The tasks of ``split`` ("train", "test" or "all"). ``test_families``, when given,
    is the held-out set (e.g. Hard20's families); otherwise ``family_in_test`` decides."""
    if split == "all":
        return list(tasks)
    if split not in ("train", "test"):
        raise ValueError(f"unknown split {split!r}; use 'train', 'test' or 'all'")
    if not 0.0 <= test_fraction <= 1.0:
        raise ValueError(f"test_fraction must be in [0, 1], got {test_fraction}")
    held = set(test_families) if test_families is not None else None

    def is_test(task: ClawTask) -> bool:
        return task.family in held if held is not None else family_in_test(task.family, test_fraction, seed)

    return [t for t in tasks if is_test(t) == (split == "test")]


def tasks_for(tasks: Sequence[ClawTask], selection: str | Sequence[str] = "offline", split: str = "all", *,
              language: str | None = None, difficulty: str | None = None,
              test_fraction: float = DEFAULT_TEST_FRACTION, seed: int = 0,
              hard20_size: int = HARD20_SIZE) -> list[ClawTask]:
    """Selection then split, as an env config asks for them. With ``"hard20"`` the test
    split is the 20 tasks and the train split every other offline task in the same
    language (English unless given; ``difficulty`` filters train only) outside their
    families; with other selections the families are split by hash."""
    if selection == "hard20":
        language = language or "en"
        chosen = select_tasks(tasks, "hard20", language=language, hard20_size=hard20_size)
        if split == "test":
            return chosen
        families = {t.family for t in chosen}
        rest = select_tasks(tasks, "offline", language=language, difficulty=difficulty)
        if split == "all":
            return sorted({t.task_id: t for t in [*chosen, *rest]}.values(), key=lambda t: t.task_id)
        return split_tasks(rest, split, test_families=families)
    chosen = select_tasks(tasks, selection, language=language, difficulty=difficulty)
    return split_tasks(chosen, split, test_fraction=test_fraction, seed=seed)
