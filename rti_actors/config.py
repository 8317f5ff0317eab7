"""``RTIConfig``: the builder that describes a run (RLlib vocabulary, methods only).

Every setter returns the config, so a run reads as one chained expression. Nothing is
checked until ``build()``, which validates everything at once with messages that say what
to change, freezes the config and returns an ``Algorithm``. ``to_dict`` / ``from_dict``
round-trip it, so checkpoints carry the config that produced them; an API key written into
an endpoint dict is shown and saved as ``***`` (see "keys" below).
"""

from __future__ import annotations

import copy
import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

from envs import list_envs
from envs.openai_client import DEFAULT_KEY_ENV, REDACTED, Secret, inline_key_message, key_may_go_to
from policies.chat import check_chat_template
from policies.engines import vllm_available
from policies.models import BUILTIN_MODELS, is_hub_id, is_model_folder
from rti_actors.algorithms import algorithm_names, get_algorithm
from rti_actors.lora import check_lora

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
OFFLOADS = ("none", "optimizer", "optimizer+params")

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
                 "max_policy_lag": 0, "skip_zero_variance_groups": True,
                 # task_ids: train on these tasks of the 'train' split only (e.g. a curriculum's
                 # easy slice); None: the whole split
                 "task_ids": None},
    "learners": {"backend": "deepspeed", "zero_stage": 0, "num_cpus_per_learner": 0.5, "num_gpus_per_learner": 0,
                 "dtype": None, "num_threads_per_learner": None,
                 # "auto": broadcast (NCCL) when learner and engines are on GPUs, else the object store
                 "weight_sync": "auto",
                 # num_learners: DeepSpeed ranks, each one actor with the per-learner CPUs/GPUs
                 # (rti_actors/learner_group.py); offload: "none" | "optimizer" | "optimizer+params"
                 # (ZeRO-Offload to host memory; params only under ZeRO-3)
                 "num_learners": 1, "gradient_checkpointing": False, "offload": "none",
                 "custom_resources_per_learner": {},
                 # pack_sequences: micro-batches are rows of samples laid end to end (no padding);
                 # share_prefix: a group's common opening is run once, its continuations against it;
                 # lora: None (full fine-tune) or {"r", "alpha", "target_modules", "dropout"} (rti_actors/lora.py)
                 "pack_sequences": False, "share_prefix": False, "lora": None},
    # RTI (used when training(algorithm="rti")); docs/ALGORITHM.md gives the source of each default
    "interventions": {
        "roles": "self",            # "self" | "rules" | a local model folder | an http(s):// endpoint
        "ppl_threshold": 5.0,       # delta; 0 rejects all (= GRPO), inf accepts all (no gate)
        "eps_cal": 0.2,             # 0 = no reweighting
        "max_accepted_per_group": 2,
        "candidates_per_wave": 4,   # per group; waves go on until the group has its fixes or no candidate left
        "interventions_per_trajectory": 1,  # 2: a rescued trajectory that still fails is fixed once more
        "corrector_attempts": 3,
        "corrector_temperature": 0.8,
        "max_validator_steps": 8,   # steps judged per candidate (the first ones)
        "verifier": True,           # False = the "no Verifier" ablation
        "verifier_llm": True,       # the policy's V1/V3 verdicts on top of the deterministic checks
        "group_mode": "append",     # or "replace"
        "exclude_truncated": True,  # context-truncated trajectories are not eligible sources
        "max_role_tokens": 256,
        "structured_verdicts": True,  # Validator/Verifier JSON decoded under its schema on our engines
        "tracked_fixes": 16,        # the first accepted fixes, re-scored after every update (0: off)
        "num_role_actors": 1,
        "gate_max_batch": 16,
        "gate_max_wait_ms": 20,
        "endpoint_model": "default",
        "endpoint_api_key_env": "RTI_ROLE_API_KEY",
    },
    # LUFFY (used when training(algorithm="luffy")): where the teacher traces come from ("oracle":
    # the env's scripted oracle_agent, or a demonstrations JSONL path), how many of a group's G
    # they take (in place of on-policy samples), gamma of the shaping f(p) = p / (p + gamma)
    # (LUFFY paper's 0.1), the reward a trace needs to be used, and the oracle's turn budget
    # (None: the env's own max_turns; a scripted oracle may need more turns than the policy gets)
    # OPD (used when training(algorithm="opd")): the teacher that scores the student's own tokens,
    # a model (built-in name, local folder or hub id; its own engine actor) or an OpenAI-compatible
    # endpoint returning prompt log-probs (key from endpoint_api_key_env only), and the weight of the
    # env-reward advantage beside the per-token reverse KL (0: pure distillation, as GKD and the
    # Thinking Machines recipe run it)
    "teacher": {"source": "oracle", "traces_per_group": 1, "gamma": 0.1, "min_reward": 1.0, "max_turns": None,
                "model": None, "endpoint": None, "endpoint_model": "default",
                "endpoint_api_key_env": "RTI_TEACHER_API_KEY", "reward_weight": 0.0},
    # AEPO (used when training(algorithm="aepo")): the group budget G split into initial_rollouts
    # global rollouts (None: entropy pre-monitoring with monitor_beta) and branches taken at
    # uncertain tool-call steps (threshold, entropy weight, consecutive-branch penalty, branches
    # per decision, tokens a step's entropy is read over); the loss's entropy-aware advantage
    # weight and gradient-preserving clip. docs/ALGORITHM.md gives each default's source.
    "aepo": {"initial_rollouts": None, "monitor_beta": 0.5, "branch_threshold": 0.5, "entropy_weight": 0.2,
             "branch_penalty": 0.05, "branches_per_step": 1, "entropy_tokens": 20, "advantage_weight": 0.2,
             "entropy_clip": True},
    # supervised warm start on demonstrations (Algorithm.pretrain_sft), through the same learner
    # checkpoint_every: a checkpoint every N warm-start steps and one at its end (0: none), which
    # resume() continues from mid-way
    "sft": {"lr": 1e-5, "epochs": 2, "batch_size": 8, "min_reward": 1.0, "reset_optimizer": True,
            "checkpoint_every": 0},
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


