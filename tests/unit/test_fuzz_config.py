"""Config validation under hostile values. Every option of every section, set to each value
of a hostile list, either validates or raises ``ConfigError`` whose message names the
option, never anything else; then seeded random mixes of several such options; then the
explicit cases (non-finite numbers, out-of-range counts, strings and booleans for numbers)."""

import math
import random
import re

import pytest

from rti_actors.config import RTIConfig
from rti_actors.options import CHECKED_APART, DEFAULTS, WANTS, ConfigError

HOSTILE = [math.nan, math.inf, -math.inf, -1, 0, 1, -0.5, 0.5, 1.5, 10**18, 2**70, 1e308, "1e-6", "", "x",
           True, False, None, [], {}, [1, 2], {"a": 1}]
OPTIONS = [(section, key) for section, values in DEFAULTS.items() for key in values]
BASE = {"environment": {"env": "Navigation-v0"}, "policy": {"engine": "hf"}}


def _config(changes: dict) -> RTIConfig:
    d = {section: dict(values) for section, values in BASE.items()}
    for (section, key), value in changes.items():
        d.setdefault(section, {})[key] = value
    return RTIConfig.from_dict(d)


def _names(message: str, section: str, key: str) -> bool:
    """``section(key=...)``, or ``section(a, key, b)`` in the resource messages."""
    return re.search(rf"\b{section}\((?:[^)]*[ ,(])?{key}\b", message) is not None


def _outcome(changes: dict) -> str | None:
    """None when the config validates, else the ConfigError's message; anything else raises."""
    try:
        _config(changes).validate(available_cpus=64, available_gpus=8)
    except ConfigError as e:
        return str(e)
    return None


def test_every_default_satisfies_its_own_rule():
    for section, values in DEFAULTS.items():
        assert set(WANTS[section]) | CHECKED_APART[section] == set(values), section
        for key, want in WANTS[section].items():
            assert want.accepts(values[key]), (section, key)


def test_the_base_config_and_the_defaults_validate():
    assert _outcome({}) is None


@pytest.mark.parametrize("section,key", OPTIONS)
def test_hostile_values_fail_cleanly_naming_the_option(section, key):
    for value in HOSTILE:
        message = _outcome({(section, key): value})
        assert message is None or _names(message, section, key), (value, message)


def test_seeded_mixes_of_hostile_values():
    rng = random.Random(20240611)
    for _ in range(400):
        changes = {rng.choice(OPTIONS): rng.choice(HOSTILE) for _ in range(rng.randint(2, 4))}
        message = _outcome(changes)
        assert message is None or any(_names(message, s, k) for s, k in changes), (changes, message)


