"""τ²-Bench as Gymnasium environments: ``Tau2AirlineEnv``, ``Tau2RetailEnv``,
``Tau2TelecomEnv`` (registered as ``Tau2Airline-v0`` etc.).

One ``step`` is one agent turn. τ²'s orchestration (agent, user, environment) runs inside: the fixed
greeting opens the episode, a text turn goes to the simulated user (whose own tool calls
run on the phone and stay hidden from the agent), a tool-call turn goes to the
environment; step and error limits, stop tokens and the turn cap end the episode, and
the reward is τ²'s (``evaluator``). Tool failures, unknown tools, malformed calls and user-side
tools called by the agent come back as ``Error: ...`` tool messages counted toward the
error limit, never as exceptions.

env_config (besides ``ToolEnv``'s): ``data_dir``; ``user`` = ``"scripted"`` (default,
deterministic, NOT faithful), ``"llm"`` (needs ``user_chat_fn``), ``"endpoint"`` (needs
``user_endpoint`` = kwargs of ``OpenAIChatClient``) or a ``UserSimulator``; ``solo``
(telecom only: no user, the agent holds both tool sets and the ticket); ``tech_support``
(telecom: ``"manual"``, the paper's policy, or ``"workflow"``); ``max_turns``
(agent turns, default 30 as in the paper), ``max_steps`` (τ² steps, default 200),
``max_errors`` (default 10); ``nl_judge`` (only for tasks scored with NL assertions).
"""

from __future__ import annotations

import copy
import warnings

from envs.base import Task, Tool, ToolEnv
from envs.tau2.data import Tau2Data, resolve_data_dir
from envs.tau2.domains import build_environment, policy_text
from envs.tau2.evaluator import evaluate, reward_basis
from envs.tau2.llm_user import LLMUser, OpenAIChatClient
from envs.tau2.users import ScriptedUser, UserContext, UserSimulator, is_stop, user_system_prompt

GREETING = "Hi! How can I help you today?"
AGENT_INSTRUCTIONS = (
    "You are a customer service agent that helps the user according to the <policy> provided below.\n"
    "In each turn you can either:\n- Send a message to the user.\n- Make a tool call.\n"
    "You cannot do both at the same time.\n\n"
    "Try to be helpful and always follow the policy. Always make sure you generate valid JSON only.")
SOLO_INSTRUCTIONS = (
    "You are a customer service agent that helps the user according to the <policy> provided below.\n"
    "You will be provided with a ticket that contains the user's request.\n"
    "You will need to plan and call the appropriate tools to solve the ticket.\n\n"
    "You cannot communicate with the user, only make tool calls.\n"
    "Stop when you consider that you have solved the ticket.\n"
    "To do so, send a message containing a single tool call to the `done` tool. "
    "Do not include any other tool calls in this last message.\n\n"
    "Always follow the policy. Always make sure you generate valid JSON only.")
DONE_TOOL = Tool("done", "Call this function when you are done with the task.",
                 {"type": "object", "properties": {}, "required": []}, lambda: "###STOP###")
TRUNCATING = ("max_steps", "max_turns")