# ---- what each option may hold -------------------------------------------------------------------
MAX_INT = 2**63 - 1  # counts, sizes and seeds end up in C integers (Ray, numpy, torch)
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_KINDS = {"bool": (lambda v: isinstance(v, bool), "True or False"),
          "text": (lambda v: isinstance(v, str) and v.strip() != "", "a non-empty string"),
          "path": (lambda v: isinstance(v, os.PathLike) or isinstance(v, str) and v != "", "a non-empty path"),
          "name": (lambda v: isinstance(v, str) and bool(_ENV_NAME.fullmatch(v)),
                   "an environment variable name (letters, digits and _)"),
          "dict": (lambda v: isinstance(v, dict), "a dict"),
          "ids": (lambda v: isinstance(v, (list, tuple)) and len(v) > 0 and all(isinstance(x, str) and x for x in v),
                  "a non-empty list of task ids (strings)")}


@dataclass(frozen=True)
class Want:
    """What one option may hold. ``validate`` checks every option against its ``Want``
    first, so the checks that relate options after it only see values of the right type."""

    kind: str                # "int", "number", "choice" or a key of _KINDS
    low: float | None = None
    high: float | None = None
    open_low: bool = False   # (low, ... rather than [low, ...
    open_high: bool = False
    none: bool = False       # None is allowed too (a default chosen later)
    inf: bool = False        # float("inf") is allowed too
    choices: tuple = ()
    why: str = ""            # what the value means: after the rule, or before a choice

    def accepts(self, v) -> bool:
        if self.kind == "choice":
            return any(type(v) is type(c) and v == c for c in self.choices)  # True is not 1
        if self.kind == "algorithm":  # what is registered when validate runs
            return isinstance(v, str) and v in algorithm_names()
        if v is None:
            return self.none
        if self.kind in _KINDS:
            return _KINDS[self.kind][0](v)
        if isinstance(v, bool) or not isinstance(v, int if self.kind == "int" else (int, float)):
            return False
        if isinstance(v, float) and (math.isnan(v) or math.isinf(v) and not (self.inf and v > 0)):
            return False
        if isinstance(v, int) and abs(v) > MAX_INT:
            return False
        return ((self.low is None or (v > self.low if self.open_low else v >= self.low))
                and (self.high is None or (v < self.high if self.open_high else v <= self.high)))

    def text(self) -> str:
        if self.kind in _KINDS:
            s = _KINDS[self.kind][1]
        elif self.low is not None and self.high is not None:
            s = (f"an integer from {self.low} to {self.high}" if self.kind == "int" else
                 f"a finite number in {'(' if self.open_low else '['}{self.low:g}, {self.high:g}"
                 f"{')' if self.open_high else ']'}")
        else:
            s = "an integer" if self.kind == "int" else "a finite number"
            if self.low is not None:
                s += f" {'>' if self.open_low else '>='} {self.low:g}"
        s += " or float('inf')" if self.inf else ""
        return "None or " + s if self.none else s

    def problem(self, section: str, key: str, v) -> str | None:
        if self.accepts(v):
            return None
        where = f"{section}({key}={_shown(v)})"
        if self.kind == "choice":
            return f"{where}: {self.why + '; ' if self.why else ''}choose one of {list(self.choices)}"
        if self.kind == "algorithm":
            return (f"{where}: unknown algorithm; choose one of {list(algorithm_names())}, or register your own with "
                    "rti_actors.algorithms.register_algorithm")
        big = (" and below 2**63" if self.kind in ("int", "number") and isinstance(v, int) and not isinstance(v, bool)
               and abs(v) > MAX_INT else "")
        return f"{where} must be {self.text()}{big}" + (f": {self.why}" if self.why else "")


