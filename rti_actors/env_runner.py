"""``EnvRunner``: a Ray actor that hosts N environments and plays episodes on them.

Token in, token out. Each episode is one append-only ``TokenBuffer``: environment messages
are rendered incrementally, the engine's sampled ids are appended exactly as sampled with
their behaviour log-probs, and the assistant's text is decoded only to be *executed* by the
environment, never re-encoded. The runner advances all its live episodes in lockstep and
sends their generation requests to an engine as one batch.
"""

from __future__ import annotations

import hashlib
import reprlib
import time
from collections import deque
from dataclasses import dataclass, field

from envs.base import finite_number
from policies.chat import ChatRenderer, TokenBuffer
from policies.engines import Generation, SamplingParams
from rti_actors.agent_runner import AgentEpisodes, Played
from rti_actors.faults import Restartable
from rti_actors.luffy import has_oracle, oracle_record, teacher_trajectory
from rti_actors.trajectory import EpisodeSpec, Trajectory


def request_seed(*parts) -> int:
    """A stable 63-bit seed from (run seed, round, task, sample, turn): the same episode
    samples the same tokens whichever runner or batch it lands in (checkpoint/resume and
    re-run episodes stay reproducible)."""
    digest = hashlib.sha256(repr(parts).encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def _agent_seed(spec: EpisodeSpec, turn: int) -> int:
    return request_seed(spec.seed, spec.round, spec.task_id, spec.sample_index, turn)


class ReplayError(RuntimeError):
    pass


@dataclass
class Continuation:
    """An RTI continuation: replay ``actions`` (the turns before k; ``messages`` is what the
    original episode showed before turn k, to check the replay), restore the token buffer
    ``prefix`` (up to and including turn k's generation prompt), put the corrected turn's
    ``ids`` there with their behaviour ``logprobs`` and ``token_weight``, and play on."""

    spec: EpisodeSpec
    actions: list[str]
    messages: list[dict]
    prefix: TokenBuffer
    turn_spans: list[tuple[int, int]]
    turn_versions: list[int]  # of the prefix's turns, as sampled
    ids: list[int]
    logprobs: list[float]
    token_weight: list[float]
    version: int


@dataclass
class ReplayFailure:
    """A continuation whose replay did not reproduce the original episode (not a rollout)."""

    spec: EpisodeSpec
    reason: str


@dataclass
class Episode:
    spec: EpisodeSpec
    env: object
    messages: list[dict]
    buf: TokenBuffer
    turn_spans: list[tuple[int, int]] = field(default_factory=list)  # [start, end) of generated ids per turn
    actions: list[str] = field(default_factory=list)  # assistant texts, in order (replayable)
    versions: list[int] = field(default_factory=list)
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    context_truncated: bool = False
    info: dict = field(default_factory=dict)
    tools: list[dict] = field(default_factory=list)
    done: bool = False

    intervened_step: int | None = None
    corrected_span: tuple[int, int] | None = None
    infra_error: str = ""
    prefix_break: str = ""  # agent mode (rti_actors.agent_runner)
    dropped: bool = False
    started: float = field(default_factory=time.perf_counter)  # for the trajectory's seconds

    def result(self, seconds: float, drift: dict | None) -> Trajectory:
        """The one place a Trajectory is made."""
        s, b = self.spec, self.buf
        return Trajectory(
            task_id=s.task_id, sample_index=s.sample_index, seed=s.seed, round=s.round, split=s.split,
            ids=b.ids, loss_mask=b.loss_mask, logprobs=b.logprobs, token_weight=b.token_weight,
            turn_spans=self.turn_spans, turn_versions=self.versions,
            policy_version=min(self.versions) if self.versions else -1,
            reward=self.reward, terminated=self.terminated, truncated=self.truncated,
            context_truncated=self.context_truncated, info=self.info, actions=self.actions, messages=self.messages,
            tools=self.tools, seconds=seconds, drift=drift, intervened_step=self.intervened_step,
            corrected_span=self.corrected_span, infra_error=self.infra_error, prefix_break=self.prefix_break,
            dropped=self.dropped)

    @classmethod
    def of_agent(cls, p: Played, drop_on_break: bool) -> Episode:
        """An agent episode (``rti_actors.agent_runner``): the endpoint's record, the env's verdict."""
        rec, out = p.recording, p.outcome
        return cls(spec=p.spec, env=p.env, messages=rec.messages, buf=rec.buf, turn_spans=rec.turn_spans,
                   actions=rec.actions, versions=rec.versions,
                   reward=0.0 if rec.context_truncated else out.reward,  # a cut episode scores 0
                   terminated=out.terminated, truncated=out.truncated or rec.context_truncated,
                   context_truncated=rec.context_truncated, info=out.info, tools=rec.tools or [], done=True,
                   infra_error=p.error, prefix_break=rec.prefix_break, dropped=drop_on_break and bool(rec.prefix_break),
                   started=p.started)


class EnvRunner(Restartable):
    def __init__(self, env_creator, env_config: dict, num_envs: int, model_path: str, policy: dict,
                 engine_pool, runner_index: int = 0, check_drift: bool = False, max_episode_retries: int = 2,
                 agent: dict | None = None):
        from transformers import AutoTokenizer

        self.creator, self.env_config = env_creator, env_config
        self.envs = [env_creator(dict(env_config)) for _ in range(num_envs)]
        self.max_episode_retries = max_episode_retries
        self.renderer = ChatRenderer(AutoTokenizer.from_pretrained(model_path), policy.get("fallback_chat_template", "chatml"),
                                     policy.get("chat_template", "auto"))
        self.policy = policy
        self.engines = engine_pool
        self.index = runner_index
        self.check_drift = check_drift
        self.teacher_env = None  # LUFFY's oracle plays here, made on first use
        # agent mode: {"agent": fn or "module:fn", "on_prefix_break", "timeout_s"} (rti_actors.agent_runner)
        self.agent = agent
        self.agents = None if agent is None else AgentEpisodes(self, agent["agent"], _agent_seed, agent["timeout_s"])

    def ping(self) -> int:
        return self.index

    def task_ids(self, split: str) -> list[str]:
        env = self.envs[0]
        return list(env.unwrapped.task_ids(split))

    def sample(self, specs: list[EpisodeSpec], sampling: SamplingParams) -> list[Trajectory]:
        """Play one episode per spec, ``num_envs`` at a time: an env takes the next spec as
        soon as its episode ends, so a long episode holds up no other and the engines' batch
        stays full. Returns trajectories in spec order. In agent mode the user's agent plays
        them (``rti_actors.agent_runner``)."""
        if self.agents is not None:
            drop = self.agent["on_prefix_break"] == "drop"
            out = []
            for p in self.agents.play(specs, sampling):
                out.append(Episode.of_agent(p, drop).result(time.perf_counter() - p.started, None))
                out[-1].infra_retries = p.retries
            return out
        out: list[Trajectory | None] = [None] * len(specs)
        todo = deque(enumerate(specs))
        playing: dict[int, tuple[int, int, Episode]] = {}  # env slot -> (spec index, attempt, episode)
        while todo or playing:
            for slot in range(len(self.envs)):
                if slot not in playing and todo:
                    i, spec = todo.popleft()
                    playing[slot] = (i, 0, self._open(self.envs[slot], spec))
            self._turn([ep for _, _, ep in playing.values()], sampling)
            for slot, (i, attempt, ep) in list(playing.items()):
                if not ep.done:
                    continue
                if ep.infra_error and attempt < self.max_episode_retries:
                    # the env failed, not the agent: replay the episode on a fresh env (a broken
                    # connection or corrupted state goes with the old one), same seeds
                    self.envs[slot] = self.creator(dict(self.env_config))
                    playing[slot] = (i, attempt + 1, self._open(self.envs[slot], specs[i]))
                    continue
                out[i] = self._finish(ep)
                out[i].infra_retries = attempt
                del playing[slot]
        return out

    def continue_from(self, requests: list[Continuation], sampling: SamplingParams) -> list[Trajectory | ReplayFailure]:
        """RTI continuation: restore each episode to just before turn k by replaying the
        original actions, put the corrected turn's ids in place of the original turn's, and
        let the policy play on with the normal sampling settings and no guidance. A replay
        that does not reproduce the original observations gives a ``ReplayFailure``. In
        agent mode the agent replays the episode itself (``rti_actors.agent_runner``)."""
        if self.agents is not None:
            scripts = [[Generation(req.prefix.ids[a:b], req.prefix.logprobs[a:b], "stop", v)
                        for (a, b), v in zip(req.turn_spans, req.turn_versions)]
                       + [Generation(req.ids, req.logprobs, "stop", req.version)] for req in requests]
            played = self.agents.play([req.spec for req in requests], sampling, scripts)
            return [self._agent_continuation(req, p) for req, p in zip(requests, played)]
        out = []
        for i in range(0, len(requests), len(self.envs)):
            slots: list = []  # per request: an Episode, or a ReplayFailure
            for env, req in zip(self.envs, requests[i:i + len(self.envs)]):
                try:
                    slots.append(self._resume(env, req))
                except ReplayError as e:
                    slots.append(ReplayFailure(req.spec, str(e)))
            episodes = [s for s in slots if isinstance(s, Episode)]
            results = dict(zip(map(id, episodes), self._play(episodes, sampling)))
            out += [results[id(s)] if isinstance(s, Episode) else s for s in slots]
        return out

    def _agent_continuation(self, req: Continuation, p: Played) -> Trajectory | ReplayFailure:
        """An agent's replayed continuation as the chat loop's would be: the original prefix
        (its token weights too), the corrected turn with its weights, what the policy played
        after. Unless the agent replayed the prefix id for id, a ``ReplayFailure``."""
        rec, k, n = p.recording, len(req.actions), len(req.prefix)
        ep = Episode.of_agent(p, self.agent["on_prefix_break"] == "drop")
        if not p.error:
            if len(rec.turn_spans) <= k or rec.turn_spans[k][0] != n or rec.buf.ids[:n] != req.prefix.ids:
                why = rec.prefix_break or ("it made fewer requests" if len(rec.turn_spans) <= k
                                           else "its requests rendered other tokens")
                return ReplayFailure(req.spec, f"the agent did not replay the episode up to turn {k} ({why}); is it "
                                               "deterministic given the same replies?")
            b, pre = rec.buf, req.prefix
            ep.buf = TokenBuffer(pre.ids + b.ids[n:], pre.loss_mask + b.loss_mask[n:], pre.logprobs + b.logprobs[n:],
                                 pre.token_weight + b.token_weight[n:])
            ep.buf.token_weight[n:n + len(req.ids)] = list(req.token_weight)
            ep.versions = list(req.turn_versions) + rec.versions[k:]
            ep.intervened_step, ep.corrected_span = k, (n, n + len(req.ids))
        return ep.result(time.perf_counter() - p.started, None)

    def has_oracle(self) -> bool:
        return has_oracle(self.envs[0])

    def teacher_traces(self, specs: list[EpisodeSpec], version: int, max_turns: int | None = None) -> list[Trajectory]:
        """LUFFY: the env's oracle played on each spec's task (within ``max_turns`` turns; None:
        the env's own), rendered into token ids by this runner's renderer (``rti_actors.luffy``);
        all of them, failures included. The oracle has an env of its own, so the policy's
        envs keep their config."""
        if self.teacher_env is None:
            extra = {} if max_turns is None else {"max_turns": max_turns}
            self.teacher_env = self.creator({**self.env_config, **extra})
        return [teacher_trajectory(self.renderer, oracle_record(self.teacher_env, s.task_id, s.split), s, version)
                for s in specs]

    def has_rti_rules(self) -> bool:
        return self.envs[0].unwrapped.rti_rules() is not None

    def verifier_facts(self) -> dict:
        """What the Verifier's grounding checks need to know about this env's tools."""
        return self.envs[0].unwrapped.verifier_facts()

    def reward_evidence(self, task_id: str, split: str) -> dict:
        env = self.envs[0].unwrapped
        env.config["split"] = split
        env.reset(options={"task_id": task_id})
        return env.reward_evidence()

    # ---- episodes -------------------------------------------------------------------------
    def _open(self, env, spec: EpisodeSpec) -> Episode:
        env.unwrapped.config["split"] = spec.split
        try:
            obs, info = env.reset(options={"task_id": spec.task_id})
        except Exception as e:
            return Episode(spec=spec, env=env, messages=[], buf=TokenBuffer(), done=True,
                           infra_error=f"reset of task {spec.task_id!r} raised {type(e).__name__}: {e}")
        messages, buf = self.renderer.begin(obs, info.get("tools"), info.get("demonstration"))
        return Episode(spec=spec, env=env, messages=messages, buf=buf, tools=info.get("tools") or [])

    def _resume(self, env, req: Continuation) -> Episode:
        ep = self._open(env, req.spec)
        if ep.infra_error:
            raise ReplayError(ep.infra_error)
        for action in req.actions:
            turn = self.renderer.decode_text(action)
            try:
                new, _, terminated, truncated, _ = env.step(action)
            except Exception as e:
                raise ReplayError(f"the environment raised {type(e).__name__} while replaying: {e}") from e
            ep.messages.append(turn)
            ep.messages += new
            if terminated or truncated:
                raise ReplayError("the episode ended while replaying the prefix")
        if ep.messages != req.messages:
            raise ReplayError("replaying the prefix did not reproduce the original observations "
                              "(is the environment deterministic given its actions?)")
        ep.actions = list(req.actions)
        ep.turn_spans = [tuple(s) for s in req.turn_spans]
        p = req.prefix
        ep.buf = TokenBuffer(list(p.ids), list(p.loss_mask), list(p.logprobs), list(p.token_weight))
        ep.versions = list(req.turn_versions)  # the corrected turn's is appended below
        start = len(ep.buf)
        self._advance(ep, [], Generation(req.ids, req.logprobs, "stop", req.version), int(self.policy["max_model_len"]))
        ep.buf.token_weight[start:start + len(req.ids)] = list(req.token_weight)
        ep.intervened_step = len(req.actions)
        ep.corrected_span = (start, start + len(req.ids))
        return ep

    def _play(self, episodes: list[Episode], sampling: SamplingParams) -> list[Trajectory]:
        while not all(ep.done for ep in episodes):
            self._turn(episodes, sampling)
        return [self._finish(ep) for ep in episodes]

    def _turn(self, episodes: list[Episode], sampling: SamplingParams) -> None:
        """One turn of every live episode: their generation prompts go to the engines as one
        batch, then each env steps on its reply."""
        max_len = int(self.policy["max_model_len"])
        live, prompts, seeds, gps = [], [], [], []
        for ep in episodes:
            if ep.done:
                continue
            gp = self.renderer.generation_prompt_ids(ep.messages)
            if len(ep.buf) + len(gp) + 1 > max_len:  # nothing left to generate into
                ep.context_truncated = ep.truncated = ep.done = True
                continue
            live.append(ep)
            prompts.append(ep.buf.ids + gp)
            gps.append(gp)
            s = ep.spec
            seeds.append(request_seed(s.seed, s.round, s.task_id, s.sample_index, len(ep.actions)))
        if not live:
            return
        gens = self.engines.generate(prompts, sampling, seeds)
        for ep, gp, gen in zip(live, gps, gens):
            self._advance(ep, gp, gen, max_len)

    def _finish(self, ep: Episode) -> Trajectory:
        drift = self.renderer.drift(ep.messages, ep.buf.ids) if self.check_drift and ep.messages else None
        return ep.result(time.perf_counter() - ep.started, drift)

    def _advance(self, ep: Episode, gen_prompt: list[int], gen: dict, max_len: int) -> None:
        ids, lps = gen.token_ids, gen.logprobs
        ep.buf.append_context(gen_prompt)
        start = len(ep.buf)
        ep.buf.append_generated(ids, lps)
        ep.turn_spans.append((start, len(ep.buf)))
        ep.versions.append(gen.version)
        ep.buf.append_context(self.renderer.close_assistant_ids(ids))
        text = self.renderer.decode_turn(ids)["text"]
        ep.actions.append(text)
        try:
            new, reward, terminated, truncated, info = ep.env.step(text)
        except Exception as e:  # bad actions are observations: this is the env's own failure
            ep.infra_error = (f"step {len(ep.actions) - 1} of task {ep.spec.task_id!r} raised "
                              f"{type(e).__name__}: {e}")
            ep.done = True
            return
        ep.messages.append(self.renderer.decode_text(text))
        if gen.finish_reason == "length" and len(ep.buf) >= max_len - 1:
            truncated = ep.context_truncated = True
        if terminated or truncated:
            value = finite_number(reward)
            if value is None:  # the env's fault, not the agent's: never scored, never trained
                ep.infra_error = (f"task {ep.spec.task_id!r} returned reward {reprlib.repr(reward)} "
                                  f"({type(reward).__name__}); an env's reward must be a finite number")
                ep.done = True
                return
            ep.reward, ep.terminated, ep.truncated, ep.done = value, bool(terminated), bool(truncated), True
            ep.info = {k: v for k, v in info.items() if k not in ("tools", "demonstration")}
            return
        if new:
            ep.buf.append_context(self.renderer.messages_ids(ep.messages, new))
            ep.messages += new
            if len(ep.buf) > max_len:
                # an env message longer than what is left of the context: the tokens beyond
                # it could never be generated from, so they are cut here and never ship
                ep.buf.truncate(max_len)
                ep.context_truncated = ep.truncated = ep.done = True
