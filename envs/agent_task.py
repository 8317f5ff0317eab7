"""``AgentTask``: one episode of a tool env as a user's agent function sees it.

An agent harness (``async def agent(client, task) -> answer``) runs its own tool loop: it
asks the model, runs the tool calls, sends the results back, and returns an answer. The
task hands it what the environment knows: the opening messages, the tool schemas, a
worked example, all in OpenAI's format, and ``call_tool``, which runs a tool *through the
environment* (``ToolEnv.step`` with that one call), so the env records the calls its grader
reads. ``reply(text)`` sends a plain-text turn: where a simulated user talks with the agent
(τ²-Bench) it returns the user's answer, to append as a user message; where none does, the
text is the final answer. Either way ``done`` turns true once the env has ended the episode.
``finish(answer)`` gives the env the agent's returned answer if the episode is still open
and returns the env's verdict. The env's own failures raise out of all three, as they do out
of ``step``; a bad call is an ``Error: ...`` result the agent reads.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field

from envs.base import finite_number
from envs.openai_messages import to_openai


@dataclass
class Outcome:
    """How the environment ended the episode."""

    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    info: dict = field(default_factory=dict)


@dataclass
class AgentTask:
    task_id: str
    messages: list[dict]            # the opening (system prompt, request), OpenAI format
    tools: list[dict]               # OpenAI function schemas
    demonstration: list[dict] = field(default_factory=list)  # a worked example to put after the system prompt
    env: object = field(default=None, repr=False)
    outcome: Outcome | None = field(default=None, repr=False)  # set once the env ended the episode
    # one call at a time into the env, in the order the agent made them (an agent may gather
    # several calls at once; an env is not written for concurrent steps)
    _stepping: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)
    executor: object = field(default=None, repr=False)  # the threads the env steps in (None: asyncio's default)

    @classmethod
    def open(cls, env, observation: list[dict], info: dict) -> AgentTask:
        """The task of an env just ``reset`` (its observation and info)."""
        return cls(task_id=str(info.get("task_id", "")), messages=[to_openai(m) for m in observation],
                   tools=list(info.get("tools") or []),
                   demonstration=[to_openai(m) for m in info.get("demonstration") or []], env=env)

    @property
    def prompt(self) -> str:
        """The user's request (the last user message of the opening)."""
        return next((m["content"] for m in reversed(self.messages) if m["role"] == "user"), "")

    @property
    def done(self) -> bool:
        """Whether the env has ended the episode (a final answer, the user's stop, a limit)."""
        return self.outcome is not None

    async def call_tool(self, name: str, arguments: dict | str) -> str:
        """Run one tool call in the environment; its result's text (an ``Error: ...`` text for
        a bad call, or once the episode is over)."""
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except json.JSONDecodeError as e:
                return f"Error: the arguments of {name} are not valid JSON: {e}"
        new = await self._step({"content": "", "tool_calls": [{"name": name, "arguments": arguments}]})
        return "Error: the episode is over; no more tool calls are run." if new is None else \
            "\n".join(m.get("content") or "" for m in new)

    async def reply(self, text: str) -> str:
        """Send ``text`` to the env as a plain-text turn. With a simulated user, the user's
        answer ("" when the user ended the conversation without a word, or after ``done``);
        append it as ``{"role": "user", "content": ...}`` and ask the model again until
        ``done``. Without one, the text is the final answer and the episode ends here."""
        new = await self._step({"content": text, "tool_calls": []})
        return "\n".join(m.get("content") or "" for m in new or [] if m.get("role") == "user")

    async def _step(self, action: dict) -> list[dict] | None:
        """One ``env.step`` in a worker thread, so a slow tool (a web request, a subprocess) or
        a simulated user holds up only this episode, not the others the runner's event loop is
        playing; the env's new messages, or None once the episode is over."""
        async with self._stepping:
            if self.outcome is not None:
                return None
            new, reward, terminated, truncated, info = await asyncio.get_running_loop().run_in_executor(
                self.executor, self.env.step, action)
            if terminated or truncated:
                self._end(reward, terminated, truncated, info)
        return new

    def finish(self, answer: str) -> Outcome:
        """The env's verdict; ``answer`` is given to it as the final reply first unless the
        episode is over. An env whose episode does not end on a plain-text reply (a simulated
        user answers it: the agent should have used ``reply`` until ``done``) ends here
        unscored, as a cut episode: reward 0, truncated."""
        if self.outcome is None:
            _, reward, terminated, truncated, info = self.env.step({"content": answer, "tool_calls": []})
            if terminated or truncated:
                self._end(reward, terminated, truncated, info)
            else:
                self.outcome = Outcome(0.0, False, True, {k: v for k, v in info.items() if k not in ("tools", "demonstration")})
        return self.outcome

    def _end(self, reward, terminated: bool, truncated: bool, info: dict) -> None:
        value = finite_number(reward)
        if value is None:
            raise ValueError(f"task {self.task_id!r} returned reward {reward!r}; an env's reward must be a finite number")
        self.outcome = Outcome(value, bool(terminated), bool(truncated),
                               {k: v for k, v in info.items() if k not in ("tools", "demonstration")})