def _int(low, high=None, **kw) -> Want:
    return Want("int", low, high, **kw)


def _num(low=None, high=None, **kw) -> Want:
    return Want("number", low, high, **kw)


def _one_of(*choices, why: str = "") -> Want:
    return Want("choice", choices=choices, why=why)


BOOL, TEXT, DICT = Want("bool"), Want("text"), Want("dict")
COUNT = _int(1)
CPUS = _num(0)  # Ray resources: fractions allowed, 0 = none
WANTS: dict[str, dict[str, Want]] = {
    "environment": {"env_config": DICT},
    "policy": {"model": Want("path"), "engine": _one_of("vllm", "hf", why="unknown engine ('hf' is transformers)"),
               "dtype": _one_of(None, "float32", "bfloat16", "float16"), "max_model_len": COUNT,
               "max_new_tokens": COUNT, "temperature": _num(0), "top_p": _num(0, 1, open_low=True),
               "fallback_chat_template": _one_of("chatml", None), "tensor_parallel_size": COUNT,
               "engine_kwargs": DICT},
    "env_runners": {"num_env_runners": COUNT, "num_envs_per_env_runner": COUNT, "num_cpus_per_env_runner": CPUS,
                    "num_engines": COUNT, "num_cpus_per_engine": CPUS, "num_gpus_per_engine": CPUS,
                    "num_threads_per_engine": _int(1, none=True)},
    "training": {"algorithm": Want("algorithm"),
                 "group_size": _int(2, why="GRPO needs at least 2 samples per task to normalise rewards"),
                 "tasks_per_iteration": COUNT, "lr": _num(0, open_low=True), "weight_decay": _num(0),
                 "clip": _num(0, 1, open_low=True, open_high=True), "micro_batch_tokens": COUNT,
                 "grad_clip": _num(0, why="0 turns clipping off"),
                 "max_policy_lag": _int(0, why="0 = strictly on-policy"), "skip_zero_variance_groups": BOOL,
                 "task_ids": Want("ids", none=True)},
    "learners": {"backend": _one_of("deepspeed", "torch", why="unknown learner backend"),
                 "zero_stage": _one_of(0, 1, 2, 3), "num_cpus_per_learner": CPUS, "num_gpus_per_learner": CPUS,
                 "dtype": _one_of(None, "float32", "bfloat16"), "num_threads_per_learner": _int(1, none=True),
                 "weight_sync": _one_of("auto", "object_store", "broadcast"), "num_learners": COUNT,
                 "gradient_checkpointing": BOOL, "offload": _one_of(*OFFLOADS), "pack_sequences": BOOL,
                 "share_prefix": BOOL},
    "interventions": {
        "ppl_threshold": _num(0, inf=True, why="0 rejects every intervention, inf accepts all"),
        "eps_cal": _num(0, 1, open_high=True, why="0 turns reweighting off"), "max_accepted_per_group": COUNT,
        "candidates_per_wave": COUNT, "interventions_per_trajectory": _one_of(1, 2),
        "corrector_attempts": COUNT, "corrector_temperature": _num(0), "max_validator_steps": COUNT,
        "verifier": BOOL, "verifier_llm": BOOL, "group_mode": _one_of("append", "replace"),
        "exclude_truncated": BOOL, "max_role_tokens": COUNT, "structured_verdicts": BOOL, "tracked_fixes": _int(0),
        "num_role_actors": COUNT, "gate_max_batch": COUNT,
        "gate_max_wait_ms": _num(0), "endpoint_model": TEXT, "endpoint_api_key_env": Want("name")},
    "teacher": {"source": Want("path", why="'oracle' or a demonstrations JSONL file"),
                "traces_per_group": COUNT, "gamma": _num(0, open_low=True, why="the shaping p / (p + gamma) needs gamma > 0"),
                "min_reward": _num(), "max_turns": _int(1, none=True, why="None: the env's own max_turns"),
                "model": Want("path", none=True, why="OPD's teacher: a built-in name, a local model folder or a hub id"),
                "endpoint": Want("text", none=True, why="OPD's teacher: an http(s):// OpenAI-compatible base URL"),
                "endpoint_model": TEXT, "endpoint_api_key_env": Want("name"),
                "reward_weight": _num(0, why="0: pure reverse-KL distillation")},
    "aepo": {"initial_rollouts": _int(1, none=True, why="None: entropy pre-monitoring sets it per task"),
             "monitor_beta": _num(0), "branch_threshold": _num(0, 1, why="a branch is taken when its probability is above it"),
             "entropy_weight": _num(0), "branch_penalty": _num(0, 1, why="0: no consecutive-branch penalty"),
             "branches_per_step": COUNT, "entropy_tokens": COUNT,
             "advantage_weight": _num(0, why="0 turns the entropy-aware advantage off"), "entropy_clip": BOOL},
    "sft": {"lr": _num(0, open_low=True), "epochs": COUNT, "batch_size": COUNT,
            "min_reward": _num(none=True, why="None keeps every record"), "reset_optimizer": BOOL,
            "checkpoint_every": _int(0, why="0: no checkpoint during the warm start")},
    "evaluation": {"num_samples": COUNT, "split": TEXT, "num_tasks": _int(1, none=True),
                   "temperature": _num(0, none=True, why="None uses policy(temperature)")},
    "fault_tolerance": {"max_restarts": _int(0), "max_task_retries": _int(0), "start_timeout_s": _num(0, open_low=True),
                        "max_episode_retries": _int(0)},
    "checkpointing": {"every": _int(0, why="0: never"), "keep": COUNT},
    "reporting": {"run_dir": Want("path"), "run_name": Want("text", none=True), "tensorboard": BOOL,
                  "progress_bar": Want("bool", none=True), "plot": BOOL},
    "debugging": {"seed": _int(0), "check_drift": BOOL, "log_level": _one_of(*LOG_LEVELS)},
}
# the options with checks of their own in validate (not a type and a range)
CHECKED_APART = {"environment": {"env"}, "policy": {"chat_template"}, "training": {"gspo_clip"},
                 "env_runners": {"custom_resources_per_env_runner", "custom_resources_per_engine"},
                 "learners": {"custom_resources_per_learner", "lora"}, "interventions": {"roles"}}


