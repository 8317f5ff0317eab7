"""Every option of a run, declared once: a dataclass per config section whose fields carry
the default, what the value may hold (a ``Want``: type and range) and why it is what it is.

``RTIConfig`` (rti_actors/config.py) is the builder over these sections; its ``validate``
checks each option against its ``Want``, the checkpoint's config check reads which options
only lay the run out (``layout``) and which sections only some algorithms read (``owner``),
and docs/CONFIG.md is generated from here (``options_markdown``; a test keeps it current).
This module sits below everything that reads a setting: it imports nothing that starts
an actor.
"""

from __future__ import annotations

import copy
import math
import os
import re
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar

from envs.openai_client import key_may_go_to
from policies.models import BUILTIN_MODELS, is_hub_id, is_model_folder
from rti_actors.algorithms import algorithm_names

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
OFFLOADS = ("none", "optimizer", "optimizer+params")
MAX_INT = 2**63 - 1  # counts, sizes and seeds end up in C integers (Ray, numpy, torch)


class ConfigError(ValueError):
    """A configuration that cannot run; the message says what to change."""


# ---- what one option may hold ---------------------------------------------------------------
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_KINDS = {"bool": (lambda v: isinstance(v, bool), "True or False"),
          "text": (lambda v: isinstance(v, str) and v.strip() != "", "a non-empty string"),
          "path": (lambda v: isinstance(v, os.PathLike) or isinstance(v, str) and v != "", "a non-empty path"),
          "name": (lambda v: isinstance(v, str) and bool(_ENV_NAME.fullmatch(v)),
                   "an environment variable name (letters, digits and _)"),
          "dict": (lambda v: isinstance(v, dict), "a dict"),
          "ids": (lambda v: isinstance(v, (list, tuple)) and len(v) > 0 and all(isinstance(x, str) and x for x in v),
                  "a non-empty list of task ids (strings)"),
          "trackers": (lambda v: isinstance(v, (list, tuple)) and all(isinstance(x, (str, dict)) for x in v),
                       "a list of tracker names ('wandb', 'mlflow') or dicts {'name': ..., option: value}")}


def shown(v) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def is_env_name(v) -> bool:
    return _KINDS["name"][0](v)


@dataclass(frozen=True)
class Want:
    """What one option may hold. ``RTIConfig.validate`` checks every option against its
    ``Want`` first, so the checks that relate options after it only see values of the right type."""

    kind: str                # "int", "number", "choice", "algorithm" or a key of _KINDS
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
        if self.kind == "choice":
            return "one of " + ", ".join(repr(c) for c in self.choices)
        if self.kind == "algorithm":
            return "a registered algorithm name"
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
        where = f"{section}({key}={shown(v)})"
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


def option(default: Any, want: Want | None = None, why: str = "", layout: bool = False):
    """One option. ``want``: what it may hold (None: ``RTIConfig.validate`` checks it with
    the options it relates to); ``why``: what it means or where its default comes from;
    ``layout``: it says how the run is laid out or reported, not what it trains, so a
    restore may change it."""
    meta = {"want": want, "why": why, "layout": layout}
    if isinstance(default, (dict, list)):
        return field(default_factory=lambda: copy.deepcopy(default), metadata=meta)
    return field(default=default, metadata=meta)


# ---- the sections ---------------------------------------------------------------------------
# ``owner``: the algorithms that read a section (None: every run).
@dataclass
class Environment:
    owner: ClassVar[tuple | None] = None
    env: Any = option(None, None, "a registered env id (envs.list_envs()) or a creator callable env_config -> env")
    env_config: dict = option({}, DICT, "passed to the env creator; *_endpoint dicts name their key by env variable")


