"""What the intervention's stages pass to the roles and to each other.

A ``Candidate`` is one failed trajectory going through the pipeline; each stage fills in
its part (the Validator its ``step`` and ``verdict``, the Corrector its ``attempts``, the
gate each attempt's scores and the candidate's ``best``) or drops it. The queries are what
a role provider sees: the episode's text, never its tokens, and the reward evidence where a
role judges against it (Validator, Verifier, the rule-based Corrector).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from envs.transcript import own_turn_positions
from rti_actors.trajectory import Trajectory


@dataclass(frozen=True)
class EpisodeText:
    """An episode as text: its messages, its own assistant turns, its tool schemas."""

    messages: list[dict]
    actions: list[str]
    tools: list[dict]
    language: str

    def history(self, k: int) -> list[dict]:
        """The messages before the episode's own assistant turn k."""
        return self.messages[:own_turn_positions(self.messages, len(self.actions))[k]]


@dataclass(frozen=True)
class ValidateQuery:
    """Find the first invalid step among the turns ``first_step`` .. ``first_step + max_steps - 1``."""

    episode: EpisodeText
    evidence: dict
    first_step: int = 0
    max_steps: int = 8


@dataclass(frozen=True)
class Finding:
    """The Validator's answer for one episode: the first invalid ``step`` and its verdict
    (None: none found), and how many step verdicts it judged and could not parse."""

    step: int | None = None
    verdict: dict | None = None
    judged: int = 0
    unparsable: int = 0


@dataclass(frozen=True)
class CorrectQuery:
    episode: EpisodeText
    evidence: dict
    step: int
    verdict: dict


@dataclass(frozen=True)
class VerifyQuery:
    history: list[dict]
    step: str        # the original turn
    corrected: str   # the Corrector's rewrite
    verdict: dict    # the Validator's, whole
    language: str
    evidence: dict   # the reward evidence, which V1 judges consistency against


@dataclass
class Attempt:
    """One Corrector rewrite of the step; ``ids`` are the policy-tokenizer ids to train,
    ending in eos. The Verifier and the gate fill in the rest."""

    text: str
    ids: list[int]
    complete: bool
    error: str = ""
    v2_problems: list[str] = field(default_factory=list)
    v1: bool = True
    v3: bool = True
    lp_h: list[float] = field(default_factory=list)  # log-probs in the original context h_k
    lp_c: list[float] = field(default_factory=list)  # log-probs in the guided context c_k
    ppl: float = math.inf
    gate_pass: bool = False


@dataclass
class Candidate:
    group: int                 # index of its group in the iteration
    traj: Trajectory
    episode: EpisodeText
    evidence: dict
    min_step: int = 0          # a second fix looks only after the first one
    replace_index: int | None = None  # a second fix replaces its first-fix trajectory
    source_index: int | None = None
    step: int | None = None
    verdict: dict | None = None
    attempts: list[Attempt] = field(default_factory=list)
    best: Attempt | None = None