def _shown(v) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def _is_env_name(v) -> bool:
    return _KINDS["name"][0](v)


# ---- keys ---------------------------------------------------------------------------------------
# An endpoint dict in env_config ("user_endpoint", "judge_endpoint": kwargs of
# envs.openai_client.OpenAIChatClient) may name its key inline. The config holds it as a
# Secret (*** when shown) and saves *** in its place; a restored config reads the key from
# the endpoint's api_key_env instead.
_KEY_NAME = re.compile(r"(.*_)?api_key")


def _hide_keys(env_config):
    if isinstance(env_config, dict):
        for name, ep in env_config.items():
            if (isinstance(name, str) and name.endswith("_endpoint") and isinstance(ep, dict)
                    and isinstance(ep.get("api_key"), str) and ep["api_key"] not in ("", REDACTED)):
                ep["api_key"] = Secret(ep["api_key"], ep.get("api_key_env", DEFAULT_KEY_ENV))
    return env_config


def _redacted(x):
    """A deep copy of ``x`` with every Secret, and every value under an ``api_key`` key, as ``***``."""
    if isinstance(x, Secret):
        return REDACTED
    if isinstance(x, dict):
        out = {k: REDACTED if isinstance(k, str) and _KEY_NAME.fullmatch(k) and x[k] is not None and x[k] != ""
               else _redacted(x[k]) for k in x}
        if isinstance(x.get("api_key"), Secret):  # the saved dict names where a restored run finds the key
            out.setdefault("api_key_env", x["api_key"].key_env)
        return out
    if isinstance(x, (list, tuple)) and type(x) in (list, tuple):
        return type(x)(_redacted(v) for v in x)
    return copy.deepcopy(x)