@dataclass
class Policy:
    owner: ClassVar[tuple | None] = None
    model: Any = option("smollm2-135m-instruct", Want("path"), "a built-in name, a local folder or a hub id")
    engine: str = option("vllm", _one_of("vllm", "hf", why="unknown engine ('hf' is transformers)"),
                         layout=True)
    dtype: Any = option(None, _one_of(None, "float32", "bfloat16", "float16"),
                        "None: the engine's choice for the device")
    max_model_len: int = option(4096, COUNT, "prompt and completion together")
    max_new_tokens: int = option(256, COUNT, "per assistant turn")
    temperature: float = option(0.8, _num(0))
    top_p: float = option(1.0, _num(0, 1, open_low=True))
    fallback_chat_template: Any = option("chatml", _one_of("chatml", None),
                                         "for a tokenizer that ships no chat template")
    chat_template: Any = option("auto", None, "'auto': the model family's training template (policies/chat.py), "
                                "a family name, or Jinja")
    tensor_parallel_size: int = option(1, COUNT, "GPUs one vLLM engine shards the model over; equals "
                                       "env_runners(num_gpus_per_engine)", layout=True)
    engine_kwargs: dict = option({}, DICT, "passed to the engine as they are", layout=True)


@dataclass
class EnvRunners:
    owner: ClassVar[tuple | None] = None
    num_env_runners: int = option(2, COUNT, layout=True)
    num_envs_per_env_runner: int = option(4, COUNT, layout=True)
    num_cpus_per_env_runner: float = option(0.25, CPUS, layout=True)
    num_engines: int = option(1, COUNT, layout=True)
    num_cpus_per_engine: float = option(0.5, CPUS, layout=True)
    num_gpus_per_engine: float = option(0, CPUS, layout=True)
    num_threads_per_engine: Any = option(None, _int(1, none=True), layout=True)
    custom_resources_per_env_runner: dict = option({}, None, "Ray custom resources each runner asks for on top of "
                                                   "its CPUs, to pin it to nodes that declare them "
                                                   "(`ray start --resources`)", layout=True)
    custom_resources_per_engine: dict = option({}, None, "the same for each engine", layout=True)
    agent: Any = option(None, None, "agent mode: an async function `agent(client, task) -> answer` (or its "
                        "'module:function' name) plays each episode against an OpenAI-compatible endpoint on "
                        "loopback; the env grades the answer (docs/OPENAI_AGENTS.md)")
    on_prefix_break: str = option("drop", _one_of("drop", "flag"), "agent mode: an episode whose next prompt does not "
                                  "extend its recorded tokens is left out of its group ('drop') or trained on its "
                                  "recorded part ('flag'); counted in agent/prefix_breaks either way")
    agent_timeout_s: float = option(600.0, _num(0, open_low=True), "agent mode: one episode's agent call; past it the "
                                    "episode is an infrastructure failure")


@dataclass
class Training:
    owner: ClassVar[tuple | None] = None
    algorithm: str = option("grpo", Want("algorithm"), "a registered name (rti_actors.algorithms)")
    group_size: int = option(8, _int(2, why="GRPO needs at least 2 samples per task to normalise rewards"))
    tasks_per_iteration: int = option(4, COUNT)
    lr: float = option(1e-6, _num(0, open_low=True))
    weight_decay: float = option(0.1, _num(0))
    clip: float = option(0.2, _num(0, 1, open_low=True, open_high=True), "PPO's token ratio clip")
    gspo_clip: Any = option([3e-4, 4e-4], None, "[low, high] from the GSPO paper (Zheng et al., 2025), tiny because "
                            "sequence ratios are length-normalised; a float is symmetric")
    micro_batch_tokens: int = option(4096, COUNT)
    grad_clip: float = option(1.0, _num(0, why="0 turns clipping off"))
    max_policy_lag: int = option(0, _int(0, why="0 = strictly on-policy"))
    skip_zero_variance_groups: bool = option(True, BOOL, "a group whose rewards are all equal has no advantage")
    task_ids: Any = option(None, Want("ids", none=True), "train on these tasks of the 'train' split only (e.g. a "
                           "curriculum's easy slice); None: the whole split")


