"""The generated company directory and the chained-lookup questions asked about it.

A world is a deterministic function of its seed: ``NUM_PEOPLE`` records, each with an id,
a name, two attributes (``city``, ``team``) and two links to other people (``manager``,
``mentor``). A question of tier k names a start person and k - 1 links to follow, and asks
for one attribute of the person reached: answering it takes exactly k ``get_person`` calls,
each id read from the previous record, and then a reply naming the value.

Splits are by start person: a test question never starts from a person any training
question starts from, so a policy cannot pass the test split by remembering training
chains. The people reached along a chain are shared (it is one company).
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass

NUM_PEOPLE = 300
TIERS = (1, 2, 3, 4)
LINKS = ("manager", "mentor")
ATTRIBUTES = {
    "city": ("Lyon", "Oslo", "Porto", "Quito", "Dakar", "Perth", "Hanoi", "Tulsa", "Cusco", "Bergen", "Malmo", "Leeds"),
    "team": ("Billing", "Support", "Legal", "Design", "Sales", "Security", "Research", "Payroll"),
}
_FIRST = ("Ada", "Ben", "Cleo", "Dev", "Eli", "Fay", "Gus", "Hana", "Ivo", "Jun", "Kai", "Lea", "Milo", "Nia",
          "Omar", "Pia", "Raj", "Sol", "Tess", "Uma", "Vik", "Wren", "Yara", "Zoe")
_LAST = ("Moss", "Reed", "Stone", "Hale", "Park", "Frost", "Lund", "Vale", "Cole", "Dunn", "Berg", "Shaw",
         "Kerr", "Lowe", "Nash", "Pike")
TEST_SHARE = 0.2  # of start people, held out for the test split
TOOL = "get_person"


def subject(start: str, links) -> str:
    """'the mentor of the manager of P123': the person reached from ``start`` by ``links``."""
    for link in links:
        start = f"the {link} of {start}"
    return start


@dataclass(frozen=True)
class Question:
    """One task: follow ``links`` from ``start`` and report ``attribute`` of the person reached."""

    task_id: str
    tier: int
    start: str
    links: tuple[str, ...]
    attribute: str
    chain: tuple[str, ...]   # the ids to look up, in order (start first); len == tier
    answer: str

    def text(self) -> str:
        """'What is the team of the mentor of the manager of P123?'"""
        return f"What is the {self.attribute} of {subject(self.start, self.links)}?"


class World:
    def __init__(self, seed: int = 0):
        rng = random.Random(f"lookup-world-{seed}")
        ids = [f"P{n:03d}" for n in rng.sample(range(100, 1000), NUM_PEOPLE)]
        self.people: dict[str, dict] = {}
        for pid in ids:
            others = [o for o in ids if o != pid]
            self.people[pid] = {
                "id": pid, "name": f"{rng.choice(_FIRST)} {rng.choice(_LAST)}",
                "city": rng.choice(ATTRIBUTES["city"]), "team": rng.choice(ATTRIBUTES["team"]),
                "manager": rng.choice(others), "mentor": rng.choice(others),
            }
        starts = list(ids)
        rng.shuffle(starts)
        n_test = int(len(starts) * TEST_SHARE)
        self.starts = {"test": sorted(starts[:n_test]), "train": sorted(starts[n_test:])}
        self.questions: dict[str, Question] = {}
        self.ids: dict[str, list[str]] = {"train": [], "test": []}
        for split, people in self.starts.items():
            for tier in TIERS:
                for start in people:
                    question = self._question(rng, f"lookup-t{tier}-{split}-{start}", tier, start)
                    if question is not None:
                        self.questions[question.task_id] = question
                        self.ids[split].append(question.task_id)

    def _question(self, rng: random.Random, task_id: str, tier: int, start: str) -> Question | None:
        """A question whose chain visits ``tier`` different people (a chain that comes back
        to someone already visited is redrawn a few times, then skipped)."""
        for _ in range(8):
            links = tuple(rng.choice(LINKS) for _ in range(tier - 1))
            chain = [start]
            for link in links:
                chain.append(self.people[chain[-1]][link])
            if len(set(chain)) == len(chain):
                attribute = rng.choice(sorted(ATTRIBUTES))
                return Question(task_id, tier, start, links, attribute, tuple(chain),
                                self.people[chain[-1]][attribute])
        return None

    def record(self, pid: str) -> dict | None:
        return self.people.get(pid)


@functools.lru_cache(maxsize=4)
def build_world(seed: int = 0) -> World:
    return World(seed)
