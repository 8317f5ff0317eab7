"""Agent mode of an env runner: a user's agent function plays the episodes.

With ``env_runners(agent=...)`` an env runner does not run the chat loop itself. For each
episode it resets an env, opens a path on its loopback ``Endpoint`` and awaits
``agent(client, task)``: ``client`` is an ``openai.AsyncOpenAI`` at that path, ``task`` an
``envs.agent_task.AgentTask`` (opening messages, tool schemas, ``call_tool`` through the
env). The env's grader scores the answer the agent returns (``AgentTask.finish``). The
trajectory is what the endpoint recorded, so the learner trains on exactly the tokens the
engines sampled (loss on those only), with the env's reward.

Continuations (RTI's fixed steps, AEPO's branches) are played by replay: the agent runs again
from the task's start on a fresh env, and the endpoint answers its first k requests with the
episode's recorded turns and request k + 1 with the corrected (or branching) turn, then
samples. The agent cannot tell a replay from its first run, so no harness needs a way to be
restored mid-episode; it must only act the same on the same replies. Whether it did is
checked on the tokens: the replayed record must equal the original's prefix id for id,
else the continuation is a ``ReplayFailure`` (``EnvRunner.continue_from``).

Whose fault: an agent that raises, returns no string or runs past ``agent_timeout_s``, an
env that fails, and engines that fail are infrastructure failures (``infra_error``: replayed
on a fresh env, then left out of the group), never a failed rollout.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Callable

from envs.agent_task import AgentTask, Outcome
from envs.external import load_object
from rti_actors.agent_endpoint import Endpoint, Recording
from rti_actors.trajectory import EpisodeSpec

PREFIX_BREAK_MODES = ("drop", "flag")


def load_agent(value):
    """The agent function ``value`` names: itself, or a ``"module:attr"`` string (what a
    saved config and a restarted runner can carry). ValueError saying what to change."""
    if isinstance(value, str) and ":" not in value:
        raise ValueError(f"env_runners(agent={value!r}) must name an async function as 'package.module:function'")
    fn = load_object(value, "agent", where="env_runners(agent)")
    if not inspect.iscoroutinefunction(fn):
        raise ValueError(f"env_runners(agent={value!r}) must be an async function `async def agent(client, task) -> "
                         "str` (or its 'module:function' name)")
    return fn


@dataclass
class Played:
    """One agent episode as played: the env it ran on, what the endpoint recorded, the env's
    verdict, and the infrastructure failure if any ("" when none)."""

    spec: EpisodeSpec
    env: object
    recording: Recording
    outcome: Outcome
    error: str
    started: float
    retries: int = 0


class AgentEpisodes:
    """Plays episode specs through the agent on a runner's envs, ``len(envs)`` at a time.

    ``runner``: the env runner (its envs, env creator, renderer, engine pool, policy, retry
    count); ``seed_of(spec, turn)``: its request seed, so both modes sample alike."""

    def __init__(self, runner, agent, seed_of: Callable[[EpisodeSpec, int], int], timeout_s: float = 600.0):
        self.runner, self.agent, self.seed_of, self.timeout_s = runner, load_agent(agent), seed_of, timeout_s
        self.threads: ThreadPoolExecutor | None = None  # the envs' worker threads while playing

    def play(self, specs: list[EpisodeSpec], sampling, scripts: list[list] | None = None) -> list[Played]:
        """One episode per spec; ``scripts[i]``: the turns spec i's first requests are
        answered with instead of samples (a continuation's replay)."""
        return asyncio.run(self._play(specs, sampling, scripts or [[] for _ in specs]))

    async def _play(self, specs: list[EpisodeSpec], sampling, scripts: list[list]) -> list[Played]:
        r = self.runner
        # env resets, tool calls and graders run in worker threads, one per env, so a slow one
        # holds up its own episode only; a thread stuck in a tool past the agent's timeout is
        # left behind with its env (replaced), not waited for
        self.threads = ThreadPoolExecutor(len(r.envs), "agent-env")
        endpoint = await Endpoint(r.renderer, r.engines, int(r.policy["max_model_len"]), self.seed_of).start()
        free: asyncio.Queue = asyncio.Queue()
        for slot in range(len(r.envs)):
            free.put_nowait(slot)

        async def one(spec: EpisodeSpec, script: list) -> Played:
            slot = await free.get()
            try:
                for attempt in range(r.max_episode_retries + 1):
                    played = await self._episode(endpoint, r.envs[slot], spec, sampling, script)
                    if not played.error:
                        break
                    # a fresh env, same seeds (the old one may still be in a stuck tool call)
                    r.envs[slot] = r.creator(dict(r.env_config))
                played.retries = attempt
                return played
            finally:
                free.put_nowait(slot)

        try:
            return list(await asyncio.gather(*(one(s, sc) for s, sc in zip(specs, scripts))))
        finally:
            await endpoint.stop()
            self.threads.shutdown(wait=False, cancel_futures=True)

    async def _episode(self, endpoint: Endpoint, env, spec: EpisodeSpec, sampling, script: list) -> Played:
        from openai import AsyncOpenAI  # the agent extra: only agent mode needs the client

        started = time.perf_counter()
        url, key = endpoint.open(spec, sampling, script)
        outcome, error = Outcome(), ""
        try:
            env.unwrapped.config["split"] = spec.split
            loop = asyncio.get_running_loop()
            obs, info = await loop.run_in_executor(self.threads, partial(env.reset, options={"task_id": spec.task_id}))
            task = AgentTask.open(env, obs, info)
            task.executor = self.threads
        except Exception as e:
            task, error = None, f"reset of task {spec.task_id!r} raised {type(e).__name__}: {e}"
        if task is not None:
            # no retries in the client: a retried request would be sampled twice
            client = AsyncOpenAI(base_url=url, api_key=key, max_retries=0, timeout=self.timeout_s)
            try:
                answer = await asyncio.wait_for(self.agent(client, task), self.timeout_s)
                if not isinstance(answer, str):
                    error = f"the agent returned {type(answer).__name__}; an agent returns its answer as a str"
                else:
                    outcome = await loop.run_in_executor(self.threads, task.finish, answer)
            except asyncio.TimeoutError:
                error = f"the agent did not return within {self.timeout_s:g} s (env_runners(agent_timeout_s))"
            except Exception as e:  # the user's code or the env failed, not the policy
                error = f"the agent on task {spec.task_id!r} raised {type(e).__name__}: {e}"
            finally:
                await client.close()
        rec = endpoint.close(key)
        return Played(spec, env, rec, outcome, rec.infra_error or error, started)