def _endpoint_problems(env_config: dict) -> list[str]:
    """The ``*_endpoint`` dicts of an env_config: a key comes from the environment (an inline
    one would be pickled into every env runner's Ray actor arguments), and goes only over
    https or to a loopback host unless the dict says allow_insecure_key=True."""
    problems = []
    for name, ep in env_config.items():
        if not (isinstance(name, str) and name.endswith("_endpoint") and isinstance(ep, dict)):
            continue
        where = f"environment(env_config[{name!r}]"
        key, allow = ep.get("api_key"), ep.get("allow_insecure_key", False)
        key_env = ep.get("api_key_env", DEFAULT_KEY_ENV)
        if not (key_env is None or _is_env_name(key_env)) or not isinstance(allow, bool):
            problems.append(f"{where}={{...}}): 'api_key_env' must be an environment variable name (or None) and "
                            f"'allow_insecure_key' True or False, got {_shown(key_env)} and {_shown(allow)}")
            continue
        present = bool(key_env and os.environ.get(key_env))
        if key is not None and key != "" and key != REDACTED:
            problems.append(f"{where}['api_key']={REDACTED}): {inline_key_message(key_env)}")
        elif key == REDACTED and not present:
            problems.append(f"{where}['api_key']={REDACTED!r}) stands for a key left out of a saved config: set the "
                            f"environment variable {key_env!r} (the endpoint's api_key_env) where the env runners run")
        elif present and isinstance(ep.get("base_url"), str) and not allow and not key_may_go_to(ep["base_url"]):
            problems.append(f"{where}['base_url']={ep['base_url']!r}) is not https and not a loopback host, so the key "
                            f"in ${key_env} would cross the network unencrypted: use https://, set api_key_env=None "
                            "if the server needs no key, or allow_insecure_key=True if this network is trusted")
    return problems


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
            if section == "environment" and k == "env_config":
                known[k] = _hide_keys(known[k])
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

    def teacher(self, **kwargs) -> "RTIConfig":
        """The teacher of LUFFY and OPD; see docs/ALGORITHM.md. LUFFY (``training(algorithm=
        "luffy")``): source ("oracle" or a demonstrations JSONL path), traces_per_group, gamma,
        min_reward, max_turns (the oracle's). OPD (``algorithm="opd"``): model (a model with the
        policy's tokenizer) or endpoint (an http(s):// OpenAI-compatible URL, with
        endpoint_model and endpoint_api_key_env), reward_weight."""
        return self._set("teacher", **kwargs)

    def aepo(self, **kwargs) -> "RTIConfig":
        """AEPO's settings (used when ``training(algorithm="aepo")``): initial_rollouts (None:
        entropy pre-monitoring), monitor_beta, branch_threshold, entropy_weight, branch_penalty,
        branches_per_step, entropy_tokens, advantage_weight, entropy_clip; see docs/ALGORITHM.md."""
        return self._set("aepo", **kwargs)

    def sft(self, **kwargs) -> "RTIConfig":
        """Warm-start settings for ``Algorithm.pretrain_sft``: lr (its own, usually well above
        RL's), epochs, batch_size (demonstrations per optimiser step), min_reward (records
        below it are skipped), reset_optimizer (RL then starts with fresh Adam moments),
        checkpoint_every (a checkpoint every N steps and at the end; 0: none)."""
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
        """Plain data for saving and showing: an inline key reads ``***`` (a config restored
        from it reads the key from the endpoint's ``api_key_env``)."""
        return _redacted(self._cfg)

    @classmethod
    def from_dict(cls, d: dict) -> "RTIConfig":
        cfg = cls()
        for section, values in d.items():
            if section not in cfg._cfg:
                raise ConfigError(f"unknown config section {section!r}; known: {sorted(cfg._cfg)}")
            cfg._set(section, **values)
        return cfg

    def copy(self) -> "RTIConfig":
        """An unfrozen copy, inline keys included (``to_dict`` would hide them)."""
        clone = RTIConfig()
        clone._cfg = copy.deepcopy(self._cfg)
        return clone

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True, default=str)

    def __repr__(self) -> str:
        return f"RTIConfig({self.to_json()})"

    def __eq__(self, other) -> bool:
        return isinstance(other, RTIConfig) and self._cfg == other._cfg

    # ---- validation and build --------------------------------------------------------------
    def validate(self, available_cpus: float | None = None, available_gpus: float | None = None) -> None:
        """Raise ``ConfigError`` naming every problem found, each with what to change.

        Every option is checked against its type and range (``WANTS``) first; the checks
        that relate options run only on options that passed, so that no value of any option
        can raise anything but ``ConfigError``.
        """
        c = self._cfg
        problems: list[str] = []
        bad: set[tuple[str, str]] = set()
        for section, wants in WANTS.items():
            for key, want in wants.items():
                problem = want.problem(section, key, c[section][key])
                if problem:
                    problems.append(problem)
                    bad.add((section, key))

        def ok(section: str, *keys: str) -> bool:
            return not any((section, k) in bad for k in keys)

        env = c["environment"]["env"]
        if env is None:
            problems.append("environment(env=None): no environment; call .environment('Navigation-v0') (or any id "
                            "from envs.list_envs())")
        elif isinstance(env, str):
            if env not in list_envs():
                problems.append(f"environment(env={env!r}): unknown environment; registered ones are {list_envs()}; "
                                "register yours with envs.register_env(name, creator)")
        elif not callable(env):
            problems.append(f"environment(env={_shown(env)}) must be a registered environment id (a string) or a "
                            "creator callable (env_config -> env)")
        if ok("environment", "env_config"):
            problems += _endpoint_problems(c["environment"]["env_config"])
        t, p, r, lr = c["training"], c["policy"], c["env_runners"], c["learners"]
        try:
            gspo_clip_pair(t["gspo_clip"])
        except ConfigError as e:
            problems.append(str(e))
        if p["engine"] == "vllm" and not vllm_available():
            problems.append("policy(engine='vllm') but vLLM is not installed: run scripts/setup.sh, or use engine='hf'")
        if ok("policy", "max_new_tokens", "max_model_len") and p["max_new_tokens"] >= p["max_model_len"]:
            problems.append(f"policy(max_new_tokens={p['max_new_tokens']}) must be below "
                            f"policy(max_model_len={p['max_model_len']}), which holds the prompt too")
        tp = p["tensor_parallel_size"]
        if (ok("policy", "tensor_parallel_size", "engine") and ok("env_runners", "num_gpus_per_engine") and tp > 1
                and (p["engine"] != "vllm" or r["num_gpus_per_engine"] != tp)):
            problems.append(f"policy(tensor_parallel_size={tp}) shards a vLLM engine over {tp} GPUs: use engine='vllm' "
                            f"and env_runners(num_gpus_per_engine={tp}) (now engine={p['engine']!r}, "
                            f"num_gpus_per_engine={r['num_gpus_per_engine']})")
        template_problem = check_chat_template(p["chat_template"])
        if template_problem:
            problems.append(template_problem)
        problems += _custom_resource_problems({("env_runners", k): r[k] for k in CUSTOM_RESOURCES["env_runners"]}
                                              | {("learners", k): lr[k] for k in CUSTOM_RESOURCES["learners"]})
        if ok("learners", "num_learners", "backend", "zero_stage", "num_cpus_per_learner", "num_gpus_per_learner",
              "offload", "share_prefix"):
            problems += _learner_group_problems(lr)
        if ok("learners", "weight_sync", "num_gpus_per_learner") and ok("env_runners", "num_gpus_per_engine"):
            problems += _broadcast_problems(lr, r)
        # the values here; whether the targets name layers of the model is build's check (it needs the model)
        problems += [f"learners(lora={_shown(lr['lora'])}): {p}"
                     for p in check_lora(lr["lora"], zero_stage=lr["zero_stage"] if ok("learners", "zero_stage") else 0)]
        problems += _intervention_problems(c["interventions"])
        plugin = get_algorithm(t["algorithm"]) if ok("training", "algorithm") else None
        if plugin is not None:
            problems += plugin.validate(c, ok)
        if not problems and available_cpus is not None:
            need = (r["num_env_runners"] * r["num_cpus_per_env_runner"] + r["num_engines"] * r["num_cpus_per_engine"]
                    + lr["num_learners"] * lr["num_cpus_per_learner"])
            if need > available_cpus + 1e-9:
                problems.append(
                    f"the actors need {need:g} CPUs ({r['num_env_runners']} env runners x {r['num_cpus_per_env_runner']} + "
                    f"{r['num_engines']} engines x {r['num_cpus_per_engine']} + "
                    f"{_learners_text(lr, 'num_cpus_per_learner')}) but the cluster has {available_cpus:g}: lower "
                    "env_runners(num_env_runners, num_cpus_per_env_runner, num_engines, num_cpus_per_engine) or "
                    "learners(num_learners, num_cpus_per_learner)")
        if not problems and available_gpus is not None:
            engines = r["num_engines"] + plugin.extra_engines(c)
            need = engines * r["num_gpus_per_engine"] + lr["num_learners"] * lr["num_gpus_per_learner"]
            if need > available_gpus + 1e-9:
                problems.append(
                    f"the actors need {need:g} GPUs ({engines} engines x {r['num_gpus_per_engine']} + "
                    f"{_learners_text(lr, 'num_gpus_per_learner')}) but the cluster has {available_gpus:g}: lower "
                    "env_runners(num_engines, num_gpus_per_engine) or learners(num_learners, num_gpus_per_learner), "
                    "or add GPU nodes")
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


