"""``EnvRunner``: a Ray actor that hosts N environments and plays episodes on them.

Token in, token out. Each episode is one append-only ``TokenBuffer``: environment messages
are rendered incrementally, the engine's sampled ids are appended exactly as sampled with
their behaviour log-probs, and the assistant's text is decoded only to be *executed* by the
environment, never re-encoded. The runner advances all its live episodes in lockstep and
sends their generation requests to an engine as one batch.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field

from envs.registry import make_env
from policies.chat import ChatRenderer, TokenBuffer


def request_seed(*parts) -> int:
    """A stable 63-bit seed from (run seed, round, task, sample, turn): the same episode
    samples the same tokens whichever runner or batch it lands in (checkpoint/resume and
    re-run episodes stay reproducible)."""
    digest = hashlib.sha256(repr(parts).encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


class ReplayError(RuntimeError):
    pass


@dataclass
class Episode:
    spec: dict
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

    def result(self) -> dict:
        return {
            **self.spec,
            **self.buf.to_dict(),
            "reward": self.reward, "terminated": self.terminated, "truncated": self.truncated,
            "context_truncated": self.context_truncated, "turn_spans": self.turn_spans, "actions": self.actions,
            "messages": self.messages, "num_turns": len(self.actions),
            "policy_version": min(self.versions) if self.versions else -1,
            "gen_tokens": sum(self.buf.loss_mask), "info": self.info, "tools": self.tools,
        }


class EnvRunner:
    def __init__(self, env_creator, env_config: dict, num_envs: int, model_path: str, policy: dict,
                 engine_pool, runner_index: int = 0, check_drift: bool = False):
        from transformers import AutoTokenizer

        self.envs = [env_creator(dict(env_config)) for _ in range(num_envs)]
        self.renderer = ChatRenderer(AutoTokenizer.from_pretrained(model_path), policy.get("fallback_chat_template", "chatml"))
        self.policy = policy
        self.engines = engine_pool
        self.index = runner_index
        self.check_drift = check_drift

    def ping(self) -> int:
        return self.index

    def task_ids(self, split: str) -> list[str]:
        env = self.envs[0]
        return list(env.unwrapped.task_ids(split))

    def sample(self, specs: list[dict], sampling: dict) -> list[dict]:
        """Play one episode per spec ({"task_id", "sample_index", "seed", "round", "split"});
        waves of ``num_envs`` episodes run concurrently. Returns trajectories in spec order."""
        out = []
        for i in range(0, len(specs), len(self.envs)):
            wave = specs[i:i + len(self.envs)]
            out += self._play([self._open(env, spec) for env, spec in zip(self.envs, wave)], sampling)
        return out

    def continue_from(self, requests: list[dict], sampling: dict) -> list[dict]:
        """RTI continuation: restore each episode to just before turn k by replaying the
        original actions, put the corrected turn's ids in place of the original turn's, and
        let the policy play on with the normal sampling settings and no guidance.

        A request: {"spec", "actions" (turns before k), "messages" (the original message
        list before turn k, to check the replay), "prefix" (TokenBuffer dict up to and
        including turn k's generation prompt), "turn_spans", "corrected" ({"ids",
        "logprobs", "token_weight"}), "version"}. A replay that does not reproduce the
        original observations returns {"replay_error": ...} instead of a trajectory."""
        out = []
        for i in range(0, len(requests), len(self.envs)):
            slots: list = []  # per request: an Episode, or an error dict
            for env, req in zip(self.envs, requests[i:i + len(self.envs)]):
                try:
                    slots.append(self._resume(env, req))
                except ReplayError as e:
                    slots.append({**req["spec"], "replay_error": str(e)})
            episodes = [s for s in slots if isinstance(s, Episode)]
            results = dict(zip(map(id, episodes), self._play(episodes, sampling)))
            out += [results[id(s)] if isinstance(s, Episode) else s for s in slots]
        return out

    def reward_evidence(self, task_id: str, split: str) -> dict:
        env = self.envs[0].unwrapped
        env.config["split"] = split
        env.reset(options={"task_id": task_id})
        return env.reward_evidence()

    # ---- episodes -------------------------------------------------------------------------
    def _open(self, env, spec: dict) -> Episode:
        env.unwrapped.config["split"] = spec.get("split", env.unwrapped.config["split"])
        obs, info = env.reset(options={"task_id": spec["task_id"]})
        messages, buf = self.renderer.begin(obs, info.get("tools"), info.get("demonstration"))
        return Episode(spec=dict(spec), env=env, messages=messages, buf=buf, tools=info.get("tools") or [])

    def _resume(self, env, req: dict) -> Episode:
        ep = self._open(env, req["spec"])
        for action in req["actions"]:
            turn = self.renderer.decode_text(action)
            new, _, terminated, truncated, _ = env.step(action)
            ep.messages.append(turn)
            ep.messages += new
            if terminated or truncated:
                raise ReplayError("the episode ended while replaying the prefix")
        if ep.messages != req["messages"]:
            raise ReplayError("replaying the prefix did not reproduce the original observations "
                              "(is the environment deterministic given its actions?)")
        ep.actions = list(req["actions"])
        ep.turn_spans = [tuple(s) for s in req["turn_spans"]]
        ep.buf = TokenBuffer(**{k: list(v) for k, v in req["prefix"].items()})
        ep.versions = [req["version"]]
        c = req["corrected"]
        start = len(ep.buf)
        self._advance(ep, [], {"token_ids": c["ids"], "logprobs": c["logprobs"], "finish_reason": "stop",
                               "version": req["version"]}, int(self.policy["max_model_len"]))
        ep.buf.token_weight[start:start + len(c["ids"])] = list(c["token_weight"])
        ep.spec["intervened_step"] = len(req["actions"])
        ep.spec["corrected_span"] = (start, start + len(c["ids"]))
        return ep

    def _play(self, episodes: list[Episode], sampling: dict) -> list[dict]:
        t0 = time.perf_counter()
        max_len = int(self.policy["max_model_len"])
        while True:
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
                seeds.append(request_seed(s.get("seed", 0), s.get("round", 0), s["task_id"], s.get("sample_index", 0),
                                          len(ep.actions)))
            if not live:
                break
            gens = self.engines.generate(prompts, sampling, seeds)
            for ep, gp, gen in zip(live, gps, gens):
                self._advance(ep, gp, gen, max_len)
        results = [ep.result() for ep in episodes]
        for r, ep in zip(results, episodes):
            r["seconds"] = time.perf_counter() - t0
            if self.check_drift:
                r["drift"] = self.renderer.drift(ep.messages, ep.buf.ids)
        return results

    def _advance(self, ep: Episode, gen_prompt: list[int], gen: dict, max_len: int) -> None:
        ids, lps = gen["token_ids"], gen["logprobs"]
        ep.buf.append_context(gen_prompt)
        start = len(ep.buf)
        ep.buf.append_generated(ids, lps)
        ep.turn_spans.append((start, len(ep.buf)))
        ep.versions.append(gen["version"])
        ep.buf.append_context(self.renderer.close_assistant_ids(ids))
        text = self.renderer.decode_turn(ids)["text"]
        ep.actions.append(text)
        new, reward, terminated, truncated, info = ep.env.step(text)
        ep.messages.append(self.renderer.decode_text(text))
        if gen["finish_reason"] == "length" and len(ep.buf) >= max_len - 1:
            truncated = ep.context_truncated = True
        if terminated or truncated:
            ep.reward, ep.terminated, ep.truncated, ep.done = float(reward), bool(terminated), bool(truncated), True
            ep.info = {k: v for k, v in info.items() if k not in ("tools", "demonstration")}
            return
        if new:
            ep.buf.append_context(self.renderer.messages_ids(ep.messages, new))
            ep.messages += new
