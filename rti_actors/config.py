"""``RTIConfig``: the builder that describes a run (RLlib vocabulary, methods only).

Every setter returns the config, so a run reads as one chained expression. Nothing is
checked until ``build()``, which validates everything at once with messages that say what
to change, freezes the config and returns an ``Algorithm``. ``to_dict`` / ``from_dict``
round-trip it, so checkpoints carry the config that produced them.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

from envs import list_envs
from policies.chat import check_chat_template
from policies.engines import vllm_available
from policies.models import BUILTIN_MODELS, is_hub_id, is_model_folder

ALGORITHMS = ("grpo", "gspo", "rti")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")

DEFAULTS: dict[str, dict] = {
    "environment": {"env": None, "env_config": {}},
    "policy": {"model": "smollm2-135m-instruct", "engine": "vllm", "dtype": None, "max_model_len": 4096,
               "max_new_tokens": 256, "temperature": 0.8, "top_p": 1.0, "fallback_chat_template": "chatml",
               # "auto": the model family's training template (policies/chat.py), or a family name, or Jinja
               "chat_template": "auto",
               # GPUs one vLLM engine shards the model over; equals env_runners(num_gpus_per_engine)
               "tensor_parallel_size": 1,
               "engine_kwargs": {}},
    "env_runners": {"num_env_runners": 2, "num_envs_per_env_runner": 4, "num_cpus_per_env_runner": 0.25,
                    "num_engines": 1, "num_cpus_per_engine": 0.5, "num_gpus_per_engine": 0,
                    "num_threads_per_engine": None,
                    # Ray custom resources each actor asks for on top of its CPUs/GPUs, to pin
                    # a kind to the nodes that declare them (`ray start --resources`)
                    "custom_resources_per_env_runner": {}, "custom_resources_per_engine": {}},
    "training": {"algorithm": "grpo", "group_size": 8, "tasks_per_iteration": 4, "lr": 1e-6, "weight_decay": 0.1,
                 # gspo_clip: [low, high] from the GSPO paper (Zheng et al., 2025), tiny because sequence
                 # ratios are length-normalised; a list so that it survives JSON, a float = symmetric
                 "clip": 0.2, "gspo_clip": [3e-4, 4e-4], "micro_batch_tokens": 4096, "grad_clip": 1.0,
                 "max_policy_lag": 0, "skip_zero_variance_groups": True},
    "learners": {"backend": "deepspeed", "zero_stage": 0, "num_cpus_per_learner": 0.5, "num_gpus_per_learner": 0,
                 "dtype": None, "num_threads_per_learner": None,
                 # "auto": broadcast (NCCL) when learner and engines are on GPUs, else the object store
                 "weight_sync": "auto",
                 # num_learners: DeepSpeed ranks, each one actor with the per-learner CPUs/GPUs
                 # (rti_actors/learner_group.py); offload: "none" | "optimizer" | "optimizer+params"
                 # (ZeRO-Offload to host memory; params only under ZeRO-3)
                 "num_learners": 1, "gradient_checkpointing": False, "offload": "none",
                 "custom_resources_per_learner": {}},
    # RTI (used when training(algorithm="rti")); docs/ALGORITHM.md gives the source of each default
    "interventions": {
        "roles": "self",            # "self" | "rules" | a local model folder | an http(s):// endpoint
        "ppl_threshold": 5.0,       # delta; 0 rejects all (= GRPO), inf accepts all (no gate)
        "eps_cal": 0.2,             # 0 = no reweighting
        "max_accepted_per_group": 2,
        "max_candidates_per_group": 4,
        "interventions_per_trajectory": 1,  # 2: a rescued trajectory that still fails is fixed once more
        "corrector_attempts": 3,
        "corrector_temperature": 0.8,
        "max_validator_steps": 8,   # steps judged per candidate (the first ones)
        "verifier": True,           # False = the "no Verifier" ablation
        "verifier_llm": True,       # the policy's V1/V3 verdicts on top of the deterministic checks
        "group_mode": "append",     # or "replace"
        "exclude_truncated": True,  # context-truncated trajectories are not eligible sources
        "max_role_tokens": 256,
        "num_role_actors": 1,
        "gate_max_batch": 16,
        "gate_max_wait_ms": 20,
        "endpoint_model": "default",
        "endpoint_api_key_env": "RTI_ROLE_API_KEY",
    },
    # supervised warm start on demonstrations (Algorithm.pretrain_sft), through the same learner
    "sft": {"lr": 1e-5, "epochs": 2, "batch_size": 8, "min_reward": 1.0, "reset_optimizer": True},
    "evaluation": {"num_samples": 4, "split": "test", "num_tasks": None, "temperature": None},
    # start_timeout_s: how long build() waits for every actor to answer its first ping (an
    # engine loading a large model takes minutes; an actor that cannot be scheduled, never).
    # max_episode_retries: fresh-env replays of an episode whose environment failed.
    "fault_tolerance": {"max_restarts": 2, "max_task_retries": 2, "start_timeout_s": 900.0,
                        "max_episode_retries": 2},
    # every: save a checkpoint under <run dir>/checkpoints every N iterations (0: never),
    # keeping the newest `keep`. A crashed learner is rebuilt from the newest one.
    "checkpointing": {"every": 0, "keep": 2},
    "reporting": {"run_dir": "runs", "run_name": None, "tensorboard": True, "progress_bar": None, "plot": True},
    "debugging": {"seed": 0, "check_drift": False, "log_level": "WARNING"},
}


class ConfigError(ValueError):
    """A configuration that cannot run; the message says what to change."""


class RTIConfig:
    """Builder for a training run; the README and examples/ show it in use."""

    def __init__(self):
        self._cfg = copy.deepcopy(DEFAULTS)
        self._frozen = False

    # ---- setters ---------------------------------------------------------------------------
    def _set(self, section: str, **kwargs) -> "RTIConfig":
        if self._frozen:
            raise ConfigError("this config is frozen (it was built); call .copy() to change it")
        known = self._cfg[section]
        for k, v in kwargs.items():
            if k not in known:
                raise ConfigError(f"unknown option {section}({k}=...); known options: {sorted(known)}")
            known[k] = copy.deepcopy(v)
        return self

    def environment(self, env=None, *, env_config: dict | None = None) -> "RTIConfig":
        return self._set("environment", **{k: v for k, v in {"env": env, "env_config": env_config}.items() if v is not None})

    def policy(self, **kwargs) -> "RTIConfig":
        return self._set("policy", **kwargs)

    def env_runners(self, **kwargs) -> "RTIConfig":
        return self._set("env_runners", **kwargs)

    def training(self, **kwargs) -> "RTIConfig":
        return self._set("training", **kwargs)

    def learners(self, **kwargs) -> "RTIConfig":
        return self._set("learners", **kwargs)

    def interventions(self, **kwargs) -> "RTIConfig":
        """RTI settings (used when ``training(algorithm="rti")``); see docs/ALGORITHM.md."""
        return self._set("interventions", **kwargs)

    def sft(self, **kwargs) -> "RTIConfig":
        """Warm-start settings for ``Algorithm.pretrain_sft``: lr (its own, usually well above
        RL's), epochs, batch_size (demonstrations per optimiser step), min_reward (records
        below it are skipped), reset_optimizer (RL then starts with fresh Adam moments)."""
        return self._set("sft", **kwargs)

    def evaluation(self, **kwargs) -> "RTIConfig":
        return self._set("evaluation", **kwargs)

    def fault_tolerance(self, **kwargs) -> "RTIConfig":
        return self._set("fault_tolerance", **kwargs)

    def checkpointing(self, **kwargs) -> "RTIConfig":
        """every: a checkpoint every N training iterations (0: none), keep: how many stay."""
        return self._set("checkpointing", **kwargs)

    def reporting(self, **kwargs) -> "RTIConfig":
        return self._set("reporting", **kwargs)

    def debugging(self, **kwargs) -> "RTIConfig":
        return self._set("debugging", **kwargs)

    # ---- access ----------------------------------------------------------------------------
    def __getitem__(self, section: str) -> dict:
        return self._cfg[section]

    def to_dict(self) -> dict:
        return copy.deepcopy(self._cfg)

    @classmethod
    def from_dict(cls, d: dict) -> "RTIConfig":
        cfg = cls()
        for section, values in d.items():
            if section not in cfg._cfg:
                raise ConfigError(f"unknown config section {section!r}; known: {sorted(cfg._cfg)}")
            cfg._set(section, **values)
        return cfg

    def copy(self) -> "RTIConfig":
        return RTIConfig.from_dict(self.to_dict())

    def to_json(self) -> str:
        return json.dumps(self._cfg, indent=2, sort_keys=True, default=str)

    def __repr__(self) -> str:
        return f"RTIConfig({self.to_json()})"

    def __eq__(self, other) -> bool:
        return isinstance(other, RTIConfig) and self._cfg == other._cfg

    # ---- validation and build --------------------------------------------------------------
    def validate(self, available_cpus: float | None = None, available_gpus: float | None = None) -> None:
        """Raise ``ConfigError`` naming every problem found, each with what to change."""

        c = self._cfg
        problems: list[str] = []
        env = c["environment"]["env"]
        if env is None:
            problems.append("no environment: call .environment('Navigation-v0') (or any id from envs.list_envs())")
        elif isinstance(env, str) and env not in list_envs():
            problems.append(f"unknown environment {env!r}: registered ones are {list_envs()}; "
                            "register yours with envs.register_env(name, creator)")
        t = c["training"]
        if t["algorithm"] not in ALGORITHMS:
            problems.append(f"unknown algorithm {t['algorithm']!r}: choose one of {list(ALGORITHMS)}")
        if not isinstance(t["group_size"], int) or t["group_size"] < 2:
            problems.append(f"group_size={t['group_size']}: GRPO needs at least 2 samples per task to normalise rewards")
        if t["tasks_per_iteration"] < 1:
            problems.append("tasks_per_iteration must be >= 1")
        if not (0 < t["clip"] < 1):
            problems.append(f"clip={t['clip']} must be in (0, 1)")
        try:
            gspo_clip_pair(t["gspo_clip"])
        except ConfigError as e:
            problems.append(str(e))
        if t["lr"] <= 0:
            problems.append(f"lr={t['lr']} must be > 0")
        if t["max_policy_lag"] < 0:
            problems.append("max_policy_lag must be >= 0 (0 = strictly on-policy)")
        p = c["policy"]
        if p["engine"] not in ("vllm", "hf"):
            problems.append(f"unknown engine {p['engine']!r}: choose 'vllm' or 'hf' (transformers)")
        elif p["engine"] == "vllm":
            if not vllm_available():
                problems.append("engine='vllm' but vLLM is not installed: run scripts/setup.sh, or use engine='hf'")
        if p["temperature"] < 0:
            problems.append("temperature must be >= 0")
        if p["max_new_tokens"] >= p["max_model_len"]:
            problems.append(f"max_new_tokens={p['max_new_tokens']} must be below max_model_len={p['max_model_len']}")
        tp = p["tensor_parallel_size"]
        if not isinstance(tp, int) or isinstance(tp, bool) or tp < 1:
            problems.append(f"policy(tensor_parallel_size={tp!r}) must be an integer >= 1")
        elif tp > 1 and (p["engine"] != "vllm" or c["env_runners"]["num_gpus_per_engine"] != tp):
            problems.append(f"policy(tensor_parallel_size={tp}) shards a vLLM engine over {tp} GPUs: use engine='vllm' "
                            f"and env_runners(num_gpus_per_engine={tp}) (now engine={p['engine']!r}, "
                            f"num_gpus_per_engine={c['env_runners']['num_gpus_per_engine']})")
        template_problem = check_chat_template(p["chat_template"])
        if template_problem:
            problems.append(template_problem)
        r = c["env_runners"]
        for key in ("num_env_runners", "num_envs_per_env_runner", "num_engines"):
            if not isinstance(r[key], int) or r[key] < 1:
                problems.append(f"{key}={r[key]} must be an integer >= 1")
        lr = c["learners"]
        problems += _custom_resource_problems({("env_runners", k): r[k] for k in CUSTOM_RESOURCES["env_runners"]}
                                              | {("learners", k): lr[k] for k in CUSTOM_RESOURCES["learners"]})
        if lr["backend"] not in ("deepspeed", "torch"):
            problems.append(f"unknown learner backend {lr['backend']!r}: choose 'deepspeed' or 'torch'")
        if lr["zero_stage"] not in (0, 1, 2, 3):
            problems.append(f"zero_stage={lr['zero_stage']} must be 0, 1, 2 or 3")
        problems += _learner_group_problems(lr)
        if lr["weight_sync"] not in ("auto", "object_store", "broadcast"):
            problems.append(f"weight_sync={lr['weight_sync']!r}: choose 'auto', 'object_store' or 'broadcast'")
        elif lr["weight_sync"] == "broadcast" and bool(lr["num_gpus_per_learner"]) != bool(r["num_gpus_per_engine"]):
            problems.append("weight_sync='broadcast' needs the learner and the engines on the same kind of device "
                            "(both on GPUs: NCCL, or both on CPUs: gloo); use weight_sync='object_store'")
        elif lr["weight_sync"] == "broadcast" and any(0 < x < 1 for x in (lr["num_gpus_per_learner"],
                                                                           r["num_gpus_per_engine"])):
            problems.append("weight_sync='broadcast' with a fraction of a GPU per learner or engine would put two NCCL "
                            "ranks on one device, which NCCL refuses: give each a whole GPU or use "
                            "weight_sync='object_store'")
        problems += _intervention_problems(c["interventions"])
        sft = c["sft"]
        if not sft["lr"] > 0:
            problems.append(f"sft(lr={sft['lr']}) must be > 0")
        for key in ("epochs", "batch_size"):
            if not isinstance(sft[key], int) or sft[key] < 1:
                problems.append(f"sft({key}={sft[key]}) must be an integer >= 1")
        e = c["evaluation"]
        if e["num_samples"] < 1:
            problems.append("evaluation num_samples must be >= 1")
        if c["debugging"]["log_level"] not in LOG_LEVELS:
            problems.append(f"debugging(log_level={c['debugging']['log_level']!r}): choose one of {list(LOG_LEVELS)}")
        if not problems and available_cpus is not None:
            need = (r["num_env_runners"] * r["num_cpus_per_env_runner"] + r["num_engines"] * r["num_cpus_per_engine"]
                    + lr["num_learners"] * lr["num_cpus_per_learner"])
            if need > available_cpus + 1e-9:
                problems.append(
                    f"the actors need {need:g} CPUs ({r['num_env_runners']} env runners x {r['num_cpus_per_env_runner']} + "
                    f"{r['num_engines']} engines x {r['num_cpus_per_engine']} + "
                    f"{_learners_text(lr, 'num_cpus_per_learner')}) but "
                    f"the cluster has {available_cpus:g}: lower num_env_runners or the num_cpus_per_* options")
        if not problems and available_gpus is not None:
            role_model = c["interventions"]["roles"] not in ("self", "rules") and not str(
                c["interventions"]["roles"]).startswith(("http://", "https://")) and t["algorithm"] == "rti"
            engines = r["num_engines"] + int(role_model)
            need = engines * r["num_gpus_per_engine"] + lr["num_learners"] * lr["num_gpus_per_learner"]
            if need > available_gpus + 1e-9:
                problems.append(
                    f"the actors need {need:g} GPUs ({engines} engines x {r['num_gpus_per_engine']} + "
                    f"{_learners_text(lr, 'num_gpus_per_learner')}) but the cluster has {available_gpus:g}: lower num_engines, "
                    "num_gpus_per_engine or num_gpus_per_learner, or add GPU nodes")
        ft = c["fault_tolerance"]
        for key in ("max_restarts", "max_task_retries", "max_episode_retries"):
            if not isinstance(ft[key], int) or isinstance(ft[key], bool) or ft[key] < 0:
                problems.append(f"fault_tolerance({key}={ft[key]!r}) must be an integer >= 0")
        if not _is_number(ft["start_timeout_s"]) or not ft["start_timeout_s"] > 0:
            problems.append(f"fault_tolerance(start_timeout_s={ft['start_timeout_s']!r}) must be a number > 0")
        ck = c["checkpointing"]
        for key, low in (("every", 0), ("keep", 1)):
            if not isinstance(ck[key], int) or isinstance(ck[key], bool) or ck[key] < low:
                problems.append(f"checkpointing({key}={ck[key]!r}) must be an integer >= {low}")
        if problems:
            raise ConfigError("invalid RTIConfig:\n  - " + "\n  - ".join(problems))

    def build(self):
        """Validate, freeze, start the actors and return an ``Algorithm``."""
        from rti_actors.algorithm import Algorithm

        return Algorithm(self)

    def freeze(self) -> None:
        self._frozen = True


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


OFFLOADS = ("none", "optimizer", "optimizer+params")
CUSTOM_RESOURCES = {"env_runners": ("custom_resources_per_env_runner", "custom_resources_per_engine"),
                    "learners": ("custom_resources_per_learner",)}


def _custom_resource_problems(options: dict) -> list[str]:
    """{(section, key): value} of the custom_resources_per_* options: {name: amount >= 0}."""
    problems = []
    for (section, key), res in options.items():
        if not isinstance(res, dict) or not all(isinstance(k, str) and k and _is_number(v) and v >= 0
                                                for k, v in res.items()):
            problems.append(f"{section}({key}={res!r}) must be a dict of Ray custom resource names to amounts >= 0, "
                            "e.g. {'rollout_node': 1}")
        elif set(res) & {"CPU", "GPU", "memory"}:
            problems.append(f"{section}({key}=...) names {sorted(set(res) & {'CPU', 'GPU', 'memory'})}: set CPUs and "
                            "GPUs with the num_cpus_per_* / num_gpus_per_* options, not as custom resources")
    return problems


def _learner_group_problems(lr: dict) -> list[str]:
    """num_learners, gradient_checkpointing and offload (the learner group and its memory options)."""
    problems = []
    n, torch_backend = lr["num_learners"], lr["backend"] == "torch"
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        problems.append(f"learners(num_learners={n!r}) must be an integer >= 1")
    elif n > 1:
        if torch_backend:
            problems.append(f"learners(backend='torch') runs on one process; use backend='deepspeed' for "
                            f"num_learners={n}")
        if not lr["num_cpus_per_learner"] and not lr["num_gpus_per_learner"]:
            problems.append(f"num_learners={n} places each rank in a placement-group bundle, which cannot be empty: "
                            "set num_cpus_per_learner > 0 (or num_gpus_per_learner)")
        if 0 < lr["num_gpus_per_learner"] < 1:
            problems.append(f"num_learners={n} with num_gpus_per_learner={lr['num_gpus_per_learner']}: NCCL cannot "
                            "run two ranks on one GPU; give each rank a whole GPU (1) or use num_learners=1")
    if torch_backend and lr["zero_stage"] == 3:
        problems.append("zero_stage=3 partitions the weights, which only DeepSpeed does: use backend='deepspeed' "
                        "(the torch backend holds everything in one process)")
    if not isinstance(lr["gradient_checkpointing"], bool):
        problems.append(f"learners(gradient_checkpointing={lr['gradient_checkpointing']!r}) must be True or False")
    offload = lr["offload"]
    if offload not in OFFLOADS:
        problems.append(f"learners(offload={offload!r}): choose one of {list(OFFLOADS)}")
    elif offload != "none" and (torch_backend or lr["zero_stage"] == 0):
        problems.append(f"offload={offload!r} is DeepSpeed's ZeRO-Offload: it needs backend='deepspeed' and "
                        "zero_stage >= 1")
    elif offload == "optimizer+params" and lr["zero_stage"] != 3:
        problems.append(f"offload='optimizer+params' needs zero_stage=3 (only ZeRO-3 partitions the weights); "
                        f"with zero_stage={lr['zero_stage']} use offload='optimizer'")
    return problems


def _learners_text(lr: dict, key: str) -> str:
    n = lr["num_learners"]
    return f"learner {lr[key]}" if n == 1 else f"{n} learners x {lr[key]}"


def _intervention_problems(iv: dict) -> list[str]:

    problems = []
    roles = iv["roles"]
    if not isinstance(roles, str) or not roles:
        problems.append("interventions(roles=...) must be 'self', 'rules' (the env's rti_rules() hook), a local "
                        "model folder, a Hugging Face hub id ('org/name') or an http(s):// URL")
    elif roles not in ("self", "rules") and not roles.startswith(("http://", "https://")):
        # a hub id is checked by its shape only (nothing is downloaded here); build's load_model
        # resolves it and turns a failure into a ConfigError naming this option
        path = Path(roles).expanduser()
        if roles not in BUILTIN_MODELS and not is_model_folder(path) and not (is_hub_id(roles) and not path.exists()):
            problems.append(f"interventions(roles={roles!r}): not 'self', 'rules', an http(s):// endpoint, a built-in "
                            f"model {sorted(BUILTIN_MODELS)}, a local model folder with config.json or a Hugging "
                            "Face hub id ('org/name')")
    if iv["ppl_threshold"] < 0:
        problems.append("ppl_threshold must be >= 0 (0 rejects every intervention, inf accepts all)")
    if not 0 <= iv["eps_cal"] < 1:
        problems.append(f"eps_cal={iv['eps_cal']} must be in [0, 1) (0 turns reweighting off)")
    if iv["group_mode"] not in ("append", "replace"):
        problems.append(f"group_mode={iv['group_mode']!r}: choose 'append' or 'replace'")
    if iv["interventions_per_trajectory"] not in (1, 2):
        problems.append(f"interventions_per_trajectory={iv['interventions_per_trajectory']} must be 1 or 2")
    for key in ("max_accepted_per_group", "max_candidates_per_group", "corrector_attempts", "max_validator_steps",
                "num_role_actors", "max_role_tokens", "gate_max_batch"):
        if not isinstance(iv[key], int) or iv[key] < 1:
            problems.append(f"interventions({key}={iv[key]}) must be an integer >= 1")
    return problems


def gspo_clip_pair(value, name: str = "training(gspo_clip=...)") -> tuple[float, float]:
    """The GSPO clip as (low, high): a float is symmetric, a [low, high] pair is taken as is.

    Raises ``ConfigError`` (a ``ValueError``) naming ``name`` for anything else, so the config's
    validate() and the learner, which is also built directly from plain dicts, agree.
    """
    def ok(x) -> bool:
        return isinstance(x, (int, float)) and not isinstance(x, bool) and 0 < x < 1

    if ok(value):
        return (float(value), float(value))
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(ok(x) for x in value):
        return (float(value[0]), float(value[1]))
    raise ConfigError(f"{name}: got {value!r}; give a float in (0, 1) for a symmetric clip or a [low, high] "
                      "pair of them, e.g. [3e-4, 4e-4] (the GSPO paper's)")


def learner_settings(config: RTIConfig) -> dict:
    """The learner's settings (``rti_actors.learner.Learner``'s config dict) for a run.

    Keys: algorithm, lr, weight_decay, clip_eps, gspo_clip_eps ((low, high)), temperature (the
    rollout temperature the behaviour log-probs were taken at, so unchanged weights give ratio
    1), zero_stage, micro_batch_tokens, grad_clip, seed, backend, dtype (None: bf16 on GPU,
    fp32 on CPU), gradient_checkpointing, offload. The learner's own defaults are this
    function applied to ``RTIConfig()``; the group adds each rank's rank and world_size.
    """
    t, p, lc = config["training"], config["policy"], config["learners"]
    return {"algorithm": t["algorithm"], "lr": t["lr"], "weight_decay": t["weight_decay"], "clip_eps": t["clip"],
            "gspo_clip_eps": gspo_clip_pair(t["gspo_clip"]), "temperature": p["temperature"],
            "zero_stage": lc["zero_stage"], "micro_batch_tokens": t["micro_batch_tokens"],
            "grad_clip": t["grad_clip"], "seed": config["debugging"]["seed"], "backend": lc["backend"],
            "dtype": lc["dtype"], "gradient_checkpointing": lc["gradient_checkpointing"], "offload": lc["offload"]}