@dataclass
class Learners:
    owner: ClassVar[tuple | None] = None
    backend: str = option("deepspeed", _one_of("deepspeed", "torch", why="unknown learner backend"))
    zero_stage: int = option(0, _one_of(0, 1, 2, 3))
    num_cpus_per_learner: float = option(0.5, CPUS, layout=True)
    num_gpus_per_learner: float = option(0, CPUS, layout=True)
    dtype: Any = option(None, _one_of(None, "float32", "bfloat16"),
                        "None: bf16 on GPU and on CPUs with native bf16 (AVX512-BF16, AMX), else fp32")
    num_threads_per_learner: Any = option(None, _int(1, none=True), layout=True)
    weight_sync: str = option("auto", _one_of("auto", "object_store", "broadcast"),
                              "'auto': broadcast (NCCL) when learner and engines are on GPUs, else the object store",
                              layout=True)
    num_learners: int = option(1, COUNT, "DeepSpeed ranks, each one actor with the per-learner CPUs/GPUs")
    gradient_checkpointing: bool = option(False, BOOL, layout=True)
    offload: str = option("none", _one_of(*OFFLOADS), "ZeRO-Offload to host memory; params only under ZeRO-3",
                          layout=True)
    custom_resources_per_learner: dict = option({}, None, "Ray custom resources for each rank", layout=True)
    # Both change the layout, never the loss (rti_actors/batch_layout.py), so a restore may change them.
    pack_sequences: Any = option("auto", _one_of("auto", True, False),
                                 "micro-batches are rows of samples laid end to end (no padding); 'auto': the "
                                 "continuations of a shared prefix are, other samples are padded", layout=True)
    share_prefix: Any = option("auto", _one_of("auto", True, False),
                               "a group's common opening is run once, its continuations against it; 'auto': "
                               "where that saves a quarter of the group's positions, on models and ZeRO stages "
                               "that allow it", layout=True)
    lora: Any = option(None, None, "None (full fine-tune) or {'r', 'alpha', 'target_modules', 'dropout'} "
                       "(rti_actors/lora.py)")


@dataclass
class Interventions:
    """RTI's settings; docs/ALGORITHM.md gives the source of each default."""

    owner: ClassVar[tuple | None] = ("rti",)
    roles: str = option("self", None, "'self' | 'rules' | a local model folder | an http(s):// endpoint")
    ppl_threshold: float = option(5.0, _num(0, inf=True, why="0 rejects every intervention, inf accepts all"),
                                  "delta")
    eps_cal: float = option(0.2, _num(0, 1, open_high=True, why="0 turns reweighting off"))
    max_accepted_per_group: int = option(2, COUNT)
    candidates_per_wave: int = option(4, COUNT, "per group; waves go on until the group has its fixes or no "
                                      "candidate is left")
    interventions_per_trajectory: int = option(1, _one_of(1, 2), "2: a rescued trajectory that still fails is "
                                               "fixed once more")
    corrector_attempts: int = option(3, COUNT)
    corrector_temperature: float = option(0.8, _num(0))
    max_validator_steps: int = option(8, COUNT, "steps judged per candidate (the first ones)")
    verifier: bool = option(True, BOOL, "False: the 'no Verifier' ablation")
    verifier_llm: bool = option(True, BOOL, "the policy's V1/V3 verdicts on top of the deterministic checks")
    group_mode: str = option("append", _one_of("append", "replace"))
    exclude_truncated: bool = option(True, BOOL, "context-truncated trajectories are not eligible sources")
    max_role_tokens: int = option(256, COUNT)
    structured_verdicts: bool = option(True, BOOL, "Validator/Verifier JSON decoded under its schema on our engines")
    tracked_fixes: int = option(16, _int(0), "the first accepted fixes, re-scored after every update (0: off)")
    num_role_actors: int = option(1, COUNT, layout=True)
    gate_max_batch: int = option(16, COUNT, layout=True)
    gate_max_wait_ms: float = option(20, _num(0), layout=True)
    endpoint_model: str = option("default", TEXT)
    endpoint_api_key_env: str = option("RTI_ROLE_API_KEY", Want("name"))


