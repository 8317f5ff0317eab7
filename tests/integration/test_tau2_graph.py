"""τ² and Hard20 through the actor graph: an RTI iteration on Tau2Telecom-v0, a τ² episode
whose user is the policy's own engine (EngineChat), and Hard20 judged by the policy."""

import math
import pickle
import re
import warnings
from pathlib import Path

import gymnasium as gym
import pytest

from rti_actors import RTIConfig
from rti_actors.build import ExtraEngines, resolve_env_config
from rti_actors.engine_chat import EngineChat
from rti_actors.options import ConfigError
from rti_actors.trajectory import EpisodeSpec

pytestmark = pytest.mark.integration

# τ² telecom's agent prompt (policy + tech-support manual + tools) is ~7.6k tokens with
# SmolLM2's tokenizer: more than the shared tiny model's 4096 positions.
MAX_LEN = 9216
QUESTION = "Does the answer meet the criterion? Reply with JSON."


@pytest.fixture(scope="module")
def long_model(tmp_path_factory):
    from policies.models import make_tiny_model
    return make_tiny_model(tmp_path_factory.mktemp("tiny_long"), max_position_embeddings=MAX_LEN)


def _config(env, env_config, model, tmp_path, name, algorithm="rti", max_len=MAX_LEN):
    return (RTIConfig()
            .environment(env, env_config=env_config)
            .policy(model=model, engine="hf", max_new_tokens=8, max_model_len=max_len)
            .env_runners(num_env_runners=1, num_envs_per_env_runner=2)
            .training(algorithm=algorithm, group_size=2, tasks_per_iteration=1, lr=1e-4)
            .interventions(roles="self", ppl_threshold=math.inf, verifier_llm=False, max_role_tokens=16,
                           max_validator_steps=1)
            .reporting(run_dir=str(tmp_path), run_name=name, tensorboard=False, plot=False))


def _first_user_message(messages):
    return next(m["content"] for m in messages if m["role"] == "user")


def test_bad_chat_model_values_fail_with_config_errors(tmp_path):
    bad = [({"user": "llm"}, "user_model='policy'"),
           ({"user": "scripted", "user_model": "policy"}, "only with user='llm'"),
           ({"user": "llm", "user_model": str(tmp_path / "missing")}, "unknown model"),
           ({"user": "endpoint", "user_endpoint": {"model": "m"}}, "base_url"),
           ({"judge": "model"}, "judge_model"),
           ({"judge": "endpoint"}, "base_url")]
    for env_config, words in bad:
        with pytest.raises(ConfigError, match=re.escape(words)):
            resolve_env_config(env_config, [], "unused", ExtraEngines("hf", {}))
    # plain configs pass through untouched, and the caller's dict is never changed
    cfg = {"user": "scripted", "max_turns": 3}
    extra = ExtraEngines("hf", {})
    assert resolve_env_config(cfg, [], "unused", extra) == cfg and extra.handles() == []


def test_a_model_folder_gets_one_engine_actor_of_its_own(ray_cluster, tiny_model_path):
    import ray

    cfg = {"user": "llm", "user_model": tiny_model_path, "judge": "model", "judge_model": tiny_model_path}
    extra = ExtraEngines("hf", {"max_model_len": 1024})
    out = resolve_env_config(cfg, [], "unused", extra)
    started = extra.handles()
    try:
        assert len(started) == 1  # the user and the judge share the folder's engine
        # the runners get the engine's name, a plain string a restarted runner cannot lose
        names = list(extra.names.values())
        assert out["user_chat_fn"].pool.handles == names and out["judge_fn"].__self__.pool.handles == names
        assert out["judge"] == "fn" and out["judge_name"] == Path(tiny_model_path).name
        assert cfg["judge"] == "model" and "judge_fn" not in cfg
        assert isinstance(out["user_chat_fn"]([{"role": "user", "content": "hi"}]), str)
        assert isinstance(pickle.loads(pickle.dumps(out["judge_fn"]))("Is it done?"), str)  # as a runner gets it
    finally:
        for handle in started:
            ray.kill(handle)


