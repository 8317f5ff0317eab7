"""The records that cross the actor graph: what to play, what was played, what is learned.

    EpisodeSpec   driver -> env runner      which task, which sample of its group, which seed
    Trajectory    env runner -> driver      one played episode: tokens, reward, text, RTI fields
    LearnerSample driver -> replay -> learner   the token arrays and the advantage, nothing else

An env runner makes every ``Trajectory`` in one place (``Episode.result``). The driver groups
them, the intervention adds rescued ones, and the learner's part is cut out of each
(``learner_sample``) *before* the replay queue, so messages, tool schemas and reward
evidence never travel to the learner. See docs/ARCHITECTURE.md for the data flow.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields


@dataclass(frozen=True)
class EpisodeSpec:
    """One episode to play. ``round`` and ``seed`` make its sampling seeds (``request_seed``),
    so the same spec samples the same tokens on whichever runner it lands."""

    task_id: str
    sample_index: int = 0
    seed: int = 0
    round: int | str = 0
    split: str = "train"


@dataclass
class Trajectory:
    """One episode, as the driver, the intervention and the metrics see it.

    Token arrays are aligned with ``ids``: ``loss_mask`` is 1 on policy-generated tokens,
    ``logprobs`` are their behaviour log-probs (0 elsewhere), ``token_weight`` is 1 except on
    the tokens an intervention introduced. ``turn_spans[k]`` is the [start, end) of the
    ids generated at assistant turn k and ``actions[k]`` its text. ``messages`` are the
    OpenAI-style messages the policy saw (context and worked example included).
    """

    # identity (from the EpisodeSpec)
    task_id: str
    sample_index: int
    seed: int = 0
    round: int | str = 0
    split: str = "train"
    # tokens: one append-only buffer
    ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    token_weight: list[float] = field(default_factory=list)
    turn_spans: list[tuple[int, int]] = field(default_factory=list)
    turn_versions: list[int] = field(default_factory=list)  # the engine's weights version per turn
    policy_version: int = -1  # the oldest of them: what the staleness bound looks at
    # outcome
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    context_truncated: bool = False  # the context filled up: the episode was cut, not finished
    info: dict = field(default_factory=dict)  # the env's final info (reward_breakdown inside)
    # the environment failed (not the agent): never scored, never grouped, never an RTI trigger
    infra_error: str = ""
    infra_retries: int = 0              # fresh-env replays it took (or used up)
    # agent mode: why the agent's prompt stopped extending the recorded tokens ("" if it never
    # did); the ids are the record up to there. ``dropped``: left out of its group for it
    prefix_break: str = ""
    dropped: bool = False
    # text
    actions: list[str] = field(default_factory=list)
    messages: list[dict] = field(default_factory=list)
    tools: list[dict] = field(default_factory=list)
    seconds: float = 0.0
    drift: dict | None = None  # renderer drift check (debugging(check_drift=True))
    # set by the driver
    advantage: float = 0.0
    # OPD: one advantage per token, aligned with ids (0 off the loss mask); None: ``advantage``
    # applies to every loss token
    token_advantages: list[float] | None = None
    # LUFFY: a teacher's trace in the group (not sampled by the policy; no behaviour log-probs)
    off_policy: bool = False
    # AEPO: set on a branch, a trajectory continued from another's tool-call step (rti_actors.aepo)
    branch_of: int | None = None        # sample_index of the trajectory it shares its prefix with
    branch_step: int | None = None      # the tool-call turn after which it samples its own turns
    # RTI: set on a trajectory continued from a corrected step
    intervened: bool = False
    group: int | None = None            # index of its group in the iteration
    source_index: int | None = None     # sample_index of the failed trajectory it was fixed from
    intervened_step: int | None = None  # the assistant turn that was rewritten
    corrected_span: tuple[int, int] | None = None  # [start, end) of the rewrite's ids
    gate_ppl: float | None = None       # perplexity of the rewrite under the behaviour policy
    depth: int | None = None            # 0: first fix; 1: a second fix on a rescued trajectory
    diagnosis: str = ""                 # the Validator's diagnosis of the rewritten step
    weight_stats: dict = field(default_factory=dict)

    @property
    def num_turns(self) -> int:
        return len(self.actions)

    @property
    def gen_tokens(self) -> int:
        return sum(self.loss_mask)

    @property
    def reward_breakdown(self) -> dict:
        return self.info.get("reward_breakdown") or {}

    @property
    def progress(self) -> float:
        """Partial progress in [0, 1], from the env's ``reward_breakdown["progress"]``."""
        p = self.reward_breakdown.get("progress")
        return float(p) if isinstance(p, (int, float)) else 0.0


@dataclass
class LearnerSample:
    """One trajectory as the learner trains on it, and all the replay queue carries.

    ``ids`` is the whole token sequence (prompt, completions, tool results); ``loss_mask`` is 1
    only on policy-generated tokens (never on the first); ``behaviour_logprobs`` are the
    engine's log-probs of those tokens at the rollout temperature (0 off the mask);
    ``token_weight`` scales each token's advantage (1 except for RTI's reweighted tokens);
    ``advantage`` is the trajectory's group-normalised advantage; ``policy_version`` is the
    weights version that sampled it (bookkeeping the loss never reads); ``off_policy`` marks
    a teacher's trace (LUFFY), whose tokens the learner trains with the shaped objective
    instead of the clipped ratio; ``token_advantages`` (OPD), when not None, is one advantage
    per id and replaces ``advantage`` token by token.
    """

    ids: list[int]
    loss_mask: list[int]
    behaviour_logprobs: list[float]
    token_weight: list[float]
    advantage: float
    policy_version: int = 0
    off_policy: bool = False
    token_advantages: list[float] | None = None

    @classmethod
    def of(cls, s) -> LearnerSample:
        """``s`` itself, or the sample a mapping with these keys describes (extra keys, such
        as a demonstration's messages, are left out)."""
        if isinstance(s, cls):
            return s
        required = [f.name for f in fields(cls) if f.default is MISSING]
        missing = [k for k in required if k not in s]
        if missing:
            raise ValueError(f"lacks {missing}; a sample needs {required}")
        return cls(**{f.name: s[f.name] for f in fields(cls) if f.name in s})


def learner_sample(t: Trajectory) -> LearnerSample:
    return LearnerSample(ids=t.ids, loss_mask=t.loss_mask, behaviour_logprobs=t.logprobs,
                         token_weight=t.token_weight, advantage=t.advantage, policy_version=t.policy_version,
                         off_policy=t.off_policy, token_advantages=t.token_advantages)