@dataclass
class Luffy:
    """LUFFY's off-policy teacher traces."""

    owner: ClassVar[tuple | None] = ("luffy",)
    source: Any = option("oracle", Want("path", why="'oracle' or a demonstrations JSONL file"),
                         "'oracle': the env's scripted oracle_agent; or a demonstrations JSONL path")
    traces_per_group: int = option(1, COUNT, "teacher traces in place of on-policy samples in each group")
    gamma: float = option(0.1, _num(0, open_low=True, why="the shaping p / (p + gamma) needs gamma > 0"),
                          "the shaping f(p) = p / (p + gamma); the LUFFY paper's 0.1")
    min_reward: float = option(1.0, _num(), "the reward a trace needs to be used")
    max_turns: Any = option(None, _int(1, none=True, why="None: the env's own max_turns"),
                            "the oracle's turn budget (a scripted oracle may need more turns than the policy gets)")


@dataclass
class OPD:
    """On-policy distillation: the teacher that scores the student's own tokens."""

    owner: ClassVar[tuple | None] = ("opd",)
    model: Any = option(None, Want("path", none=True, why="OPD's teacher: a built-in name, a local model folder "
                                   "or a hub id"), "a model with the policy's tokenizer (its own engine actor)")
    endpoint: Any = option(None, Want("text", none=True, why="OPD's teacher: an http(s):// OpenAI-compatible base URL"),
                           "an OpenAI-compatible server returning prompt log-probs")
    endpoint_model: str = option("default", TEXT)
    endpoint_api_key_env: str = option("RTI_TEACHER_API_KEY", Want("name"), "the key is read from here only")
    reward_weight: float = option(0.0, _num(0, why="0: pure reverse-KL distillation"),
                                  "the env-reward advantage beside the per-token reverse KL (0: as GKD and the "
                                  "Thinking Machines recipe run it)")


@dataclass
class AEPO:
    """AEPO's branching rollout and its loss; docs/ALGORITHM.md gives each default's source."""

    owner: ClassVar[tuple | None] = ("aepo",)
    initial_rollouts: Any = option(None, _int(1, none=True, why="None: entropy pre-monitoring sets it per task"),
                                   "global rollouts of the group budget G; the rest are branches")
    monitor_beta: float = option(0.5, _num(0))
    branch_threshold: float = option(0.5, _num(0, 1, why="a branch is taken when its probability is above it"))
    entropy_weight: float = option(0.2, _num(0))
    branch_penalty: float = option(0.05, _num(0, 1, why="0: no consecutive-branch penalty"))
    branches_per_step: int = option(1, COUNT)
    entropy_tokens: int = option(20, COUNT, "tokens a step's entropy is read over")
    advantage_weight: float = option(0.2, _num(0, why="0 turns the entropy-aware advantage off"))
    entropy_clip: bool = option(True, BOOL, "the gradient-preserving clip")


@dataclass
class SFT:
    """The supervised warm start on demonstrations (Algorithm.pretrain_sft), through the same learner."""

    owner: ClassVar[tuple | None] = None
    lr: float = option(1e-5, _num(0, open_low=True), "its own, usually well above RL's")
    epochs: int = option(2, COUNT)
    batch_size: int = option(8, COUNT, "demonstrations per optimiser step")
    min_reward: Any = option(1.0, _num(none=True, why="None keeps every record"))
    reset_optimizer: bool = option(True, BOOL, "RL then starts with fresh Adam moments")
    checkpoint_every: int = option(0, _int(0, why="0: no checkpoint during the warm start"),
                                   "a checkpoint every N steps and one at the end, which resume() continues from")