def test_rti_iteration_on_tau2_telecom(ray_cluster, long_model, tmp_path):
    algo = _config("Tau2Telecom-v0", {"user": "scripted", "max_turns": 2}, long_model, tmp_path, "tau2-rti").build()
    try:
        m = algo.train()
    finally:
        algo.stop()
    assert m["num_episodes"] == 2 and m["pre_intervention_pass_at_G"] == 0.0  # a random model solves nothing
    assert m["frac_context_truncated"] == 0.0  # the telecom prompt fits: episodes really ran
    assert m["rti/provider"] == "self" and m["rti/triggered_groups"] == 1 and m["rti/frac_triggered"] == 1.0
    assert m["rti/candidates"] == 2 and m["rti/validator_calls"] == 2
    assert "loss" in m["learner"] or m["learner"].get("skipped")


def test_tau2_llm_user_is_the_policy_engine(ray_cluster, long_model, tmp_path):
    # sampled, not greedy: the random model's greedy reply is an immediate eos (an empty
    # user turn, which τ² ends as a user error); the seed is a function of the prompt
    env_config = {"user": "llm", "user_model": "policy", "user_max_tokens": 12, "user_temperature": 1.0,
                  "max_turns": 2}
    algo = (_config("Tau2Telecom-v0", env_config, long_model, tmp_path, "tau2-llm-user", algorithm="grpo")
            .policy(temperature=1.0).build())  # at 0.8 this seed's first agent turn is empty
    try:
        assert algo.config["environment"]["env_config"] == env_config  # the saved config keeps plain strings
        tid = algo.train_ids[0]
        traj = algo.rollouts.play([EpisodeSpec(tid)])[0]
        # The same opening on the driver, with an EngineChat over the same engine: the user
        # turn in the runner's episode came from the policy's engine, not from a script.
        chat = EngineChat(algo.engines, algo.model_path, max_tokens=12, temperature=1.0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            env = gym.make("Tau2Telecom-v0", env_config={**env_config, "user_chat_fn": chat})
            scripted = gym.make("Tau2Telecom-v0", env_config={"user": "scripted"})
        obs, info = env.reset(options={"task_id": tid})
        opening = _first_user_message(obs)
    finally:
        algo.stop()
    assert info["user_simulator"] == "llm"
    assert _first_user_message(traj.messages) == opening
    assert opening != _first_user_message(scripted.reset(options={"task_id": tid})[0])
    assert "user_error" not in traj.info
    assert traj.info["termination_reason"] in ("max_turns", "user_stop", "too_many_errors", "max_steps")
    assert traj.num_turns == 2 and not traj.context_truncated
    # the user answered the agent's text turn too, again through the engine
    assert sum(m["role"] == "user" for m in traj.messages) >= 2


def test_hard20_judged_by_the_policy(ray_cluster, tiny_model_path, tmp_path):
    from transformers import AutoTokenizer

    from policies.engines import SamplingParams, make_engine
    from rti_actors.env_runner import request_seed
    algo = _config("Hard20-v0", {"judge": "policy", "max_turns": 2}, tiny_model_path, tmp_path, "hard20-judge",
                   max_len=4096).build()
    try:
        # sampled, so the random model says something other than newlines
        chat = EngineChat(algo.engines, algo.model_path, max_tokens=10, temperature=1.0, seed=3)
        reply = chat.judge(QUESTION)
        tid = algo.train_ids[0]
        traj = algo.rollouts.play([EpisodeSpec(tid)])[0]
        m = algo.train()
    finally:
        algo.stop()
    tok = AutoTokenizer.from_pretrained(tiny_model_path)
    text = tok.apply_chat_template([{"role": "user", "content": QUESTION}], tokenize=False, add_generation_prompt=True)
    ids = tok.encode(text, add_special_tokens=False)
    gen = make_engine("hf", tiny_model_path).generate([ids], SamplingParams(max_tokens=10, temperature=1.0),
                                                      seeds=[request_seed(3, ids)])[0]
    assert reply and reply == tok.decode([i for i in gen.token_ids if i != tok.eos_token_id]).strip()
    # Hard20 graded every rubric item by asking the policy (a random model's verdicts are
    # unreadable, so each falls back, and the breakdown says the judge was asked)
    b = traj.info["reward_breakdown"]
    assert traj.info["judge"] == b["judge"] == "fn:policy"
    assert b["rubric"] and {r["source"] for r in b["rubric"]} <= {"judge", "fallback (judge unreadable)"}
    assert m["rti/triggered_groups"] == 1 and m["num_episodes"] == 2
