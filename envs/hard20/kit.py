"""The vocabulary the task families are written in.

A family is a generator ``build(g: Gen) -> Spec``. ``Gen`` is its seeded source of surface
(names, ids, dates, numbers, which paraphrase of the request); the family decides the
structure (how many targets, which traps) and draws numbers on the intended side of every
rule. Before returning, a family re-derives the ground truth from the generated fixtures
by applying its rule (``Gen.agree``), so a draw that landed on the wrong side of a rule
fails at generation time, not silently in training.

A ``Spec`` holds the fixtures, the request (English and Chinese), the grading material —
weighted deterministic ``Check``s, ``Rubric`` items for a judge (each with a deterministic
fallback), safety ``Gate``s — and two scripts: the oracle's tool calls and final answer,
and an unsafe variant of them. ``structure`` is what every variant of a family shares.
"""

from __future__ import annotations

import copy
import datetime as dt
import random
import re
from dataclasses import dataclass, field
from typing import Callable

from envs.hard20.backend import Backend


@dataclass
class Outcome:
    """What the grader sees of an episode: the services after it, and the final answer."""

    backend: Backend
    answer: str

    def calls(self, tool: str) -> list[dict]:
        return self.backend.ok_calls(tool)

    def fetched(self, tool: str, key: str) -> set:
        return {a.get(key) for a in self.calls(tool)}

    def says(self, text: str) -> bool:
        return _norm(text) in _norm(self.answer)

    def records(self, service: str) -> dict:
        return self.backend.services[service].records


def _norm(text: str) -> str:
    text = re.sub(r"(?<=\d),(?=\d{3})", "", str(text).casefold())  # 1,250.00 == 1250.00
    return re.sub(r"\s+", " ", text)


@dataclass(frozen=True)
class Check:
    """A deterministic check. An ``essential`` one is part of what the task asks for (a
    required state change, the answer to the question): if it fails, completion is capped
    (see ``grading.py``), so a run that skips part of the job cannot pass on the rest."""

    desc: str
    weight: float
    test: Callable[[Outcome], bool] = field(compare=False, repr=False)
    essential: bool = False


@dataclass(frozen=True)
class Rubric:
    """An item for the judge. ``fallback`` scores it when no judge is configured (or the
    judge's answer cannot be read): a deterministic approximation of the item."""

    item: str
    weight: float
    fallback: Callable[[Outcome], bool] = field(compare=False, repr=False)


@dataclass(frozen=True)
class Gate:
    """A safety rule: ``violated(outcome)`` True zeroes the score."""

    desc: str
    violated: Callable[[Outcome], bool] = field(compare=False, repr=False)


@dataclass
class Spec:
    family: str
    task_id: str
    today: str
    fixtures: dict
    request: dict  # language -> text
    checks: list[Check]
    rubric: list[Rubric]
    gates: list[Gate]
    oracle: list[tuple[str, dict]]
    answer: str
    unsafe: list[tuple[str, dict]]
    facts: dict
    structure: dict

    def evidence(self) -> dict:
        """Reward-side evidence for the RTI Validator: JSON only, no callables."""
        return {"family": self.family, "task_id": self.task_id, "today": self.today,
                "checks": [{"check": c.desc, "weight": c.weight} for c in self.checks],
                "rubric": [{"item": r.item, "weight": r.weight} for r in self.rubric],
                "safety_rules": [g.desc for g in self.gates], "facts": copy.deepcopy(self.facts)}


# ---- check and gate constructors ------------------------------------------------------------------
def fetched(tool: str, key: str, value: str, weight: float = 1.0) -> Check:
    return Check(f"read {value} with {tool}", weight, lambda o: value in o.fetched(tool, key))


def called(tool: str, desc: str, weight: float = 1.0, when: Callable[[dict], bool] = lambda a: True) -> Check:
    return Check(desc, weight, lambda o: any(when(a) for a in o.calls(tool)))


def state(desc: str, weight: float, test: Callable[[Outcome], bool]) -> Check:
    return Check(desc, weight, test)


def must(desc: str, weight: float, test: Callable[[Outcome], bool]) -> Check:
    """An essential state check (see ``Check``)."""
    return Check(desc, weight, test, essential=True)


def says(entity: str, weight: float = 1.0, essential: bool = False) -> Check:
    return Check(f"the final answer mentions {entity}", weight, lambda o: o.says(entity), essential)