class Tau2Env(ToolEnv):
    DOMAIN = ""
    SPLITS = ("train", "test", "base")
    # τ² has no output truncation or per-turn call limit, so ToolEnv's keys for those are
    # not used; max_turns caps agent turns (the paper's 30), max_steps/max_errors are τ²'s.
    DEFAULT_CONFIG = {"split": "train", "max_turns": 30, "max_steps": 200, "max_errors": 10,
                      "user": "scripted", "solo": False, "data_dir": None, "tech_support": "manual"}

    def __init__(self, env_config: dict | None = None, render_mode: str | None = None):
        super().__init__(env_config, render_mode)
        cfg = self.config
        if cfg["solo"] and self.DOMAIN != "telecom":
            raise ValueError(f"solo mode exists only for telecom, not {self.DOMAIN}")
        self.data = Tau2Data(resolve_data_dir(self.DOMAIN, cfg["data_dir"]))
        self.user_sim = None if cfg["solo"] else self._make_user(cfg)
        self.tau: object = None
        self.trajectory: list[dict] = []

    @staticmethod
    def _make_user(cfg: dict) -> UserSimulator:
        user = cfg["user"]
        if isinstance(user, UserSimulator):
            return user
        if user == "scripted":
            warnings.warn("τ² env uses the scripted user: deterministic and NOT faithful to τ²-Bench; "
                          "set env_config['user'] to 'llm' or 'endpoint' for real evaluation.", stacklevel=3)
            return ScriptedUser()
        if user == "llm":
            if not callable(cfg.get("user_chat_fn")):
                raise ValueError("env_config['user']='llm' needs env_config['user_chat_fn'](messages) -> str")
            return LLMUser(cfg["user_chat_fn"])
        if user == "endpoint":
            return LLMUser(OpenAIChatClient(**{"timeout": 300.0, "purpose": "user-simulator endpoint",
                                               **(cfg.get("user_endpoint") or {})}))
        raise ValueError(f"env_config['user'] must be 'scripted', 'llm', 'endpoint' or a UserSimulator, got {user!r}")

    # ---- ToolEnv hooks ------------------------------------------------------------------
    def task_ids(self, split: str) -> list[str]:
        return self.data.split_ids(self.DOMAIN, split)

    def load_task(self, task_id: str) -> Task:
        raw = self.data.tasks(self.DOMAIN)[task_id]
        solo = self.config["solo"]
        self.tau = build_environment(self.data, self.DOMAIN, solo=solo)
        policy = policy_text(self.data, self.DOMAIN, solo=solo, tech_support=self.config["tech_support"])
        tools = self.tau.agent.llm_tools()
        if solo:
            tools += self.tau.user.llm_tools() + [DONE_TOOL]
            prompt = (f"<instructions>\n{SOLO_INSTRUCTIONS}\n</instructions>\n<policy>\n{policy}\n</policy>\n"
                      f"<ticket>\n{raw.get('ticket') or ''}\n</ticket>")
        else:
            prompt = f"<instructions>\n{AGENT_INSTRUCTIONS}\n</instructions>\n<policy>\n{policy}\n</policy>"
        return Task(task_id, prompt, "", tools, {"task": raw})

    def compute_reward(self) -> tuple[float, dict]:
        if self.termination_reason == "max_turns":
            return 0.0, {"termination_reason": "max_turns", "gated": True, "progress": 0.0}
        return evaluate(self.data, self.DOMAIN, self.task.data["task"], self.trajectory, self.termination_reason,
                        self.tau, self.config.get("nl_judge"))

    def reward_evidence(self) -> dict:
        task = self.task.data["task"]
        criteria = task.get("evaluation_criteria") or {}
        return {"domain": self.DOMAIN, "task_id": task["id"],
                "gold_actions": copy.deepcopy(criteria.get("actions") or []),
                "communicate_info": list(criteria.get("communicate_info") or []),
                "env_assertions": copy.deepcopy(criteria.get("env_assertions") or []),
                "nl_assertions": list(criteria.get("nl_assertions") or []),
                "reward_basis": reward_basis(criteria),
                "user_scenario": copy.deepcopy(task["user_scenario"])}

    # ---- episode ------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed, options=options)  # picks the task, calls load_task
        task = self.task.data["task"]
        self.trajectory, self.step_count, self.num_errors = [], 0, 0
        self.termination_reason, self.user_error = None, None
        self.tau.initialise(task)
        self.messages = [{"role": "system", "content": self.task.system_prompt}]
        if not self.config["solo"]:
            self._record({"role": "assistant", "content": GREETING, "tool_calls": []})
            self.messages.append({"role": "assistant", "content": GREETING})
            guidelines = self.data.text("user_simulator/simulation_guidelines_tools.md" if self.tau.user is not None
                                        else "user_simulator/simulation_guidelines.md")
            self.user_sim.reset(UserContext(self.DOMAIN, task, user_system_prompt(guidelines, task["user_scenario"]),
                                            self.tau.user.llm_tools() if self.tau.user is not None else []))
            self.tau.sync()
            self.messages += self._user_turn([{"role": "assistant", "content": GREETING}])
        info = self._info()
        info["user_simulator"] = "none (solo)" if self.config["solo"] else \
            f"{self.user_sim.name}{'' if self.user_sim.faithful else ' (not faithful)'}"
        return copy.deepcopy(self.messages), info

    def step(self, action):
        if self.task is None:
            raise RuntimeError("call reset() before step()")
        if self.done:
            raise RuntimeError("episode is over; call reset()")
        new: list[dict] = []
        if self.termination_reason is None:  # else the user already ended it during reset
            self.turns += 1
            new = self._agent_turn(self._as_turn(action))
        self.messages += new
        if self.termination_reason is None and self.turns >= self.config["max_turns"]:
            self.termination_reason = "max_turns"
        over = self.termination_reason is not None
        self.done = over
        info = self._info()
        info.update(turns=self.turns, steps=self.step_count, num_errors=self.num_errors)
        reward = 0.0
        if over:
            reward, info["reward_breakdown"] = self.compute_reward()
            info["termination_reason"] = self.termination_reason
            if self.user_error:
                info["user_error"] = self.user_error
        truncated = self.termination_reason in TRUNCATING
        return copy.deepcopy(new), float(reward), over and not truncated, truncated, info

    # ---- orchestration (agent, user simulator, environment) --------------------------------
    def _record(self, message: dict) -> None:
        self.trajectory.append({**message, "turn_idx": len(self.trajectory)})

    def _count_step(self, next_is_env: bool) -> None:
        """One orchestration step; limits are checked only when no tool results are pending."""
        self.step_count += 1
        self.tau.sync()
        if next_is_env:
            return
        if self.step_count >= self.config["max_steps"]:
            self.termination_reason = "max_steps"
        if self.num_errors >= self.config["max_errors"]:
            self.termination_reason = "too_many_errors"

    def _stop(self, reason: str) -> None:
        if self.termination_reason is None:
            self.termination_reason = reason

    def _agent_turn(self, turn: dict) -> list[dict]:
        content = turn["content"] or None
        calls = [{"id": f"call_{self.turns}_{i}", "name": c["name"], "arguments": c.get("arguments", {}),
                  "requestor": "assistant"} for i, c in enumerate(turn["tool_calls"])]
        if self.config["solo"] and any(c["name"] == "done" for c in calls):
            content, calls = "###STOP###", []  # solo mode: the done call becomes a stop message
        self.messages.append({"role": "assistant", "content": content or "",
                              **({"tool_calls": [{"id": c["id"], "name": c["name"], "arguments": c["arguments"]}
                                                 for c in calls]} if calls else {})})
        self._record({"role": "assistant", "content": content, "tool_calls": list(calls)})
        if turn["parse_error"]:
            # Our text protocol can fail before τ² sees a call: answer like a failed tool call.
            calls.append({"id": f"call_{self.turns}_parse", "name": "", "arguments": {}, "requestor": "assistant",
                          "parse_error": turn["parse_error"]})
        if calls:
            self._count_step(next_is_env=True)
            return self._run_agent_calls(calls)
        if content is None or not content.strip():
            self._stop("agent_error")  # an empty message is invalid in τ²'s message model
            return []
        if self.config["solo"]:
            self._stop("agent_stop" if content == "###STOP###" else "agent_error")
            return []
        self._count_step(next_is_env=False)
        if self.termination_reason is not None:
            return []
        return self._user_turn([{"role": "assistant", "content": content}])

    def _run_agent_calls(self, calls: list[dict]) -> list[dict]:
        observations = []
        for call in calls:
            if "parse_error" in call:
                result = {"id": call["id"], "role": "tool", "requestor": "assistant", "error": True,
                          "content": f"Error: could not parse your tool call: {call['parse_error']}. Write each call as "
                                     '<tool_call>{"name": ..., "arguments": {...}}</tool_call>.'}
            else:
                result = self.tau.execute(call, "assistant")
            self.num_errors += result["error"]
            self._record(result)
            observations.append({"role": "tool", "name": call["name"] or "error", "tool_call_id": call["id"],
                                 "content": result["content"]})
        self._count_step(next_is_env=False)
        return observations

    def _user_turn(self, incoming: list[dict]) -> list[dict]:
        """Let the user act until it speaks to the agent or the episode ends. Returns what
        the agent sees: the user's text message, or nothing."""
        while True:
            try:
                reply = self.user_sim.respond(incoming)
            except Exception as e:  # a failing simulator ends the episode, not the run
                self._stop("user_error")
                self.user_error = f"{type(e).__name__}: {e}"
                return []
            content = reply.get("content") or None
            calls = [{"id": f"user_{self.step_count}_{i}", "name": c["name"], "arguments": c.get("arguments", {}),
                      "requestor": "user"} for i, c in enumerate(reply.get("tool_calls") or [])]
            message = {"role": "user", "content": content, "tool_calls": calls}
            if content is None and not calls:
                self._stop("user_error")
                return []
            self._record(message)
            if is_stop(message):
                self._stop("user_stop")
            self._count_step(next_is_env=bool(calls))
            if not calls:
                return [{"role": "user", "content": content}]
            incoming = []
            for call in calls:
                result = self.tau.execute(call, "user")
                self.num_errors += result["error"]
                self._record(result)
                incoming.append({**result, "name": call["name"]})
            self._count_step(next_is_env=False)
            if self.termination_reason is not None:
                return []


class Tau2AirlineEnv(Tau2Env):
    DOMAIN = "airline"


class Tau2RetailEnv(Tau2Env):
    DOMAIN = "retail"


class Tau2TelecomEnv(Tau2Env):
    DOMAIN = "telecom"
    SPLITS = ("train", "test", "base", "small")