@dataclass
class Evaluation:
    owner: ClassVar[tuple | None] = None
    num_samples: int = option(4, COUNT, layout=True)
    split: str = option("test", TEXT, layout=True)
    num_tasks: Any = option(None, _int(1, none=True), layout=True)
    temperature: Any = option(None, _num(0, none=True, why="None uses policy(temperature)"), layout=True)


@dataclass
class FaultTolerance:
    owner: ClassVar[tuple | None] = None
    max_restarts: int = option(2, _int(0), layout=True)
    max_task_retries: int = option(2, _int(0), layout=True)
    start_timeout_s: float = option(900.0, _num(0, open_low=True), "how long build() waits for every actor's first "
                                    "answer (a large model loads for minutes)", layout=True)
    max_episode_retries: int = option(2, _int(0), "fresh-env replays of an episode whose environment failed",
                                      layout=True)


@dataclass
class Checkpointing:
    owner: ClassVar[tuple | None] = None
    every: int = option(0, _int(0, why="0: never"), "a checkpoint under <run dir>/checkpoints every N iterations; "
                        "a crashed learner is rebuilt from the newest (with none, from the weights last published, "
                        "with a fresh optimiser)", layout=True)
    keep: int = option(2, COUNT, layout=True)


@dataclass
class Reporting:
    owner: ClassVar[tuple | None] = None
    run_dir: Any = option("runs", Want("path"), layout=True)
    run_name: Any = option(None, Want("text", none=True), layout=True)
    tensorboard: bool = option(True, BOOL, layout=True)
    progress_bar: Any = option(None, Want("bool", none=True), "None: when stderr is a terminal", layout=True)
    plot: bool = option(True, BOOL, layout=True)
    # which names and keys exist and whether the package is installed: rti_actors.trackers
    trackers: list = option([], Want("trackers"), "experiment trackers that get the metrics, the learning curves and "
                            "a table of sampled trajectories; see docs/TRACKERS.md", layout=True)
    tracker_samples: int = option(4, _int(0), "trajectories per iteration in the trackers' table (0: no table)",
                                  layout=True)


@dataclass
class Debugging:
    owner: ClassVar[tuple | None] = None
    seed: int = option(0, _int(0))
    check_drift: bool = option(False, BOOL, layout=True)
    log_level: str = option("WARNING", _one_of(*LOG_LEVELS), layout=True)


SECTIONS: dict[str, type] = {
    "environment": Environment, "policy": Policy, "env_runners": EnvRunners, "training": Training,
    "learners": Learners, "interventions": Interventions, "luffy": Luffy, "opd": OPD, "aepo": AEPO, "sft": SFT,
    "evaluation": Evaluation, "fault_tolerance": FaultTolerance, "checkpointing": Checkpointing,
    "reporting": Reporting, "debugging": Debugging}


def _default(f) -> Any:
    return f.default_factory() if f.default is MISSING else f.default


DEFAULTS: dict[str, dict] = {name: {f.name: _default(f) for f in fields(cls)} for name, cls in SECTIONS.items()}
WANTS: dict[str, dict[str, Want]] = {name: {f.name: f.metadata["want"] for f in fields(cls) if f.metadata["want"]}
                                     for name, cls in SECTIONS.items()}
# the options with checks of their own in RTIConfig.validate (not a type and a range)
CHECKED_APART: dict[str, set] = {name: {f.name for f in fields(cls) if not f.metadata["want"]}
                                 for name, cls in SECTIONS.items()}
# how a run is laid out or reported: a restore may change these freely
LAYOUT: dict[str, set] = {name: {f.name for f in fields(cls) if f.metadata["layout"]} for name, cls in SECTIONS.items()}
OWNER: dict[str, set] = {name: set(cls.owner) for name, cls in SECTIONS.items() if cls.owner}


