"""The base class for multi-turn tool environments.

A ``ToolEnv`` is a ``gymnasium.Env`` whose observations are lists of chat messages and
whose actions are assistant turns. Subclasses declare tools (name, description, JSON-schema
arguments, a Python callable) and implement four small hooks:

    task_ids(split)          -> list of task ids in a split
    load_task(task_id)       -> Task (system prompt, user request, tools)
    compute_reward()         -> (reward, breakdown) at the end of an episode; the breakdown
                                carries ``"progress"``, a float in [0, 1]
    reward_evidence()        -> privileged material for the RTI Validator (never observed)

and optionally:

    on_text_reply(content)   for environments in which a plain-text assistant turn does
                             not end the episode (e.g. a simulated user answers it)
    oracle_agent()           a scripted solver (its episodes are demonstrations for a
                             warm start)
    rti_rules()              a rule-based Validator/Corrector for RTI, or None (the
                             default): ``validate`` returns a ``RuleVerdict``, ``correct``
                             the fixed turn's text
    verifier_facts()         ``VerifierFacts``: what the Verifier's grounding checks must
                             know about this env's tool outputs

An episode is a deterministic function of its config, task id and assistant turns
(``self.actions``) unless the env says otherwise (an LLM user): replaying the turns on a
fresh ``reset`` reproduces it, which is how RTI continues an episode from a mid-episode
state.

Messages are OpenAI-style dicts: ``{"role": "system"|"user"|"assistant"|"tool",
"content": str}``; tool results carry ``"name"`` and ``"tool_call_id"``. The tool schemas
are in ``info["tools"]`` after ``reset``; the policy's chat renderer puts them into its
system prompt. No bad action raises out of ``step``: every one (unparsable call, unknown
tool, schema violation, oversized arguments, a tool that throws) becomes an error
observation the agent can read and recover from. What does raise is the environment's own
failure (``InfrastructureError``, or a bug in the env or its grader): the env runner then
retries the episode and never scores it.
"""

from __future__ import annotations

import copy
import functools
import json
import math
import reprlib
from dataclasses import dataclass, field
from typing import Any, Callable, TypedDict

import gymnasium as gym
import jsonschema

from envs.spaces import AssistantTurnSpace, MessageListSpace
from envs.tool_calls import parse_tool_calls, turn_from_dict