CUSTOM_RESOURCES = {"env_runners": ("custom_resources_per_env_runner", "custom_resources_per_engine"),
                    "learners": ("custom_resources_per_learner",)}


def _custom_resource_problems(options: dict) -> list[str]:
    """{(section, key): value} of the custom_resources_per_* options: {name: amount >= 0}."""
    problems = []
    for (section, key), res in options.items():
        if not isinstance(res, dict) or not all(isinstance(k, str) and k and _is_number(v) and v >= 0
                                                for k, v in res.items()):
            problems.append(f"{section}({key}={_shown(res)}) must be a dict of Ray custom resource names to amounts "
                            ">= 0, e.g. {'rollout_node': 1}")
        elif set(res) & {"CPU", "GPU", "memory"}:
            problems.append(f"{section}({key}=...) names {sorted(set(res) & {'CPU', 'GPU', 'memory'})}: set CPUs and "
                            "GPUs with the num_cpus_per_* / num_gpus_per_* options, not as custom resources")
    return problems


def _learner_group_problems(lr: dict) -> list[str]:
    """How num_learners, backend, zero_stage and offload fit together (each alone is in WANTS)."""
    problems = []
    n, torch_backend = lr["num_learners"], lr["backend"] == "torch"
    if n > 1:
        if torch_backend:
            problems.append(f"learners(backend='torch') runs on one process; use backend='deepspeed' for "
                            f"num_learners={n}")
        if not lr["num_cpus_per_learner"] and not lr["num_gpus_per_learner"]:
            problems.append(f"learners(num_learners={n}) places each rank in a placement-group bundle, which cannot "
                            "be empty: set num_cpus_per_learner > 0 (or num_gpus_per_learner)")
        if 0 < lr["num_gpus_per_learner"] < 1:
            problems.append(f"learners(num_learners={n}) with num_gpus_per_learner={lr['num_gpus_per_learner']}: NCCL "
                            "cannot run two ranks on one GPU; give each rank a whole GPU (1) or use num_learners=1")
    if torch_backend and lr["zero_stage"] == 3:
        problems.append("learners(backend='torch') with zero_stage=3 partitions the weights, which only DeepSpeed "
                        "does: use backend='deepspeed' (the torch backend holds everything in one process)")
    if lr["share_prefix"] is True and lr["zero_stage"] == 3:
        problems.append("learners(share_prefix=True) needs zero_stage <= 2: ZeRO-3 gathers each layer's weights "
                        "for one forward and its backward, and a shared prefix's backward comes after other rows'")
    offload = lr["offload"]
    if offload != "none" and (torch_backend or lr["zero_stage"] == 0):
        problems.append(f"learners(offload={offload!r}) is DeepSpeed's ZeRO-Offload: it needs backend='deepspeed' "
                        "and zero_stage >= 1")
    elif offload == "optimizer+params" and lr["zero_stage"] != 3:
        problems.append(f"learners(offload='optimizer+params') needs zero_stage=3 (only ZeRO-3 partitions the "
                        f"weights); with zero_stage={lr['zero_stage']} use offload='optimizer'")
    return problems


