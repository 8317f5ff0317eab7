"""``RTIConfig``: the builder that describes a run (RLlib vocabulary, methods only), over
the options declared in ``rti_actors.options``; the top of the package (it builds the
``Algorithm``).

Every setter returns the config, so a run reads as one chained expression. Nothing is
checked until ``build()``, which validates everything at once with messages that say what
to change, freezes the config and returns an ``Algorithm``. ``to_dict`` / ``from_dict``
round-trip it, so checkpoints carry the config that produced them; an API key written into
an endpoint dict is shown and saved as ``***`` (see "keys" below).
"""

from __future__ import annotations

import copy
import importlib.util
import json
import math
import os
import re
import warnings

from envs import list_envs
from envs.openai_client import DEFAULT_KEY_ENV, REDACTED, Secret, inline_key_message, key_may_go_to
from policies.chat import check_chat_template
from policies.engines import vllm_available
from policies.models import BUILTIN_MODELS
from rti_actors.agent_runner import load_agent
from rti_actors.algorithm import Algorithm
from rti_actors.algorithms import get_algorithm
from rti_actors.lora import check_lora
from rti_actors.options import (
    DEFAULTS,
    WANTS,
    ConfigError,
    endpoint_key_problems,
    gspo_clip_pair,
    is_env_name,
    learner_layout_problems,
    names_a_model,
    shown,
    split_teacher,
    upgrade,
)
from rti_actors.trackers import tracker_problems

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
        if not (key_env is None or is_env_name(key_env)) or not isinstance(allow, bool):
            problems.append(f"{where}={{...}}): 'api_key_env' must be an environment variable name (or None) and "
                            f"'allow_insecure_key' True or False, got {shown(key_env)} and {shown(allow)}")
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

    def luffy(self, **kwargs) -> "RTIConfig":
        """LUFFY's teacher traces (used when ``training(algorithm="luffy")``): source ("oracle"
        or a demonstrations JSONL path), traces_per_group, gamma, min_reward, max_turns (the
        oracle's); docs/CONFIG.md and docs/ALGORITHM.md."""
        return self._set("luffy", **kwargs)

    def opd(self, **kwargs) -> "RTIConfig":
        """OPD's teacher (used when ``training(algorithm="opd")``): model (a model with the
        policy's tokenizer) or endpoint (an http(s):// OpenAI-compatible URL, with
        endpoint_model and endpoint_api_key_env), reward_weight; docs/CONFIG.md."""
        return self._set("opd", **kwargs)

    def teacher(self, **kwargs) -> "RTIConfig":
        """Deprecated: LUFFY's options are ``.luffy(...)``, OPD's ``.opd(...)``; each given
        here goes to its section, with a DeprecationWarning."""
        warnings.warn("the config section 'teacher' is deprecated: its options are now in ['luffy', 'opd'] "
                      "(e.g. .luffy(source=...), .opd(model=...))", DeprecationWarning, stacklevel=2)
        for section, values in split_teacher(kwargs).items():
            if section == "teacher":
                raise ConfigError(f"unknown option teacher({next(iter(values))}=...); LUFFY's options are "
                                  f"{sorted(DEFAULTS['luffy'])}, OPD's {sorted(DEFAULTS['opd'])}")
            self._set(section, **values)
        return self

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
        d = upgrade(d)  # a config saved before LUFFY and OPD had sections of their own
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
            problems.append(f"environment(env={shown(env)}) must be a registered environment id (a string) or a "
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
        problems += [f"learners(lora={shown(lr['lora'])}): {p}"
                     for p in check_lora(lr["lora"], zero_stage=lr["zero_stage"] if ok("learners", "zero_stage") else 0)]
        problems += _intervention_problems(c["interventions"])
        if ok("reporting", "trackers"):
            problems += [f"reporting(trackers={shown(c['reporting']['trackers'])}): {p}"
                         for p in tracker_problems(c["reporting"]["trackers"])]
        plugin = get_algorithm(t["algorithm"]) if ok("training", "algorithm") else None
        if plugin is not None:
            problems += plugin.validate(c, ok)
        problems += _agent_problems(r)
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

    def build(self) -> Algorithm:
        """Validate, freeze, start the actors and return an ``Algorithm``."""
        return Algorithm(self)

    def freeze(self) -> None:
        self._frozen = True


def _agent_problems(r: dict) -> list[str]:
    """Agent mode: the function loads and the client is installed."""
    if r["agent"] is None:
        return []
    try:
        load_agent(r["agent"])
    except ValueError as e:
        return [str(e)]
    if importlib.util.find_spec("openai") is None:
        return ["env_runners(agent=...) hands the agent an openai.AsyncOpenAI client: pip install 'rti-actors[agent]'"]
    return []


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
            problems.append(f"{section}({key}={shown(res)}) must be a dict of Ray custom resource names to amounts "
                            ">= 0, e.g. {'rollout_node': 1}")
        elif set(res) & {"CPU", "GPU", "memory"}:
            problems.append(f"{section}({key}=...) names {sorted(set(res) & {'CPU', 'GPU', 'memory'})}: set CPUs and "
                            "GPUs with the num_cpus_per_* / num_gpus_per_* options, not as custom resources")
    return problems


def _learner_group_problems(lr: dict) -> list[str]:
    """How num_learners fits the per-learner CPUs and GPUs (each alone is in WANTS; the
    backend, ZeRO and offload relations are ``options.learner_layout_problems``)."""
    problems = []
    n = lr["num_learners"]
    if n > 1:
        if not lr["num_cpus_per_learner"] and not lr["num_gpus_per_learner"]:
            problems.append(f"learners(num_learners={n}) places each rank in a placement-group bundle, which cannot "
                            "be empty: set num_cpus_per_learner > 0 (or num_gpus_per_learner)")
        if 0 < lr["num_gpus_per_learner"] < 1:
            problems.append(f"learners(num_learners={n}) with num_gpus_per_learner={lr['num_gpus_per_learner']}: NCCL "
                            "cannot run two ranks on one GPU; give each rank a whole GPU (1) or use num_learners=1")
    return problems + learner_layout_problems(lr)


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
        problems.append(f"interventions(roles={shown(roles)}) must be 'self', 'rules' (the env's rti_rules() hook), "
                        "a local model folder, a Hugging Face hub id ('org/name') or an http(s):// URL")
    elif roles.startswith(("http://", "https://")):
        problems += endpoint_key_problems("interventions", "roles", roles, iv["endpoint_api_key_env"])
    elif roles not in ("self", "rules") and not names_a_model(roles):
        problems.append(f"interventions(roles={roles!r}): not 'self', 'rules', an http(s):// endpoint, a built-in "
                        f"model {sorted(BUILTIN_MODELS)}, a local model folder with config.json or a Hugging "
                        "Face hub id ('org/name')")
    return problems
