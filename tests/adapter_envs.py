"""Small real environments written with OpenEnv's and verifiers' own APIs, for the adapter
tests (tests/unit/test_openenv_env.py, tests/unit/test_verifiers_env.py and the end-to-end
iterations in tests/integration/test_env_adapters.py). A module of its own so the env
runners of a Ray run can import them by name."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import verifiers.v1 as vf
from fastmcp import FastMCP
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.mcp_environment import MCPEnvironment
from openenv.core.env_server.mcp_types import CallToolAction
from openenv.core.env_server.types import Action, Observation, State
from openenv.core.rubrics.base import Rubric
from pydantic import Field

# ---- OpenEnv: a counter with a typed action --------------------------------------------------


class CountAction(Action):
    """Add an amount to the counter."""

    amount: int = Field(..., ge=1, le=5, description="how much to add, 1 to 5")


class CountObservation(Observation):
    total: int = 0
    target: int = 0
    prompt: str = ""


class ExactTarget(Rubric):
    """1 when the counter stopped exactly on its target."""

    def forward(self, action, observation) -> float:
        return 1.0 if observation.done and observation.total == observation.target else 0.0


class CounterEnvironment(Environment):
    """Reach the target (3 to 6, from the seed) by adding 1..5 at a time; overshooting ends
    the episode with 0."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self):
        super().__init__(rubric=ExactTarget())
        self._state, self.total, self.target = State(step_count=0), 0, 0

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs) -> CountObservation:
        self._reset_rubric()
        self.total, self.target = 0, 3 + (seed or 0) % 4
        self._state = State(episode_id=episode_id, step_count=0)
        return CountObservation(target=self.target, prompt=f"Bring the counter from 0 to exactly {self.target}.")

    def step(self, action: CountAction, timeout_s: float | None = None, **kwargs) -> CountObservation:
        self.total += action.amount
        self._state.step_count += 1
        obs = CountObservation(total=self.total, target=self.target, done=self.total >= self.target)
        obs.reward = self._apply_rubric(action, obs)
        return obs

    @property
    def state(self) -> State:
        return self._state


class BrokenCounter(CounterEnvironment):
    def step(self, action: CountAction, timeout_s: float | None = None, **kwargs) -> CountObservation:
        raise RuntimeError("the counter broke")


class SlowCounter(CounterEnvironment):
    def step(self, action: CountAction, timeout_s: float | None = None, **kwargs) -> CountObservation:
        time.sleep(4)
        return super().step(action)


# ---- OpenEnv: tools through MCP ---------------------------------------------------------------


class CalcObservation(Observation):
    prompt: str = ""


class SubmittedAnswer(Rubric):
    """1 when the submitted answer is the sum asked for."""

    def __init__(self):
        super().__init__()
        self.expected = None

    def forward(self, action, observation) -> float:
        return 1.0 if action.arguments.get("answer") == self.expected else 0.0


class CalcEnvironment(MCPEnvironment):
    """Compute a + b with the calculator's tools, then ``submit`` the answer (which ends
    the episode and is scored by the rubric)."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self):
        mcp = FastMCP("calc")

        @mcp.tool
        def add(a: int, b: int) -> int:
            """Add two integers."""
            return a + b

        @mcp.tool
        def divide(a: int, b: int) -> float:
            """Divide a by b."""
            return a / b

        @mcp.tool
        def submit(answer: int) -> str:
            """Submit the final answer."""
            return "submitted"

        super().__init__(mcp)
        self.rubric = SubmittedAnswer()
        self._state = State(step_count=0)

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs) -> CalcObservation:
        a, b = 10 + (seed or 0), 7
        self.rubric.expected = a + b
        return CalcObservation(prompt=f"What is {a} + {b}? Use the tools, then submit the answer.")

    def _finish(self, action, obs):
        if isinstance(action, CallToolAction) and action.tool_name == "submit" and obs.error is None:
            obs.done, obs.reward = True, self._apply_rubric(action, obs)
        return obs

    def step(self, action, timeout_s=None, **kwargs):
        return self._finish(action, super().step(action, timeout_s=timeout_s, **kwargs))

    async def step_async(self, action, timeout_s=None, **kwargs):  # the server's websocket path
        return self._finish(action, await super().step_async(action, timeout_s=timeout_s, **kwargs))

    def _step_impl(self, action, timeout_s=None, **kwargs):
        raise ValueError(f"CalcEnvironment takes MCP actions only, got {type(action).__name__}")

    @property
    def state(self) -> State:
        return self._state


# ---- OpenEnv: a chat environment (the reply is the action) ------------------------------------


class SayAction(Action):
    message: str = Field(..., description="what to say")


class SayObservation(Observation):
    prompt: str = ""
    heard: str = ""


class StartsWithVowel(Rubric):
    def forward(self, action, observation) -> float:
        return 1.0 if action.message.strip()[:1].lower() in tuple("aeiou") else 0.0


class VowelEnvironment(Environment):
    """Say one thing; it scores 1 when it starts with a vowel."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self):
        super().__init__(rubric=StartsWithVowel())
        self._state = State(step_count=0)

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs) -> SayObservation:
        return SayObservation(prompt=f"Say a word that starts with a vowel. (round {seed})")

    def step(self, action: SayAction, timeout_s: float | None = None, **kwargs) -> SayObservation:
        obs = SayObservation(heard=action.message, done=True)
        obs.reward = self._apply_rubric(action, obs)
        return obs

    @property
    def state(self) -> State:
        return self._state


