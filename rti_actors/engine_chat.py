"""``EngineChat``: chat messages in, text out, through our engine actors.

Environments speak text (``envs`` never imports ``policies``): τ²'s LLM user takes
``chat_fn(messages) -> str`` and Hard20's rubric judge ``judge_fn(prompt) -> str``. An
``EngineChat`` is both: it renders the messages with the model's chat template, sends the
ids to an ``EnginePool`` and decodes the reply. It is pickled into every env runner, so
it carries only engine names (or handles) and settings; the tokenizer is loaded once per process.

Pointed at the policy's own engines it sees the current weights (the user or judge then
changes as the policy trains); a separate engine actor over a model folder stays fixed.
"""

from __future__ import annotations

import functools

from policies.chat import CHATML_TEMPLATE, valid_text
from policies.engines import SamplingParams
from rti_actors.engine_actor import EnginePool
from rti_actors.env_runner import request_seed


@functools.lru_cache(maxsize=8)
def _tokenizer(model_path: str):
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(model_path)


class EngineChat:
    """``engines``: engine actor handles or names (``EnginePool``'s)."""

    def __init__(self, engines: list, model_path: str, max_tokens: int = 256, temperature: float = 0.0,
                 seed: int = 0, max_model_len: int | None = None):
        if max_tokens < 1:
            raise ValueError(f"EngineChat max_tokens must be >= 1, got {max_tokens}")
        self.pool = EnginePool(engines)
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
        sampling = SamplingParams(max_tokens=self.max_tokens, temperature=self.temperature, top_p=1.0)
        gen = self.pool.generate([ids], sampling, [request_seed(self.seed, ids)])[0]
        return tok.decode([i for i in gen.token_ids if i != tok.eos_token_id], skip_special_tokens=False).strip()

    def judge(self, prompt: str) -> str:
        """``judge_fn(prompt) -> str``: the prompt as one user message."""
        return self([{"role": "user", "content": prompt}])

    def _prompt_ids(self, tok, messages: list[dict]) -> list[int]:

        if self.max_model_len is None:
            self.max_model_len = self.pool.call("max_model_len")
        budget = self.max_model_len - self.max_tokens
        if budget < 16:
            raise ValueError(f"EngineChat max_tokens={self.max_tokens} leaves no room for a prompt in the "
                             f"engine's context of {self.max_model_len} tokens")
        template = tok.chat_template or CHATML_TEMPLATE
        messages = [{"role": m["role"], "content": valid_text(m.get("content") or "")} for m in messages]
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