@dataclass(frozen=True)
class Tool:
    """A tool the agent may call: ``fn(**arguments) -> str | json-serialisable``."""

    name: str
    description: str
    parameters: dict
    fn: Callable[..., Any] = field(compare=False, repr=False)

    def schema(self) -> dict:
        """The OpenAI function-calling schema of this tool."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


@dataclass
class Task:
    """What ``reset`` needs to open an episode."""

    task_id: str
    system_prompt: str
    user_message: str
    tools: list[Tool]
    data: dict = field(default_factory=dict)  # env-specific payload (gold answer, fixtures, ...)
    # Optional worked example (user request + assistant turn with a tool call) on a fixed
    # input unrelated to the task; chat renderers show it to small models as context.
    demonstration: list[dict] = field(default_factory=list)


class RuleVerdict(TypedDict):
    """What a rule provider's ``validate(messages, actions, evidence)`` returns for the
    first derailing assistant turn of an episode (it returns None when there is none).
    ``messages`` is the episode's message list, ``actions`` its assistant turns as given to
    ``step`` and ``evidence`` is ``reward_evidence()``."""

    step: int                # 0-based index of the derailing turn among ``actions``
    is_valid: bool           # always False: a verdict names a wrong step
    error_types: list[str]   # machine-readable kinds, e.g. "wrong_waypoint"
    diagnosis: str           # what is wrong, in the request's language
    suggest_next: str        # what the turn should do instead, without the gold answer


class VerifierFacts(TypedDict):
    """What the Verifier's deterministic checks need to know about an env's tool outputs.

    A corrected step must not fake a tool result: a JSON object in its prose with one of
    ``tool_output_keys`` (keys only this env's results have), or two of
    ``tool_output_weak_keys`` (keys results share with ordinary data), is taken for one. A
    "lon,lat" pair it states is grounded if the history shows one within
    ``coordinate_tolerance_deg`` in both coordinates (0: only the same numbers)."""

    tool_output_keys: list[str]
    tool_output_weak_keys: list[str]
    coordinate_tolerance_deg: float


#: ``ToolEnv.verifier_facts()`` unless an env overrides it, for any env with JSON tool
#: outputs: no env-specific keys; as weak keys the envelope JSON APIs wrap results in (two
#: of them in prose look like a pasted response anywhere, one alone is ordinary); and no
#: coordinate tolerance, so only the same numbers ground a "lon,lat" pair.
DEFAULT_VERIFIER_FACTS: VerifierFacts = {
    "tool_output_keys": [],
    "tool_output_weak_keys": ["status", "info", "count", "data", "error", "errcode", "errmsg", "message"],
    "coordinate_tolerance_deg": 0.0,
}


class ToolError(Exception):
    """Raise inside a tool to return a clean error observation (no traceback)."""


class InfrastructureError(Exception):
    """Raise from a tool, a user simulator or a grader when the environment itself failed
    (a backend that is down, a judge that cannot be reached), not the agent. The episode is
    then no evidence about the policy: the env runner retries it on a fresh env and, if it
    keeps failing, leaves it out of its group instead of scoring it 0. Any other exception
    out of ``reset`` or ``step`` is treated the same way (it is the env's bug, not the
    agent's), while a bad tool call stays an error observation."""


@functools.lru_cache(maxsize=512)
def _schema_validator(schema_json: str):
    """A checked validator per distinct schema: ``jsonschema.validate`` re-checks the
    schema itself on every call, which costs milliseconds per tool call."""
    schema = json.loads(schema_json)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def finite_number(value) -> float | None:
    """``value`` as a float when it is a finite real number (bool, int, float, numpy scalar),
    else None: text, None and NaN/inf are not rewards."""
    if value is None or isinstance(value, (str, bytes)):
        return None
    try:
        x = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return x if math.isfinite(x) else None


def truncate_text(text: str, max_chars: int) -> str:
    """Keep head and tail of a long tool output, marking the cut."""
    if max_chars <= 0 or len(text) <= max_chars:
        return text
    marker = f"\n...[truncated {len(text) - max_chars} characters]...\n"
    keep = max(max_chars - len(marker), 0)
    head = keep // 2
    return text[:head] + marker + text[len(text) - (keep - head):]


class ToolEnv(gym.Env):
    """Multi-turn tool-use environment. See the module docstring for the contract."""

    metadata = {"render_modes": ["ansi"]}

    #: defaults every subclass accepts in ``env_config``
    DEFAULT_CONFIG: dict = {
        "split": "train",
        "max_turns": 30,  # assistant turns before truncation
        "max_tool_output_chars": 5000,
        "max_argument_chars": 4000,
        "max_tool_calls_per_turn": 8,
    }
    SPLITS: tuple[str, ...] = ("train", "test")

    def __init__(self, env_config: dict | None = None, render_mode: str | None = None):
        super().__init__()
        cfg = dict(self.DEFAULT_CONFIG)
        cfg.update(env_config or {})
        self.config = cfg
        if cfg["split"] not in self.SPLITS:
            raise ValueError(f"unknown split {cfg['split']!r} for {type(self).__name__}; valid splits: {list(self.SPLITS)}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']}, got {render_mode!r}")
        self.render_mode = render_mode
        self.observation_space = MessageListSpace()
        self.action_space = AssistantTurnSpace()
        self.task: Task | None = None
        self.messages: list[dict] = []
        self.turns = 0
        self.done = False
        self._tools: dict[str, Tool] = {}
        self._call_counter = 0
        self.actions: list = []  # the assistant turns of this episode: step()'s text, or a dict's checked turn

    # ---- hooks for subclasses ----------------------------------------------------------
    def task_ids(self, split: str) -> list[str]:
        raise NotImplementedError

    def load_task(self, task_id: str) -> Task:
        raise NotImplementedError

    def compute_reward(self) -> tuple[float, dict]:
        """(reward, breakdown) of the finished episode. The breakdown is free-form except
        for one key: ``breakdown["progress"]``, a float in [0, 1], the fraction of the task
        achieved (0 when nothing was, 1 when all of it was). RTI reads only this key to
        pick which failed episodes of a group to correct first: the closest ones."""
        raise NotImplementedError

    def reward_evidence(self) -> dict:
        """Privileged material for the Validator: gold parameters, rubric, expected state."""
        raise NotImplementedError

    def on_text_reply(self, content: str) -> tuple[list[dict], bool]:
        """A turn without tool calls: return (new messages, episode_over). Default: it is
        the final answer and the episode ends (the Claw-Eval / Navigation agent loop)."""
        return [], True

    def on_tool_results(self, calls: list[dict], results: list[dict]) -> list[dict]:
        """Extra messages after a turn's tool results (e.g. state syncs). Default: none."""
        return []

    def oracle_agent(self):
        """A scripted solver of the current task (call after ``reset``): an object whose
        ``act(observation) -> str`` returns the next assistant turn, in the text syntax a
        model writes, given the messages ``reset``/``step`` just returned."""
        raise NotImplementedError(f"{type(self).__name__} has no scripted oracle; record demonstrations "
                                  "from another source (a stronger model, successful rollouts)")

    def rti_rules(self):
        """A rule-based Validator/Corrector for RTI (``roles="rules"``), or None when the
        env has none. It is an object with

            validate(messages, actions, evidence) -> RuleVerdict | None
            correct(messages, actions, evidence, verdict) -> str

        where ``correct`` returns the text of the corrected assistant turn
        ``verdict["step"]`` in the agent's own syntax (prose and ``<tool_call>`` blocks)."""
        return None

    def verifier_facts(self) -> VerifierFacts:
        """Facts about this env's tool outputs for the Verifier's checks on a corrected
        step (``DEFAULT_VERIFIER_FACTS`` unless overridden)."""
        return copy.deepcopy(DEFAULT_VERIFIER_FACTS)

    # ---- gymnasium API --------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        options = options or {}
        ids = self.task_ids(self.config["split"])
        task_id = options.get("task_id", self.config.get("task_id"))
        if task_id is None:
            task_id = ids[int(self.np_random.integers(len(ids)))]
        elif task_id not in set(ids):
            preview = ids[:10] + (["..."] if len(ids) > 10 else [])
            raise ValueError(
                f"unknown task id {task_id!r} in split {self.config['split']!r} of {type(self).__name__}; "
                f"valid ids ({len(ids)}): {preview}"
            )
        self.task = self.load_task(task_id)
        self._tools = {t.name: t for t in self.task.tools}
        self.turns = 0
        self.unparsable_turns = 0
        self.done = False
        self._call_counter = 0
        self.actions = []
        self.messages = [
            {"role": "system", "content": self.task.system_prompt},
            {"role": "user", "content": self.task.user_message},
        ]
        return copy.deepcopy(self.messages), self._info()

    def step(self, action):
        if self.task is None:
            raise RuntimeError("call reset() before step()")
        if self.done:
            raise RuntimeError("episode is over; call reset()")
        turn = self._as_turn(action)
        # A dict action is kept as the checked turn it was read as: it replays the same, and
        # the original may not even copy (a cycle, nesting past the recursion limit).
        self.actions.append(action if isinstance(action, str) else copy.deepcopy(turn))
        self.turns += 1
        assistant = {"role": "assistant", "content": turn["content"]}
        if turn["tool_calls"]:
            assistant["tool_calls"] = turn["tool_calls"]
        self.messages.append(assistant)

        new: list[dict] = []
        episode_over = False
        if turn["parse_error"]:
            self.unparsable_turns += 1
            new.append(self._error_message(f"Error: could not parse your tool call: {turn['parse_error']}. "
                                           'Write each call as <tool_call>{"name": ..., "arguments": {...}}</tool_call>.'))
        if turn["tool_calls"]:
            results = [self._run_tool(call) for call in turn["tool_calls"][: self.config["max_tool_calls_per_turn"]]]
            for call in turn["tool_calls"][self.config["max_tool_calls_per_turn"]:]:
                results.append(self._tool_message(call["name"], f"Error: at most {self.config['max_tool_calls_per_turn']} tool calls per turn; this call was not run."))
            new += results
            new += self.on_tool_results(turn["tool_calls"], results)
        elif not turn["parse_error"]:
            replies, episode_over = self.on_text_reply(turn["content"])
            new += replies
        self.messages += new

        truncated = not episode_over and self.turns >= self.config["max_turns"]
        self.done = episode_over or truncated
        reward, info = 0.0, self._info()
        if episode_over:
            reward, breakdown = self.compute_reward()
            info["reward_breakdown"] = breakdown
        info["turns"] = self.turns
        info["unparsable_turns"] = self.unparsable_turns  # a policy losing the call format shows here first
        value = finite_number(reward)
        if value is None:  # a grader bug, not the agent's failure: the runner never scores it
            raise ValueError(f"{type(self).__name__}.compute_reward returned {reprlib.repr(reward)}; a reward must "
                             "be a finite number")
        return copy.deepcopy(new), value, bool(episode_over), bool(truncated), info

    def render(self):
        if self.render_mode == "ansi":
            return "\n".join(f"[{m['role']}] {m.get('content', '')}" for m in self.messages)
        return None

    # ---- helpers ---------------------------------------------------------------------------
    def tool_schemas(self) -> list[dict]:
        return [t.schema() for t in self._tools.values()]

    def _info(self) -> dict:
        return {"task_id": self.task.task_id, "tools": self.tool_schemas(),
                "demonstration": copy.deepcopy(self.task.demonstration)}

    @staticmethod
    def _as_turn(action) -> dict:
        if isinstance(action, str):
            return parse_tool_calls(action)
        if isinstance(action, dict) and "content" in action:
            return turn_from_dict(action)
        return {"content": "", "tool_calls": [], "parse_error": f"action must be text or a dict with 'content', got {type(action).__name__}"}

    def _tool_message(self, name: str, content: str) -> dict:
        self._call_counter += 1
        return {"role": "tool", "name": name, "tool_call_id": f"call_{self._call_counter}", "content": content}

    def _error_message(self, content: str) -> dict:
        return {"role": "tool", "name": "error", "tool_call_id": f"call_{self._call_counter}", "content": content}

    def _run_tool(self, call: dict) -> dict:
        name = call.get("name")
        args = call.get("arguments", {})
        tool = self._tools.get(name) if isinstance(name, str) else None
        if tool is None:
            return self._tool_message(str(name), f"Error: unknown tool {name!r}. Available tools: {sorted(self._tools)}.")
        encoded = json.dumps(args, ensure_ascii=False, default=str)
        if len(encoded) > self.config["max_argument_chars"]:
            return self._tool_message(name, f"Error: arguments of {name} are {len(encoded)} characters; the limit is {self.config['max_argument_chars']}.")
        try:
            _schema_validator(json.dumps(tool.parameters, sort_keys=True)).validate(args)
        except jsonschema.ValidationError as e:
            where = "/".join(str(p) for p in e.absolute_path) or "arguments"
            return self._tool_message(name, f"Error: invalid arguments for {name} at {where}: {e.message}")
        try:
            out = tool.fn(**args)
        except ToolError as e:
            return self._tool_message(name, f"Error: {e}")
        except InfrastructureError:
            raise
        except Exception as e:  # a tool bug must not kill the episode
            return self._tool_message(name, f"Error: {name} failed: {type(e).__name__}: {e}")
        text = out if isinstance(out, str) else json.dumps(out, ensure_ascii=False, default=str)
        return self._tool_message(name, truncate_text(text, self.config["max_tool_output_chars"]))


def play(env, agent, task_id: str) -> tuple[float, dict]:
    """Play one episode of ``task_id`` with ``agent`` (``act(observation) -> str``, or a
    callable returning one from the env after ``reset``, e.g. ``lambda env: env.oracle_agent()``).
    Returns (reward, final info); the env keeps the messages (``env.unwrapped.messages``)."""
    observation, info = env.reset(options={"task_id": task_id})
    if not hasattr(agent, "act"):
        agent = agent(env.unwrapped)
    while True:
        observation, reward, terminated, truncated, info = env.step(agent.act(observation))
        if terminated or truncated:
            return float(reward), info