def _broadcast_problems(lr: dict, r: dict) -> list[str]:
    if lr["weight_sync"] != "broadcast":
        return []
    if bool(lr["num_gpus_per_learner"]) != bool(r["num_gpus_per_engine"]):
        return ["learners(weight_sync='broadcast') needs the learner and the engines on the same kind of device "
                "(both on GPUs: NCCL, or both on CPUs: gloo); use weight_sync='object_store'"]
    if any(0 < x < 1 for x in (lr["num_gpus_per_learner"], r["num_gpus_per_engine"])):
        return ["learners(weight_sync='broadcast') with a fraction of a GPU per learner or engine would put two NCCL "
                "ranks on one device, which NCCL refuses: give each a whole GPU or use weight_sync='object_store'"]
    return []


def _learners_text(lr: dict, key: str) -> str:
    n = lr["num_learners"]
    return f"learner {lr[key]}" if n == 1 else f"{n} learners x {lr[key]}"


def _intervention_problems(iv: dict) -> list[str]:
    """``roles`` (the numbers and switches are in WANTS)."""
    problems = []
    roles = iv["roles"]
    if not isinstance(roles, str) or not roles:
        problems.append(f"interventions(roles={_shown(roles)}) must be 'self', 'rules' (the env's rti_rules() hook), "
                        "a local model folder, a Hugging Face hub id ('org/name') or an http(s):// URL")
    elif roles.startswith(("http://", "https://")):
        problems += _endpoint_key_problems("interventions", "roles", roles, iv["endpoint_api_key_env"])
    elif roles not in ("self", "rules") and not _names_a_model(roles):
        problems.append(f"interventions(roles={roles!r}): not 'self', 'rules', an http(s):// endpoint, a built-in "
                        f"model {sorted(BUILTIN_MODELS)}, a local model folder with config.json or a Hugging "
                        "Face hub id ('org/name')")
    return problems


def _endpoint_key_problems(section: str, option: str, url: str, key_env) -> list[str]:
    """An endpoint's key (read from ``key_env``) goes only over https or to a loopback host."""
    if _is_env_name(key_env) and os.environ.get(key_env) and not key_may_go_to(url):
        return [f"{section}({option}={url!r}) is not https and not a loopback host, so the key in ${key_env} "
                f"({section}(endpoint_api_key_env=...)) would cross the network unencrypted: use https://, or point "
                "endpoint_api_key_env at an unset variable if the server needs no key"]
    return []