# ---- serving an OpenEnv app on loopback -------------------------------------------------------


class LoopbackServer:
    """An OpenEnv FastAPI app served by uvicorn on 127.0.0.1 and a free port, in a thread."""

    def __init__(self, app):
        import uvicorn

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="critical"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> LoopbackServer:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError(f"the OpenEnv test server on {self.url} did not start")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(10)


# ---- verifiers: sums with a calculator toolset ------------------------------------------------


class CalcToolsetConfig(vf.ToolsetConfig):
    pass


class Calculator(vf.Toolset[CalcToolsetConfig]):
    @vf.tool
    def add(self, a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @vf.tool
    async def divide(self, a: int, b: int) -> float:
        """Divide a by b."""
        return a / b

    @vf.tool
    async def wait(self, seconds: float) -> str:
        """Wait, then say so."""
        await asyncio.sleep(seconds)
        return "waited"


class SumData(vf.TaskData):
    answer: str


class SumTask(vf.Task[SumData, vf.State, vf.TaskConfig]):
    @classmethod
    def toolsets(cls, config):
        return [Calculator(CalcToolsetConfig())]

    @vf.reward
    async def correct(self, task, trace) -> float:
        return float(task.answer in trace.last_reply)

    @vf.reward(weight=0.5)
    async def used_a_tool(self, trace) -> float:
        return float(any(not (m.content or "").startswith("Error") for m in trace.tool_messages))

    @vf.metric
    async def turns(self, trace) -> float:
        return float(trace.num_turns)


class SumTasksetConfig(vf.TasksetConfig):
    count: int = 4


class SumTaskset(vf.Taskset[SumTask, SumTasksetConfig]):
    def load(self):
        for i in range(self.config.count):
            a, b = 20 + i, 5
            yield SumTask(SumData(id=f"sum-{i}", prompt=f"What is {a} + {b}?", answer=str(a + b)), self.config.task)


class StoppingSumTask(SumTask):
    """Stops once two tool results are in."""

    @vf.stop
    async def two_tool_results(self, trace: vf.Trace) -> bool:
        return len(trace.tool_messages) >= 2


class StoppingSumTaskset(vf.Taskset[StoppingSumTask, SumTasksetConfig]):
    def load(self):
        for task in SumTaskset(self.config).load():
            yield StoppingSumTask(task.data, self.config.task)


class BrokenScoringTask(SumTask):
    @vf.reward
    async def correct(self, task, trace) -> float:
        raise RuntimeError("the grader broke")


class BrokenScoringTaskset(vf.Taskset[BrokenScoringTask, SumTasksetConfig]):
    def load(self):
        for task in SumTaskset(self.config).load():
            yield BrokenScoringTask(task.data, self.config.task)


class ContainerTask(SumTask):
    NEEDS_CONTAINER = True


class ContainerTaskset(vf.Taskset[ContainerTask, SumTasksetConfig]):
    def load(self):
        for task in SumTaskset(self.config).load():
            yield ContainerTask(task.data, self.config.task)


# ---- verifiers: say something starting with a vowel (for the end-to-end run) ------------------


class VowelTask(vf.Task[vf.TaskData, vf.State, vf.TaskConfig]):
    @vf.reward
    async def starts_with_vowel(self, trace) -> float:
        return 1.0 if trace.last_reply[:1].lower() in tuple("aeiou") else 0.0


class VowelTaskset(vf.Taskset[VowelTask, vf.TasksetConfig]):
    def load(self):
        for i in range(8):
            yield VowelTask(vf.TaskData(id=f"vowel-{i}", prompt=f"Say a word that starts with a vowel. (round {i})"),
                            self.config.task)
