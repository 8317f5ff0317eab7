"""What the intervention reads from an environment, checked on every built-in env.

``envs`` stands alone (it never imports the policy or the training code), and each
built-in env's reward breakdown carries the one partial-progress key RTI ranks failed
episodes by: ``progress``, a float in [0, 1].
"""

import ast
from pathlib import Path

import pytest

import envs
from envs.base import play
from envs.navigation import NavigationEnv
from envs.navigation.rules import NavigationRules
from tests.unit.test_tau2_env import DATA_DIR as TAU2_DATA_DIR
from tests.unit.test_tau2_env import gold_turns

ENVS_DIR = Path(envs.__file__).resolve().parent
FORBIDDEN = ("rti_actors", "policies")


def _imported_modules(tree: ast.AST):
    for node in ast.walk(tree):  # function-level (lazy) imports count too
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module


def test_envs_imports_nothing_from_the_policy_or_the_training_code():
    offending = []
    for path in sorted(ENVS_DIR.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        offending += [f"{path.relative_to(ENVS_DIR)}: {name}" for name in _imported_modules(tree)
                      if name.split(".")[0] in FORBIDDEN]
    assert offending == []


def _progress(info: dict) -> float:
    value = info["reward_breakdown"]["progress"]
    assert isinstance(value, float) and 0.0 <= value <= 1.0, value
    return value


class Scripted:
    """An agent that plays fixed turns, then replies."""

    def __init__(self, turns, last="Done."):
        self.turns, self.last = list(turns), last

    def act(self, observation):
        return self.turns.pop(0) if self.turns else self.last


def test_navigation_progress():
    env = NavigationEnv({"split": "test"})
    reward, info = play(env, lambda e: e.oracle_agent(), "nav-test-0003")
    assert reward == 1.0 and _progress(info) == 1.0
    reward, info = play(env, Scripted([]), "nav-test-0003")  # answered without a route
    assert reward == 0.0 and _progress(info) == 0.0
    assert env.rti_rules().__class__ is NavigationRules


def test_hard20_progress():
    env = envs.make_env("Hard20-v0", {"split": "test"})
    reward, solved = play(env, lambda e: e.oracle_agent(), "hard20-inbox_triage")
    reward_failed, failed = play(env, Scripted([]), "hard20-inbox_triage")
    assert reward == 1.0 and reward_failed == 0.0
    assert _progress(failed) < _progress(solved)
    assert env.rti_rules() is None


@pytest.mark.skipif(not (TAU2_DATA_DIR / "domains").is_dir(), reason=f"τ² data not found at {TAU2_DATA_DIR}")
@pytest.mark.filterwarnings("ignore:τ² env uses the scripted user")
def test_tau2_progress():
    env = envs.make_env("Tau2Airline-v0", {"data_dir": str(TAU2_DATA_DIR), "split": "base"})
    turns = gold_turns(env, "8")  # lookups, then one booking
    reward, info = play(env, Scripted(turns, turns[-1]), "8")
    assert reward == 1.0 and _progress(info) == 1.0
    book = next(i for i, t in enumerate(turns) if '"book_reservation"' in t)
    skipped = turns[:book] + turns[book + 1:]
    reward, info = play(env, Scripted(skipped, skipped[-1]), "8")
    assert reward == 0.0 and _progress(info) < 1.0
    capped = envs.make_env("Tau2Airline-v0", {"data_dir": str(TAU2_DATA_DIR), "split": "base", "max_turns": 1})
    reward, info = play(capped, Scripted(turns), "8")  # cut off by the turn cap: gated
    assert reward == 0.0 and _progress(info) == 0.0