# ---- old spellings ----------------------------------------------------------------------------
# One "teacher" section held LUFFY's and OPD's options; each now has its own. Old configs
# (and checkpoints' config.json) still load: each key goes to the section that reads it.
TEACHER_KEYS = {**{k: "luffy" for k in DEFAULTS["luffy"]}, **{k: "opd" for k in DEFAULTS["opd"]}}


def split_teacher(values: dict) -> dict[str, dict]:
    """{"luffy": ..., "opd": ...} for options of the old "teacher" section; an unknown key
    stays under "teacher", so the caller's error names it."""
    out: dict[str, dict] = {}
    for k, v in values.items():
        out.setdefault(TEACHER_KEYS.get(k, "teacher"), {})[k] = v
    return out


def upgrade(saved: dict) -> dict:
    """A saved config dict with the old "teacher" section split into "luffy" and "opd"."""
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in saved.items() if k != "teacher"}
    for section, values in split_teacher(saved.get("teacher", {})).items():
        out.setdefault(section, {}).update(values)
    return out


# ---- checks shared by several sections ----------------------------------------------------
def endpoint_key_problems(section: str, option_name: str, url: str, key_env) -> list[str]:
    """An endpoint's key (read from ``key_env``) goes only over https or to a loopback host."""
    if is_env_name(key_env) and os.environ.get(key_env) and not key_may_go_to(url):
        return [f"{section}({option_name}={url!r}) is not https and not a loopback host, so the key in ${key_env} "
                f"({section}(endpoint_api_key_env=...)) would cross the network unencrypted: use https://, or point "
                "endpoint_api_key_env at an unset variable if the server needs no key"]
    return []


def names_a_model(name: str) -> bool:
    """A built-in model, a local model folder or the shape of a hub id ('org/name'). A hub id is
    checked by its shape only (nothing is downloaded here); build's load_model resolves it and
    turns a failure into a ConfigError naming the option."""
    path = Path(name).expanduser()
    return name in BUILTIN_MODELS or is_model_folder(path) or (is_hub_id(name) and not path.exists())


def learner_layout_problems(lr: dict) -> list[str]:
    """How the learners' backend, num_learners, zero_stage, offload and share_prefix fit
    together (``lr``: the learners section, or a learner's settings with its world size as
    num_learners)."""
    problems = []
    n, torch_backend = lr["num_learners"], lr["backend"] == "torch"
    if n > 1 and torch_backend:
        problems.append(f"learners(backend='torch') runs on one process; use backend='deepspeed' for num_learners={n}")
    if torch_backend and lr["zero_stage"] == 3:
        problems.append("learners(backend='torch') with zero_stage=3 partitions the weights, which only DeepSpeed "
                        "does: use backend='deepspeed' (the torch backend holds everything in one process)")
    if lr["share_prefix"] is True and lr["zero_stage"] == 3:
        # ZeRO-3 releases each layer's gathered weights after its forward and gathers them
        # again for its backward; a prefix whose backward comes after other rows' falls
        # outside that schedule (its gradient came out zero)
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


# A learner's settings (learner_settings' keys) and the options they come from: a learner
# built by hand from a dict is held to the options' own rules.
LEARNER_OPTIONS = {"lr": ("training", "lr"), "weight_decay": ("training", "weight_decay"),
                   "clip_eps": ("training", "clip"), "temperature": ("policy", "temperature"),
                   "zero_stage": ("learners", "zero_stage"), "micro_batch_tokens": ("training", "micro_batch_tokens"),
                   "grad_clip": ("training", "grad_clip"), "seed": ("debugging", "seed"),
                   "backend": ("learners", "backend"), "dtype": ("learners", "dtype"),
                   "gradient_checkpointing": ("learners", "gradient_checkpointing"),
                   "offload": ("learners", "offload"), "pack_sequences": ("learners", "pack_sequences"),
                   "share_prefix": ("learners", "share_prefix"), "luffy_gamma": ("luffy", "gamma"),
                   "aepo_advantage_weight": ("aepo", "advantage_weight"), "aepo_entropy_clip": ("aepo", "entropy_clip")}