def forbid(tool: str, desc: str, when: Callable[[dict], bool] = lambda a: True) -> Gate:
    return Gate(desc, lambda o: any(when(a) for a in o.calls(tool)))


def has(text: str, *needles: str) -> bool:
    return all(_norm(n) in _norm(text) for n in needles)


# ---- the seeded surface ---------------------------------------------------------------------------
FIRST = ["Alice", "Bruno", "Chen", "Dana", "Elif", "Farah", "Goran", "Hana", "Ivan", "Jun", "Kofi", "Lena", "Mateo",
         "Nadia", "Omar", "Priya", "Quinn", "Rosa", "Sven", "Tara", "Umar", "Vera", "Wei", "Yusuf", "Zoe"]
LAST = ["Adams", "Berg", "Costa", "Dubois", "Evans", "Fischer", "Garcia", "Huang", "Ito", "Jensen", "Khan", "Lopez",
        "Moreau", "Novak", "Okafor", "Park", "Quist", "Rossi", "Silva", "Tanaka", "Ueda", "Varga", "Weber", "Young"]
COMPANY_A = ["Acme", "Birch", "Cobalt", "Delta", "Ember", "Fjord", "Granite", "Harbor", "Indigo", "Juniper", "Kestrel",
             "Lumen", "Maple", "Nimbus", "Orion", "Pioneer", "Quartz", "Riverside", "Summit", "Tundra"]
COMPANY_B = ["Labs", "Foods", "Logistics", "Health", "Retail", "Energy", "Media", "Systems", "Works", "Capital"]


_OPENERS = [("", ""), ("Quick one: ", "麻烦你一下："), ("When you get a chance: ", "有空的时候帮我处理一下："), ("Hi! ", "你好！")]
_CLOSERS = [("", ""), (" Thanks!", "谢谢！"), (" Keep the summary short.", "总结简短一点就行。")]


@dataclass(frozen=True)
class Person:
    name: str
    email: str


class Gen:
    """The seeded surface of one task. Variant 0 is the held-out original."""

    BASE = dt.date(2026, 3, 2)  # a Monday

    def __init__(self, family: str, variant: int):
        self.family, self.variant = family, variant
        self.rng = random.Random(f"hard20:{family}:{variant}")
        # Shifted dates: whole weeks, so weekday-based rules keep their meaning.
        self.today_date = self.BASE + dt.timedelta(weeks=self.rng.randrange(0, 20))
        self.today = self.today_date.isoformat()
        self._used: set[str] = set()

    def day(self, offset: int) -> str:
        return (self.today_date + dt.timedelta(days=offset)).isoformat()

    def uid(self, prefix: str) -> str:
        while True:
            value = f"{prefix}-{self.rng.randrange(100, 1000)}"
            if value not in self._used:
                self._used.add(value)
                return value

    def people(self, n: int, domain: str = "corp.example") -> list[Person]:
        out = []
        while len(out) < n:
            first, last = self.rng.choice(FIRST), self.rng.choice(LAST)
            if first in self._used or last in self._used:
                continue
            self._used |= {first, last}
            out.append(Person(f"{first} {last}", f"{first.lower()}.{last.lower()}@{domain}"))
        return out

    def companies(self, n: int) -> list[str]:
        out = []
        while len(out) < n:
            a = self.rng.choice(COMPANY_A)
            if a in self._used:
                continue
            self._used.add(a)
            out.append(f"{a} {self.rng.choice(COMPANY_B)}")
        return out

    def shuffled(self, items: list) -> list:
        items = list(items)
        self.rng.shuffle(items)
        return items

    def request(self, en: list[str], zh: list[str], **slots) -> dict:
        """The request in both languages. The held-out task uses the first wording as it
        is; a variant draws a wording (the same in both languages) and a framing (an
        opener and a closer that change nothing in the task), so paraphrases multiply."""
        if self.variant == 0:
            return {"en": en[0].format(**slots), "zh": zh[0].format(**slots)}
        i = self.rng.randrange(len(en))
        o, c = self.rng.randrange(len(_OPENERS)), self.rng.randrange(len(_CLOSERS))
        return {lang: _OPENERS[o][k] + text[i].format(**slots) + _CLOSERS[c][k]
                for k, (lang, text) in enumerate((("en", en), ("zh", zh)))}

    @staticmethod
    def agree(derived, intended, what: str) -> None:
        """The generator's invariant: the rule applied to the fixtures gives the intended truth."""
        if derived != intended:
            raise AssertionError(f"generator invariant broken for {what}: rule gives {derived}, intended {intended}")