REJECTED = [
    # (section, key, value, what the message must say)
    *[("training", "lr", v, "training(lr={}) must be a finite number > 0") for v in
      (math.nan, math.inf, -math.inf, 0, -1e-6, "1e-6", True)],
    *[("training", "weight_decay", v, "training(weight_decay={}) must be a finite number >= 0") for v in
      (math.nan, math.inf, -0.1, "0.1")],
    *[("training", "grad_clip", v, "training(grad_clip={}) must be a finite number >= 0") for v in
      (math.nan, math.inf, -1)],
    *[("policy", "temperature", v, "policy(temperature={}) must be a finite number >= 0") for v in
      (math.nan, math.inf, -0.5, "0.8")],
    *[("policy", "top_p", v, "policy(top_p={}) must be a finite number in (0, 1]") for v in
      (0, 1.5, -1, math.nan, math.inf)],
    *[("policy", "max_new_tokens", v, "policy(max_new_tokens={}) must be an integer >= 1") for v in
      (0, -1, 1.5, "256", True)],
    *[("interventions", "ppl_threshold", v, "interventions(ppl_threshold={}) must be a finite number >= 0 or "
       "float('inf')") for v in (math.nan, -math.inf, -1, "5", True)],
    *[("interventions", "corrector_temperature", v, "interventions(corrector_temperature={}) must be a finite "
       "number >= 0") for v in (math.nan, math.inf, -1)],
    *[("interventions", "eps_cal", v, "interventions(eps_cal={}) must be a finite number in [0, 1)") for v in
      (math.nan, math.inf, 1, -0.1)],
    *[("interventions", "interventions_per_trajectory", v, "choose one of [1, 2]") for v in (True, 1.0, 3)],
    *[("sft", "lr", v, "sft(lr={}) must be a finite number > 0") for v in (math.nan, math.inf, 0, "1e-5", False)],
    *[("env_runners", key, -1, f"env_runners({key}=-1) must be a finite number >= 0")
      for key in ("num_cpus_per_env_runner", "num_cpus_per_engine", "num_gpus_per_engine")],
    *[("learners", key, -1, f"learners({key}=-1) must be a finite number >= 0")
      for key in ("num_cpus_per_learner", "num_gpus_per_learner")],
    *[("env_runners", "num_threads_per_engine", v, "must be None or an integer >= 1") for v in (-1, 0, 2.0)],
    *[("learners", "num_threads_per_learner", v, "must be None or an integer >= 1") for v in (-1, 0)],
    *[("fault_tolerance", key, -1, f"fault_tolerance({key}=-1) must be an integer >= 0")
      for key in ("max_restarts", "max_task_retries", "max_episode_retries")],
    ("fault_tolerance", "start_timeout_s", math.inf, "fault_tolerance(start_timeout_s=inf) must be a finite number > 0"),
    ("training", "group_size", True, "training(group_size=True) must be an integer >= 2: GRPO needs at least 2"),
    ("training", "tasks_per_iteration", "4", "training(tasks_per_iteration='4') must be an integer >= 1"),
    ("env_runners", "num_env_runners", True, "env_runners(num_env_runners=True) must be an integer >= 1"),
    ("env_runners", "num_engines", 2**70, "must be an integer >= 1 and below 2**63"),
    ("learners", "zero_stage", True, "learners(zero_stage=True): choose one of [0, 1, 2, 3]"),
    ("learners", "gradient_checkpointing", 1, "learners(gradient_checkpointing=1) must be True or False"),
    ("debugging", "seed", -1, "debugging(seed=-1) must be an integer >= 0"),
    ("evaluation", "temperature", math.nan, "evaluation(temperature=nan) must be None or a finite number >= 0"),
    ("evaluation", "num_samples", 0, "evaluation(num_samples=0) must be an integer >= 1"),
    ("sft", "min_reward", math.nan, "sft(min_reward=nan) must be None or a finite number"),
    ("interventions", "endpoint_api_key_env", "MY KEY", "must be an environment variable name"),
    ("reporting", "progress_bar", "yes", "reporting(progress_bar='yes') must be None or True or False"),
    ("environment", "env", 3, "environment(env=3) must be a registered environment id"),
    ("environment", "env_config", [], "environment(env_config=[]) must be a dict"),
    ("policy", "dtype", "fp8", "policy(dtype='fp8'): choose one of"),
]


@pytest.mark.parametrize("section,key,value,needle", REJECTED)
def test_bad_values_are_rejected_with_the_option_and_its_range(section, key, value, needle):
    message = _outcome({(section, key): value})
    assert message is not None and needle.format(repr(value)) in message, message


ACCEPTED = [("interventions", "ppl_threshold", math.inf), ("interventions", "ppl_threshold", 0),
            ("interventions", "eps_cal", 0), ("policy", "top_p", 1), ("policy", "temperature", 0),
            ("training", "grad_clip", 0), ("training", "lr", 1), ("env_runners", "num_threads_per_engine", 4),
            ("learners", "num_gpus_per_learner", 0), ("sft", "min_reward", None), ("sft", "min_reward", -1.0),
            ("evaluation", "num_tasks", 5), ("fault_tolerance", "max_restarts", 0),
            ("policy", "fallback_chat_template", None), ("learners", "dtype", "bfloat16")]


@pytest.mark.parametrize("section,key,value", ACCEPTED)
def test_legal_edge_values_pass(section, key, value):
    assert _outcome({(section, key): value}) is None


def test_every_problem_is_reported_at_once():
    message = _outcome({("training", "lr"): math.nan, ("policy", "top_p"): 0, ("sft", "lr"): "1e-5"})
    assert all(s in message for s in ("training(lr=nan)", "policy(top_p=0)", "sft(lr='1e-5')"))


def test_a_string_where_a_number_is_meant_never_reaches_a_comparison():
    # each of these compared a str with a number before (TypeError out of validate)
    for section, key in [("training", "tasks_per_iteration"), ("training", "max_policy_lag"),
                         ("policy", "max_model_len"), ("evaluation", "num_samples"), ("learners", "num_gpus_per_learner"),
                         ("env_runners", "num_gpus_per_engine"), ("interventions", "ppl_threshold")]:
        message = _outcome({(section, key): "1"})
        assert message is not None and f"{section}({key}='1')" in message
