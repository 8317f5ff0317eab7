"""``EngineChat``: chat messages in, text out, through our engine actors.

Environments speak text (``envs`` never imports ``policies``): τ²'s LLM user takes
``chat_fn(messages) -> str`` and Hard20's rubric judge ``judge_fn(prompt) -> str``. An
``EngineChat`` is both: it renders the messages with the model's chat template, sends the
ids to an ``EnginePool`` and decodes the reply. It is pickled into every env runner, so
it carries only actor handles and settings; the tokenizer is loaded once per process.

Pointed at the policy's own engines it sees the current weights (the user or judge then
changes as the policy trains); a separate engine actor over a model folder stays fixed.
"""

from __future__ import annotations

import functools
from pathlib import Path

import ray

from rti_actors.engine_actor import EnginePool
from rti_actors.env_runner import request_seed


@functools.lru_cache(maxsize=8)
def _tokenizer(model_path: str):
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(model_path)


class EngineChat:
    def __init__(self, engine_handles: list, model_path: str, max_tokens: int = 256, temperature: float = 0.0,
                 seed: int = 0, max_model_len: int | None = None):
        if max_tokens < 1:
            raise ValueError(f"EngineChat max_tokens must be >= 1, got {max_tokens}")
        self.pool = EnginePool(engine_handles)
        self.model_path = model_path
        self.max_tokens, self.temperature, self.seed = max_tokens, temperature, seed
        self.max_model_len = max_model_len  # None: asked from the engine on first use

    def __repr__(self) -> str:
        return f"EngineChat(model={self.model_path!r}, engines={len(self.pool.handles)}, temperature={self.temperature})"

    def __call__(self, messages: list[dict]) -> str:
        tok = _tokenizer(self.model_path)
        ids = self._prompt_ids(tok, messages)
        # The seed is a function of the prompt: the same history always gets the same reply,
        # so RTI's replay of an episode prefix reproduces the user's turns even when sampling.
        sampling = {"max_tokens": self.max_tokens, "temperature": self.temperature, "top_p": 1.0}
        gen = self.pool.generate([ids], sampling, [request_seed(self.seed, ids)])[0]
        return tok.decode([i for i in gen["token_ids"] if i != tok.eos_token_id], skip_special_tokens=False).strip()

    def judge(self, prompt: str) -> str:
        """``judge_fn(prompt) -> str``: the prompt as one user message."""
        return self([{"role": "user", "content": prompt}])

    def _prompt_ids(self, tok, messages: list[dict]) -> list[int]:
        from policies.chat import CHATML_TEMPLATE

        if self.max_model_len is None:
            self.max_model_len = ray.get(self.pool.handles[0].max_model_len.remote())
        budget = self.max_model_len - self.max_tokens
        if budget < 16:
            raise ValueError(f"EngineChat max_tokens={self.max_tokens} leaves no room for a prompt in the "
                             f"engine's context of {self.max_model_len} tokens")
        template = tok.chat_template or CHATML_TEMPLATE
        messages = [{"role": m["role"], "content": m.get("content") or ""} for m in messages]
        while True:
            text = tok.apply_chat_template(messages, chat_template=template, tokenize=False, add_generation_prompt=True)
            ids = tok.encode(text, add_special_tokens=False)
            if len(ids) <= budget:
                return ids
            # A long conversation loses its oldest turns first (the system prompt and the
            # latest turn stay); a single oversized message keeps its head and its end.
            first = 1 if messages[0]["role"] == "system" else 0
            if len(messages) - first > 1:
                del messages[first]
                continue
            return ids[:budget // 2] + ids[len(ids) - (budget - budget // 2):]


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


def resolve_env_config(env_config: dict, policy_engines: list, policy_path: str, engine_kind: str,
                       engine_kwargs: dict, num_gpus: float = 0) -> tuple[dict, list]:
    """The env_config the env runners get, and the engine actors started for it. Raises
    ``ConfigError`` for values that cannot work. The caller's dict is not changed (it is
    saved with checkpoints, so it keeps the plain strings)."""
    from policies.models import load_model
    from rti_actors.config import ConfigError
    from rti_actors.engine_actor import EngineActor

    cfg = dict(env_config)
    opt = {**CHAT_DEFAULTS, **cfg}.get  # not written into cfg: custom envs may reject unknown keys
    started: dict[str, object] = {}

    def chat(key: str, model, max_tokens: int, temperature: float = 0.0) -> EngineChat:
        if model == "policy":
            return EngineChat(policy_engines, policy_path, max_tokens, temperature)
        if not isinstance(model, str) or not model:
            raise ConfigError(f"env_config[{key!r}]={model!r}: use 'policy', a built-in model name or a local model folder")
        try:
            path = load_model(model)
        except (ValueError, RuntimeError) as e:
            raise ConfigError(f"env_config[{key!r}]: {e}") from None
        if path not in started:
            started[path] = ray.remote(EngineActor).options(num_cpus=0, num_gpus=num_gpus).remote(
                engine_kind, path, engine_kwargs)
        return EngineChat([started[path]], path, max_tokens, temperature)

    def endpoint_ok(key: str) -> None:
        ep = cfg.get(key)
        if not isinstance(ep, dict) or not ep.get("base_url") or not ep.get("model"):
            raise ConfigError(f"env_config[{key!r}] must be a dict with 'base_url' (e.g. http://host:8000/v1) and "
                              f"'model' (and optionally 'api_key_env'), got {ep!r}")

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
    return cfg, list(started.values())
