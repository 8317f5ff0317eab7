"""τ²-Bench (airline, retail, telecom) as offline multi-turn Gymnasium environments.

Implemented from the behavioural specification of τ²-Bench (Sierra Research, MIT): the
domains' tools and data models, the telecom phone and its sync with the carrier CRM, the
orchestration with a simulated user, and τ²'s reward. See ``env.py`` for the env_config and
``DEVIATIONS.md`` for every deliberate difference from the original.

    import gymnasium as gym, envs
    env = gym.make("Tau2Telecom-v0", env_config={
        "split": "test",                       # train | test | base (| small for telecom)
        "user": "endpoint",                    # or "llm" + user_chat_fn, or "scripted" (tests only)
        "user_endpoint": {"base_url": "http://localhost:8000/v1", "model": "Qwen/Qwen3-8B",
                          "api_key_env": "OPENAI_API_KEY"},
        "data_dir": None,                      # a tau2-bench data/ folder; None = cached wheel data
    })
    obs, info = env.reset(seed=0)              # system prompt, greeting, the user's first message
    obs, reward, terminated, truncated, info = env.step('<tool_call>{"name": ..., "arguments": {...}}</tool_call>')
"""

from envs.tau2.data import Tau2Data, Tau2DataError, resolve_data_dir
from envs.tau2.env import Tau2AirlineEnv, Tau2Env, Tau2RetailEnv, Tau2TelecomEnv
from envs.tau2.evaluator import is_success, pass_hat_k
from envs.tau2.judge import LLMJudge
from envs.tau2.llm_user import LLMUser, OpenAIChatClient
from envs.tau2.users import ScriptedUser, UserContext, UserSimulator

__all__ = ["Tau2AirlineEnv", "Tau2Env", "Tau2RetailEnv", "Tau2TelecomEnv", "Tau2Data", "Tau2DataError",
           "resolve_data_dir", "is_success", "pass_hat_k", "LLMJudge", "LLMUser", "OpenAIChatClient",
           "ScriptedUser", "UserContext", "UserSimulator"]