def _names_a_model(name: str) -> bool:
    """A built-in model, a local model folder or the shape of a hub id ('org/name'). A hub id is
    checked by its shape only (nothing is downloaded here); build's load_model resolves it and
    turns a failure into a ConfigError naming the option."""
    path = Path(name).expanduser()
    return name in BUILTIN_MODELS or is_model_folder(path) or (is_hub_id(name) and not path.exists())


def distillation_teacher_problems(te: dict) -> list[str]:
    """OPD's teacher: exactly one of a model and an endpoint (whether its tokenizer is the
    policy's is build's check: it reads both tokenizers, or asks the endpoint)."""
    model, endpoint = te["model"], te["endpoint"]
    if model is None and endpoint is None:
        return ["training(algorithm='opd') needs a teacher to score the student's tokens: set "
                "teacher(model=<a model folder, built-in name or hub id with the policy's tokenizer>) or "
                "teacher(endpoint='https://<host>/v1') (an OpenAI-compatible server that returns prompt log-probs)"]
    if model is not None and endpoint is not None:
        return [f"teacher(model={_shown(str(model))}, endpoint={endpoint!r}): give one teacher, a model or an endpoint"]
    if endpoint is not None:
        if not endpoint.startswith(("http://", "https://")):
            return [f"teacher(endpoint={endpoint!r}) must be an http(s):// URL of an OpenAI-compatible server, "
                    "e.g. 'https://host/v1'; a local model goes in teacher(model=...)"]
        return _endpoint_key_problems("teacher", "endpoint", endpoint, te["endpoint_api_key_env"])
    if not _names_a_model(str(model)):
        return [f"teacher(model={_shown(str(model))}): not a built-in model {sorted(BUILTIN_MODELS)}, a local model "
                "folder with config.json or a Hugging Face hub id ('org/name')"]
    return []


def teacher_problems(te: dict, group_size: int) -> list[str]:
    """LUFFY's teacher: a source that exists and room for on-policy samples in each group (the
    env's oracle is build's check: it needs the env)."""
    problems = []
    k, source = te["traces_per_group"], te["source"]
    if k >= group_size:
        problems.append(f"teacher(traces_per_group={k}) takes that many of each group's training(group_size="
                        f"{group_size}) samples, leaving none on-policy: lower it or raise group_size")
    if source != "oracle" and not Path(source).expanduser().is_file():
        problems.append(f"teacher(source={_shown(str(source))}): no such file; give 'oracle' (the env's scripted "
                        "oracle_agent) or the path of a demonstrations JSONL (rti_actors.demonstrations)")
    return problems


def aepo_problems(ae: dict, t: dict) -> list[str]:
    """AEPO's budget against the group's, and its rounds against asynchronous sampling."""
    problems = []
    m, g = ae["initial_rollouts"], t["group_size"]
    if m is not None and m > g:
        problems.append(f"aepo(initial_rollouts={m}) is more than the group budget training(group_size={g}): the "
                        "global rollouts and the branches share G; lower it (G gives GRPO's rollout) or raise group_size")
    if t["max_policy_lag"] > 0:
        problems.append(f"training(algorithm='aepo') with max_policy_lag={t['max_policy_lag']}: AEPO's branches are "
                        "played in rounds after the global rollouts of the same iteration, so the next iteration "
                        "cannot start early; use max_policy_lag=0")
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
    fp32 on CPU), gradient_checkpointing, offload, pack_sequences, share_prefix, lora, luffy_gamma (LUFFY's shaping), aepo_advantage_weight and
    aepo_entropy_clip (AEPO's loss). The learner's own defaults are this
    function applied to ``RTIConfig()``; the group adds each rank's rank and world_size.
    """
    t, p, lc = config["training"], config["policy"], config["learners"]
    return {"algorithm": t["algorithm"], "lr": t["lr"], "weight_decay": t["weight_decay"], "clip_eps": t["clip"],
            "gspo_clip_eps": gspo_clip_pair(t["gspo_clip"]), "temperature": p["temperature"],
            "zero_stage": lc["zero_stage"], "micro_batch_tokens": t["micro_batch_tokens"],
            "grad_clip": t["grad_clip"], "seed": config["debugging"]["seed"], "backend": lc["backend"],
            "dtype": lc["dtype"], "gradient_checkpointing": lc["gradient_checkpointing"], "offload": lc["offload"],
            "pack_sequences": lc["pack_sequences"], "share_prefix": lc["share_prefix"], "lora": lc["lora"],
            "luffy_gamma": config["teacher"]["gamma"], "aepo_advantage_weight": config["aepo"]["advantage_weight"],
            "aepo_entropy_clip": config["aepo"]["entropy_clip"]}
