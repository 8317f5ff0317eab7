"""The transformers engine: always available, and the reference for scoring.

Generation is a plain KV-cached sampling loop over a left-padded batch, so every sampled
token's log-prob is computed from the exact distribution it was drawn from. Each request
with a seed has its own ``torch.Generator``, so results do not depend on batch order.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from policies.engines.base import Generation, SamplingParams, check_prompts, check_version, generation_budget


def _dtype(name: str) -> torch.dtype:
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]


class HFEngine:
    """Implements ``generate`` / ``score`` / ``update_weights`` with transformers."""

    def __init__(self, model_path: str, dtype: str = "float32", max_model_len: int | None = None,
                 device: str | None = None, seed: int = 0, score_batch_tokens: int = 16384):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=_dtype(dtype)).to(self.device).eval()
        cfg_len = getattr(self.model.config, "max_position_embeddings", 4096)
        self.max_model_len = min(max_model_len or cfg_len, cfg_len)
        self.eos_id = self.tokenizer.eos_token_id
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.eos_id
        self.version = 0
        self.seed = seed
        self.score_batch_tokens = score_batch_tokens
        self._calls = 0
        self._grammars: dict = {}  # json schema -> xgrammar's compiled grammar

    def _matchers(self, schema: str | None, n: int) -> list | None:
        """One grammar matcher per request for a JSON-schema output (xgrammar, the library
        vLLM uses for the same job), so both engines constrain a verdict alike."""
        if schema is None:
            return None
        import xgrammar as xgr

        if schema not in self._grammars:
            info = xgr.TokenizerInfo.from_huggingface(self.tokenizer, vocab_size=self.model.config.vocab_size,
                                                      stop_token_ids=[self.eos_id])
            self._grammars[schema] = xgr.GrammarCompiler(info).compile_json_schema(schema, any_whitespace=False)
        return [xgr.GrammarMatcher(self._grammars[schema]) for _ in range(n)]

    # ---- generation -----------------------------------------------------------------------
    @torch.no_grad()
    def generate(self, prompts: list[list[int]], sampling: SamplingParams,
                 seeds: list[int] | None = None) -> list[Generation]:
        """``seeds`` (one per prompt) override ``sampling.seed + i``."""
        check_prompts(prompts, self.max_model_len)
        self._calls += 1
        n = len(prompts)
        budgets = [generation_budget(len(p), sampling, self.max_model_len) for p in prompts]
        stops = {self.eos_id, *sampling.stop_token_ids}
        gens = []
        for i in range(n):
            g = torch.Generator(device=self.device)
            # unseeded requests still differ from call to call and from each other
            if seeds is not None:
                g.manual_seed(seeds[i])
            else:
                g.manual_seed(sampling.seed + i if sampling.seed is not None else hash((self.seed, self._calls, i)) % 2**63)
            gens.append(g)

        width = max(len(p) for p in prompts)
        input_ids = torch.full((n, width), self.pad_id, dtype=torch.long, device=self.device)
        attn = torch.zeros((n, width), dtype=torch.long, device=self.device)
        for i, p in enumerate(prompts):
            input_ids[i, width - len(p):] = torch.tensor(p, device=self.device)
            attn[i, width - len(p):] = 1
        out_ids: list[list[int]] = [[] for _ in range(n)]
        out_lp: list[list[float]] = [[] for _ in range(n)]
        finish = ["length"] * n
        alive = [b > 0 for b in budgets]
        past = None
        matchers = self._matchers(sampling.json_schema, n)
        if matchers:
            import xgrammar as xgr
            bitmask = xgr.allocate_token_bitmask(1, self.model.config.vocab_size)
        step_ids = input_ids
        position_ids = (attn.cumsum(-1) - 1).clamp(min=0)
        step_pos = position_ids
        while any(alive):
            out = self.model(input_ids=step_ids, attention_mask=attn, position_ids=step_pos,
                             past_key_values=past, use_cache=True)
            past = out.past_key_values
            logits = out.logits[:, -1, :].float()
            next_ids = torch.full((n,), self.pad_id, dtype=torch.long, device=self.device)
            for i in range(n):
                if not alive[i]:
                    continue
                if matchers:  # tokens that would break the schema get probability 0
                    matchers[i].fill_next_token_bitmask(bitmask)
                    xgr.apply_token_bitmask_inplace(logits[i:i + 1], bitmask)
                tok, lp = self._sample(logits[i], sampling, gens[i])
                if matchers and tok not in stops:
                    matchers[i].accept_token(tok)
                next_ids[i] = tok
                out_ids[i].append(tok)
                out_lp[i].append(lp)
                if tok in stops:
                    finish[i], alive[i] = "stop", False
                elif len(out_ids[i]) >= budgets[i]:
                    alive[i] = False
            step_ids = next_ids[:, None]
            attn = torch.cat([attn, torch.ones((n, 1), dtype=attn.dtype, device=self.device)], dim=1)
            step_pos = step_pos[:, -1:] + 1
        return [Generation(out_ids[i], out_lp[i], finish[i], self.version) for i in range(n)]

    @staticmethod
    def _sample(logits: torch.Tensor, sampling: SamplingParams, gen: torch.Generator) -> tuple[int, float]:
        if sampling.temperature == 0:
            logp = F.log_softmax(logits, dim=-1)
            tok = int(torch.argmax(logits))
            return tok, float(logp[tok])
        logp = F.log_softmax(logits / sampling.temperature, dim=-1)
        probs = logp.exp()
        if sampling.top_p < 1.0:
            sorted_p, order = probs.sort(descending=True)
            keep = (sorted_p.cumsum(0) - sorted_p) < sampling.top_p
            mask = torch.zeros_like(probs, dtype=torch.bool)
            mask[order[keep]] = True
            probs = torch.where(mask, probs, torch.zeros_like(probs))
        tok = int(torch.multinomial(probs, 1, generator=gen))
        return tok, float(logp[tok])

    # ---- scoring --------------------------------------------------------------------------
    @torch.no_grad()
    def score(self, prompts: list[list[int]], completions: list[list[int]], temperature: float = 1.0) -> list[list[float]]:
        if len(prompts) != len(completions):
            raise ValueError(f"{len(prompts)} prompts but {len(completions)} completions")
        check_prompts([p + c for p, c in zip(prompts, completions)], self.max_model_len + 1)
        t = temperature if temperature > 0 else 1.0
        results: list[list[float]] = [None] * len(prompts)  # type: ignore[list-item]
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]) + len(completions[i]))
        batch: list[int] = []
        for i in order + [None]:
            seq_len = len(prompts[i]) + len(completions[i]) if i is not None else 0
            if batch and (i is None or (len(batch) + 1) * seq_len > self.score_batch_tokens):
                for j, lps in zip(batch, self._score_batch([prompts[k] for k in batch], [completions[k] for k in batch], t)):
                    results[j] = lps
                batch = []
            if i is not None:
                batch.append(i)
        return results

    def _score_batch(self, prompts, completions, temperature) -> list[list[float]]:
        seqs = [p + c for p, c in zip(prompts, completions)]
        width = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), width), self.pad_id, dtype=torch.long, device=self.device)
        attn = torch.zeros_like(ids)
        for i, s in enumerate(seqs):
            ids[i, :len(s)] = torch.tensor(s, device=self.device)
            attn[i, :len(s)] = 1
        logits = self.model(input_ids=ids, attention_mask=attn).logits.float()
        logp = F.log_softmax(logits[:, :-1] / temperature, dim=-1)
        token_lp = logp.gather(-1, ids[:, 1:, None]).squeeze(-1)
        out = []
        for i, (p, c) in enumerate(zip(prompts, completions)):
            out.append(token_lp[i, len(p) - 1: len(p) - 1 + len(c)].tolist())
        return out

    # ---- weights --------------------------------------------------------------------------
    @torch.no_grad()
    def update_weights(self, named_tensors, version: int) -> int:
        check_version(self.version, version)
        params = dict(self.model.named_parameters())
        items = named_tensors.items() if isinstance(named_tensors, dict) else named_tensors
        for name, tensor in items:
            if name not in params:
                if name == "lm_head.weight" and getattr(self.model.config, "tie_word_embeddings", False):
                    continue
                raise KeyError(f"unknown parameter {name!r} in weight update")
            params[name].copy_(tensor.to(params[name].dtype))
        self.version = version
        return self.version