def learner_problems(settings: dict) -> list[str]:
    """A learner's settings checked once, with the rules of the options they come from; a
    settings dict from a validated config passes. LoRA's are ``lora.check_lora``'s."""
    problems = [p for key, (section, name) in LEARNER_OPTIONS.items()
                if (p := WANTS[section][name].problem("learner", key, settings[key]))]
    if problems:
        return problems
    return learner_layout_problems({**settings, "num_learners": settings["world_size"]})


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


def learner_settings(config) -> dict:
    """The learner's settings (``rti_actors.learner.Learner``'s config dict) for a run:
    ``config`` is an ``RTIConfig`` or a dict of sections (``DEFAULTS`` gives the learner's
    own defaults).

    Keys: algorithm, lr, weight_decay, clip_eps, gspo_clip_eps ((low, high)), temperature (the
    rollout temperature the behaviour log-probs were taken at, so unchanged weights give ratio
    1), zero_stage, micro_batch_tokens, grad_clip, seed, backend, dtype (None: bf16 on GPU and
    on CPUs with native bf16, else fp32), gradient_checkpointing, offload, pack_sequences, share_prefix, lora,
    luffy_gamma (LUFFY's shaping), aepo_advantage_weight and aepo_entropy_clip (AEPO's loss);
    the group adds each rank's rank and world_size.
    """
    t, p, lc = config["training"], config["policy"], config["learners"]
    return {"algorithm": t["algorithm"], "lr": t["lr"], "weight_decay": t["weight_decay"], "clip_eps": t["clip"],
            "gspo_clip_eps": gspo_clip_pair(t["gspo_clip"]), "temperature": p["temperature"],
            "zero_stage": lc["zero_stage"], "micro_batch_tokens": t["micro_batch_tokens"],
            "grad_clip": t["grad_clip"], "seed": config["debugging"]["seed"], "backend": lc["backend"],
            "dtype": lc["dtype"], "gradient_checkpointing": lc["gradient_checkpointing"], "offload": lc["offload"],
            "pack_sequences": lc["pack_sequences"], "share_prefix": lc["share_prefix"], "lora": lc["lora"],
            "luffy_gamma": config["luffy"]["gamma"], "aepo_advantage_weight": config["aepo"]["advantage_weight"],
            "aepo_entropy_clip": config["aepo"]["entropy_clip"]}


def options_markdown() -> str:
    """docs/CONFIG.md: every section and option with its default, what it may hold and why."""
    lines = ["# Configuration", "",
             "Every option of `RTIConfig`, generated from `rti_actors/options.py` (the one place each is",
             "declared; `tests/unit/test_options.py` checks this page is current). A section is set with",
             "the method of its name, e.g. `RTIConfig().training(lr=1e-5)`. *Layout* options say how a",
             "run is laid out or reported; a restore from a checkpoint may change them freely.", ""]
    for name, cls in SECTIONS.items():
        doc = (cls.__doc__ or "").strip()
        lines += [f"## `{name}`", ""]
        if doc and not doc.startswith(cls.__name__ + "("):
            lines += [doc, ""]
        if cls.owner:
            lines += [f"Read only when `training(algorithm=...)` is one of {', '.join(map(repr, cls.owner))}.", ""]
        lines += ["| option | default | may hold | why |", "|---|---|---|---|"]
        for f in fields(cls):
            want = f.metadata["want"]
            holds = want.text() if want else "checked with the options it relates to"
            why = f.metadata["why"] + (" (layout)" if f.metadata["layout"] else "")
            lines.append(f"| `{f.name}` | `{_default(f)!r}` | {holds} | {why.strip()} |".replace("\n", " "))
        lines.append("")
    return "\n".join(lines)
