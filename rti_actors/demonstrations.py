"""Demonstration trajectories for a supervised warm start (SFT before RL).

A demonstration is one JSON object per line:

    {"task_id": "nav-train-0003", "env": "Navigation-v0", "split": "train",
     "messages": [{"role": "system", ...}, {"role": "user", ...},
                  {"role": "assistant", "content": "", "tool_calls": [{"name": ..., "arguments": {...}}]},
                  {"role": "tool", "name": ..., "content": ...}, ..., {"role": "assistant", "content": "..."}],
     "tools": [<OpenAI function schemas>], "demonstration": [<the env's worked example>],
     "reward": 1.0, "source": "oracle", "num_context_messages": null}

``messages`` are what the environment recorded; ``tools`` and ``demonstration`` are the
context the policy's renderer adds to them (``ChatRenderer.begin``), so a demonstration is
tokenised exactly as a rollout of the same task would be. Records of the library's own
rollouts keep the messages as the policy saw them (the schemas and worked example already
inside) and leave ``tools`` and ``demonstration`` empty, with ``num_context_messages``
saying how many leading messages are context (the worked example holds an assistant turn
that is not the policy's); records from elsewhere (a stronger model's logs) give plain
chat messages and their tool schemas. Without ``num_context_messages`` the context is
everything before the first assistant turn.

Sources: ``record_agent`` plays any scripted agent (``env.oracle_agent()`` by default) on a
list of tasks; ``from_trajectory`` turns rollouts (``Algorithm.evaluate(record_path=...)``)
into records; any JSONL in this format from elsewhere. ``to_sample`` makes the learner's
sample: the assistant turns (and the end-of-turn token that closes each) carry the loss,
everything else (system, user, tool results, template glue) is context with mask 0.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from envs.base import play
from envs.registry import make_env
from envs.transcript import own_turn_positions

FIELDS = ("task_id", "env", "split", "messages", "tools", "demonstration", "reward", "source", "num_context_messages")


def record_agent(env_id, env_config: dict | None, task_ids: list[str], agent=None, split: str = "train",
                 source: str = "oracle") -> list[dict]:
    """Play ``agent`` (``env -> object with act(observation)``; default: the env's oracle)
    on each task and return one record per episode, with its reward."""
    env = make_env(env_id, {**(env_config or {}), "split": split}) if isinstance(env_id, str) else env_id(
        {**(env_config or {}), "split": split})
    agent = agent or (lambda e: e.oracle_agent())
    name = env_id if isinstance(env_id, str) else getattr(env_id, "__name__", "custom")
    records = []
    for task_id in task_ids:
        reward, _ = play(env, agent, task_id)
        e = env.unwrapped
        records.append({"task_id": task_id, "env": name, "split": split, "messages": e.messages,
                        "tools": e.tool_schemas(), "demonstration": list(e.task.demonstration),
                        "reward": reward, "source": source, "num_context_messages": None})
    return records


def from_trajectory(trajectory, env: str, source: str = "policy") -> dict:
    """A rollout of the library (an env runner's ``Trajectory``) as a record."""
    messages = trajectory.messages
    own = own_turn_positions(messages, trajectory.num_turns)
    context = own[0] if own else len(messages)
    return {"task_id": trajectory.task_id, "env": env, "split": trajectory.split,
            "messages": messages, "tools": [], "demonstration": [], "reward": float(trajectory.reward),
            "source": source, "num_context_messages": context}


def write_jsonl(path: str | Path, records: list[dict], append: bool = False) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a" if append else "w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps({k: r.get(k) for k in FIELDS}, ensure_ascii=False) + "\n")
    return path


def outcomes_by_task(path: str | Path) -> dict[str, list[bool]]:
    """Each task's successes (reward >= 1), in order, from a JSONL of recorded rollouts
    (``Algorithm.evaluate(record_path=...)``): what intervals over tasks are computed from."""
    per_task: dict[str, list[bool]] = {}
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.strip():
            r = json.loads(line)
            per_task.setdefault(r["task_id"], []).append(r["reward"] >= 1.0)
    return per_task


def read_jsonl(path: str | Path, min_reward: float | None = None) -> list[dict]:
    """Records of a JSONL file; with ``min_reward``, only those that reached it. A bad line
    raises ``ValueError`` naming the file and its 1-based line number."""
    records = []
    with Path(path).open("rb") as f:  # decoded line by line, so that bad bytes have a line number
        for n, raw in enumerate(f, 1):
            where = f"{path}:{n}"
            try:
                line = raw.decode("utf-8-sig" if n == 1 else "utf-8")
            except UnicodeDecodeError as e:
                raise ValueError(f"{where}: not valid UTF-8 (byte {e.start} of the line); save the file as "
                                 "UTF-8") from None
            if not line.strip():
                continue
            try:
                r = json.loads(line)
            except (ValueError, RecursionError) as e:  # JSONDecodeError, and ints past Python's digit limit
                raise ValueError(f"{where}: not valid JSON ({e}); each line must be one JSON object") from None
            check_record(r, where)
            records.append(r)
    return reaching(records, min_reward)


def reaching(records: list[dict], min_reward: float | None) -> list[dict]:
    """The records whose reward is at least ``min_reward`` (all of them for None); a record
    without a reward counts as 0. Records given as a list are checked here, like a file's."""
    for i, r in enumerate(records):
        check_record(r, f"demonstration {i}")
    return [r for r in records if min_reward is None or (r.get("reward") or 0.0) >= min_reward]


ROLES = ("system", "user", "assistant", "tool")


def check_record(r: dict, where: str = "record") -> None:
    """Raise ``ValueError`` (prefixed with ``where``) saying what is wrong with a record."""
    if not isinstance(r, dict):
        raise ValueError(f"{where}: a demonstration is a JSON object with a 'messages' list, got "
                         f"{type(r).__name__}")
    messages = r.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ValueError(f"{where}: a demonstration needs a non-empty 'messages' list")
    for i, m in enumerate(messages):
        _check_message(m, f"{where}: messages[{i}]")
    reward = r.get("reward")
    if reward is not None and not _finite(reward):
        raise ValueError(f"{where}: reward={reward!r:.40} must be a finite number (e.g. 1.0 for a success) or null")
    for key in ("tools", "demonstration"):
        if r.get(key) is not None and not isinstance(r[key], list):
            raise ValueError(f"{where}: '{key}' must be a list (or null), got {type(r[key]).__name__}")
    k = r.get("num_context_messages")
    if k is not None and (type(k) is not int or not 1 <= k < len(messages)):
        raise ValueError(f"{where}: num_context_messages={k!r:.40} must be null (the context is everything before "
                         f"the first assistant turn) or an integer from 1 to {len(messages) - 1}: how many leading "
                         "messages are context")
    k = _context_length(r)
    if not any(m["role"] == "assistant" for m in messages[k:]):
        raise ValueError(f"{where}: no assistant turn after the context, so nothing to learn from")
    if k == 0:
        raise ValueError(f"{where}: the first message is an assistant turn; it needs a prompt before it")


def _check_message(m, where: str) -> None:
    if not isinstance(m, dict) or m.get("role") not in ROLES:
        raise ValueError(f"{where}: every message needs a role of system/user/assistant/tool, got {m!r:.80}")
    for key in ("content", "reasoning_content"):
        if m.get(key) is not None and not isinstance(m[key], str):
            raise ValueError(f"{where}: '{key}' must be a string (or null), got {type(m[key]).__name__}; "
                             "write the text as one string")
    calls = m.get("tool_calls")
    if calls is None:
        return
    if not isinstance(calls, list):
        raise ValueError(f"{where}: 'tool_calls' must be a list, got {type(calls).__name__}")
    for j, call in enumerate(calls):
        if not (isinstance(call, dict) and isinstance(call.get("name"), str) and call["name"]
                and isinstance(call.get("arguments", {}), dict)):
            raise ValueError(f"{where}: tool_calls[{j}] must be {{\"name\": <non-empty string>, \"arguments\": "
                             f"{{...}}}}, got {call!r:.80}")


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _context_length(r: dict) -> int:
    k = r.get("num_context_messages")
    if k is None:
        return next((i for i, m in enumerate(r["messages"]) if m["role"] == "assistant"), len(r["messages"]))
    return k


def to_sample(renderer, record: dict) -> dict:
    """Token ids and loss mask of a record, built as an env runner builds a rollout: the
    opening messages through ``begin`` (schemas, worked example), then per assistant turn
    the generation prompt (context), the turn's text and end-of-turn token (trained), the
    template glue (context), and the following messages (context)."""
    check_record(record)
    messages = record["messages"]
    first = _context_length(record)
    seen, buf = renderer.begin(messages[:first], record.get("tools") or None, record.get("demonstration") or None)
    i = first
    while i < len(messages):
        m = messages[i]
        if m["role"] == "assistant":
            buf.append_context(renderer.generation_prompt_ids(seen))
            # the turn as this model family writes it (its tool-call syntax, its reasoning block)
            ids = renderer.tokenizer.encode(renderer.assistant_text(m), add_special_tokens=False) + [renderer.eos_id]
            buf.append_generated(ids, [0.0] * len(ids))
            buf.append_context(renderer.close_assistant_ids(ids))
            seen.append({k: m[k] for k in ("role", "content", "tool_calls", "reasoning_content") if k in m})
            i += 1
        else:
            j = i
            while j < len(messages) and messages[j]["role"] != "assistant":
                j += 1
            buf.append_context(renderer.messages_ids(seen, messages[i:j]))
            seen += messages[i:j]
            i = j
    return {"ids": buf.ids, "loss_mask": buf.loss_mask, "behaviour_logprobs": buf.logprobs,
            "token_weight": buf.token_weight, "advantage": 0.0, "messages": seen}
