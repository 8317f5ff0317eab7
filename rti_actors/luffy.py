"""LUFFY's teacher traces: successful episodes of a teacher that join each group (off-policy).

A teacher trace is a ``Trajectory`` with ``off_policy=True``, made from a demonstration record
(``rti_actors.demonstrations``) by the same ``to_sample`` the warm start uses, so its ids are
what the policy's renderer makes of the messages and its loss mask covers the teacher's
assistant turns only. Two sources (``luffy(source=...)``):

    "oracle"     the env's scripted ``oracle_agent``, played on an env runner
                 (``EnvRunner.teacher_traces``, within ``luffy(max_turns)``) and rendered there
    <a path>     a demonstrations JSONL; records below ``luffy(min_reward)`` are dropped

Each group gets ``traces_per_group`` of them in place of as many on-policy samples (LUFFY
mixes 1 teacher trace with 7 rollouts in a group of 8); advantages are then computed over
the mixed group and the learner trains the teacher's tokens with the shaped objective
(``rti_actors.losses.luffy_loss``). docs/ALGORITHM.md describes the algorithm.
"""

from __future__ import annotations

from pathlib import Path

from envs.base import ToolEnv, play
from rti_actors.algorithms import get_algorithm
from rti_actors.demonstrations import read_jsonl, to_sample
from rti_actors.failover import as_members
from rti_actors.options import ConfigError
from rti_actors.trajectory import EpisodeSpec, Trajectory


def on_policy_count(config) -> int:
    """How many of a group's ``group_size`` samples the policy plays (its algorithm's say)."""
    return get_algorithm(config["training"]["algorithm"]).episodes_per_task(config)


def has_oracle(env) -> bool:
    """Whether ``env`` overrides ``ToolEnv.oracle_agent`` (a scripted solver)."""
    return type(env.unwrapped).oracle_agent is not ToolEnv.oracle_agent


def teacher_trajectory(renderer, record: dict, spec: EpisodeSpec, version: int) -> Trajectory:
    """A demonstration record as a teacher trace of ``spec``'s group: rendered by
    ``to_sample`` (loss mask on the assistant turns, behaviour log-probs 0: the learner never
    reads them for a teacher's tokens)."""
    sample = to_sample(renderer, record)
    assistant = [m for m in record["messages"][_context_length(record):] if m["role"] == "assistant"]
    return Trajectory(task_id=spec.task_id, sample_index=spec.sample_index, seed=spec.seed, round=spec.round,
                      split=spec.split, ids=sample["ids"], loss_mask=sample["loss_mask"],
                      logprobs=sample["behaviour_logprobs"], token_weight=sample["token_weight"],
                      policy_version=version, reward=float(record.get("reward") or 0.0), terminated=True,
                      actions=[renderer.assistant_text(m) for m in assistant], messages=sample["messages"],
                      tools=record.get("tools") or [], off_policy=True)


def _context_length(record: dict) -> int:
    # the record's context messages (a worked example's assistant turn is not the teacher's)
    k = record.get("num_context_messages")
    return k if k is not None else next(i for i, m in enumerate(record["messages"]) if m["role"] == "assistant")


def oracle_record(env, task_id: str, split: str) -> dict:
    """Play the env's oracle on ``task_id`` and return the episode as a demonstration record."""
    e = env.unwrapped
    e.config["split"] = split
    reward, _ = play(env, lambda u: u.oracle_agent(), task_id)
    return {"task_id": task_id, "env": type(e).__name__, "split": split, "messages": e.messages,
            "tools": e.tool_schemas(), "demonstration": list(e.task.demonstration), "reward": reward,
            "source": "oracle", "num_context_messages": None}


class Teacher:
    """The driver's handle on the teacher: ``traces(specs, version)`` returns the teacher
    traces for the tasks of an iteration's on-policy specs, and counts for the metrics.

    Stateless across iterations (a JSONL task with several records takes them in turn by
    the round number), so a restored run needs nothing saved for it."""

    def __init__(self, config, runners: list, renderer):
        te = config["luffy"]
        self.k, self.min_reward, self.source = te["traces_per_group"], te["min_reward"], te["source"]
        self.max_turns = te["max_turns"]
        self.max_len = config["policy"]["max_model_len"]
        self.on_policy = on_policy_count(config)
        self.runners, self.renderer = runners, renderer
        self.records: dict[str, list[dict]] | None = None
        if self.source != "oracle":
            try:
                records = read_jsonl(Path(self.source).expanduser(), self.min_reward)
            except (OSError, ValueError) as e:
                raise ConfigError(f"luffy(source={str(self.source)!r}): {e}") from None
            if not records:
                raise ConfigError(f"luffy(source={str(self.source)!r}) has no demonstration with reward >= "
                                  f"luffy(min_reward={self.min_reward}): lower min_reward or record successful ones")
            self.records = {}
            for r in records:
                self.records.setdefault(r.get("task_id"), []).append(r)

    def specs(self, on_policy: list[EpisodeSpec]) -> list[EpisodeSpec]:
        """The teacher's places: ``k`` per task, numbered after its on-policy samples."""
        tasks = {s.task_id: s for s in on_policy}
        return [EpisodeSpec(s.task_id, self.on_policy + j, s.seed, s.round, s.split)
                for s in tasks.values() for j in range(self.k)]

    def traces(self, on_policy: list[EpisodeSpec], version: int) -> tuple[list[Trajectory], dict]:
        specs = self.specs(on_policy)
        if self.records is None:  # the oracle is scripted: any live runner plays a spec alike
            made = as_members(self.runners, "env runner").spread("teacher_traces", specs, version, self.max_turns)
        else:
            made = []
            for s in specs:
                records = self.records.get(s.task_id)
                if records:
                    pick = records[(_round_number(s.round) * self.k + s.sample_index - self.on_policy) % len(records)]
                    made.append(teacher_trajectory(self.renderer, pick, s, version))
        # a failed oracle episode is no guidance, and a trace past the context the policy
        # could never have produced: both are left out of their group
        kept = [t for t in made if t.reward >= self.min_reward and len(t.ids) <= self.max_len]
        return kept, {"luffy/teacher_traces": len(kept), "luffy/teacher_missing": len(specs) - len(kept),
                      "luffy/teacher_tokens": int(sum(t.gen_tokens for t in kept))}


def _round_number(round_) -> int:
    return round_ if isinstance(round_, int) else 0


def teacher_metrics(groups: list[list[Trajectory]]) -> dict:
    """Groups whose on-policy samples all failed, and how many of them a teacher trace made
    learnable (the signal LUFFY adds where GRPO has none)."""
    failed = [g for g in groups if max((t.reward for t in g if not t.off_policy), default=0.0) <= 0]
    rescued = [g for g in failed if any(t.off_policy and t.reward > 0 for t in g)]
    return {"luffy/on_policy_all_fail_groups": len(failed), "luffy/groups_given_signal": len(rescued)}
