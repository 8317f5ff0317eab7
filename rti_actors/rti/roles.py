"""The three intervention roles — Validator, Corrector, Verifier — as stateless actors.

Two providers answer the same calls (``validate``, ``correct``; ``verify`` is a model's
only), so the pipeline's stages have one code path whoever plays the roles:
``RoleActor`` (a model: the policy itself, another model, an endpoint) and ``RuleRoles``
(an environment's own rule-based Validator/Corrector, its ``rti_rules()`` hook).

With ``roles="self"`` (the paper's setting) every role is the policy itself: the role
prompt is rendered with the policy's chat template and sent to the same engine actors the
rollouts use, so the roles see exactly the rollout weights. A local model folder gets its
own engine actor; an ``http(s)://`` URL is any OpenAI-compatible chat endpoint. Role
prompts live in ``rti_actors/rti/prompts/`` as readable text files (English and Chinese,
chosen by the task's language). Nothing a role sees ever enters a training sample: the
only thing that leaves a role is a verdict, or the Corrector's new turn.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from envs.openai_client import OpenAIChatClient
from envs.tool_calls import format_assistant_turn
from policies.chat import valid_text
from policies.engines import SamplingParams
from rti_actors.faults import Restartable
from rti_actors.rti.records import Attempt, CorrectQuery, Finding, ValidateQuery, VerifyQuery
from rti_actors.rti.verdicts import parse_validator, parse_verifier

PROMPTS = Path(__file__).with_name("prompts")
VALIDATOR_PREFIX = '{"is_valid": '
VERIFIER_PREFIX = '{"consistent": '
_CJK = re.compile(r"[\u4e00-\u9fff]")

# What a role prompt holds, in characters: the agent's system prompt (its domain policy,
# head kept), the conversation (newest turns kept, each tool output cut in the middle) and
# the reward evidence (head kept). _prompt_ids then cuts the middle of whatever still
# exceeds the role engine's context.
SYSTEM_CHARS, HISTORY_CHARS, TOOL_CHARS, EVIDENCE_CHARS = 4000, 6000, 800, 3000

# The verdicts as JSON schemas: on our own engines the verdict is decoded under them, so a
# small policy writes exactly one object of the right shape (string lengths bounded so the
# object closes within max_role_tokens).
_TEXT = {"type": "string", "maxLength": 200}
VALIDATOR_SCHEMA = json.dumps({
    "type": "object", "additionalProperties": False,
    "properties": {"is_valid": {"type": "boolean"},
                   "error_types": {"type": "array", "items": {"type": "string", "maxLength": 40}, "maxItems": 3},
                   "diagnosis": _TEXT, "suggest_next": _TEXT},
    "required": ["is_valid", "error_types", "diagnosis", "suggest_next"]})
VERIFIER_SCHEMA = json.dumps({
    "type": "object", "additionalProperties": False,
    "properties": {"consistent": {"type": "boolean"}, "plausible": {"type": "boolean"}, "reason": _TEXT},
    "required": ["consistent", "plausible", "reason"]})


def language_of(messages: list[dict]) -> str:
    """The task's language: Chinese if the user's request contains CJK characters."""
    first_user = next((m.get("content") or "" for m in messages if m["role"] == "user"), "")
    return "zh" if _CJK.search(first_user) else "en"


def load_prompt(role: str, language: str) -> str:
    return (PROMPTS / f"{role}.{language}.txt").read_text(encoding="utf-8")


def history_text(messages: list[dict], max_chars: int = HISTORY_CHARS, tool_chars: int = TOOL_CHARS,
                 system_chars: int = SYSTEM_CHARS) -> str:
    """A readable transcript for role prompts: the system prompt first (the domain policy a
    step is judged against; tool schemas are given separately), long tool outputs
    shortened, the oldest turns dropped first."""

    head, lines = "", []
    for m in messages:
        role, content = m["role"], (m.get("content") or "")
        if role == "system":
            head = f"System: {_head(content, system_chars)}\n"
        elif role == "assistant":
            lines.append(f"Assistant: {format_assistant_turn(content, m.get('tool_calls') or [])}")
        elif role == "tool":
            if len(content) > tool_chars:
                content = content[:tool_chars // 2] + " ... " + content[-tool_chars // 2:]
            lines.append(f"Tool result ({m.get('name', 'tool')}): {content}")
        else:
            lines.append(f"User: {content}")
    text = "\n".join(lines)
    return head + (text if len(text) <= max_chars else "..." + text[-max_chars:])


def _head(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + " ..."


def evidence_text(evidence: dict) -> str:
    return _head(json.dumps(evidence, ensure_ascii=False, default=str), EVIDENCE_CHARS)


def verdict_fields(verdict: dict) -> dict:
    """The Validator's whole verdict as prompt fields, for the Corrector and the Verifier."""
    return {"error_types": ", ".join(verdict.get("error_types") or []) or "-",
            "diagnosis": verdict.get("diagnosis", ""), "suggest_next": verdict.get("suggest_next", "")}


def tools_text(tools: list[dict]) -> str:
    return "\n".join(json.dumps(t.get("function", t), ensure_ascii=False) for t in tools or [])


class RoleActor(Restartable):
    """One actor class plays any role; the driver keeps a few of them and spreads calls.

    ``provider`` is an ``EnginePool`` (self / local model) or an ``OpenAIChatClient``.
    ``tokenizer_path`` is the provider model's tokenizer (for pools); ``policy_tokenizer_path``
    tokenises a Corrector's text when it came from another model (endpoint)."""

    def __init__(self, provider, tokenizer_path: str | None, policy_tokenizer_path: str, max_model_len: int,
                 max_role_tokens: int = 256, same_tokenizer: bool = True, structured: bool = True):
        from transformers import AutoTokenizer

        self.provider = provider
        self.is_pool = not isinstance(provider, OpenAIChatClient)
        self.tokenizer = AutoTokenizer.from_pretrained(tokenizer_path) if self.is_pool else None
        self.policy_tokenizer = AutoTokenizer.from_pretrained(policy_tokenizer_path)
        self.max_model_len = max_model_len
        self.max_role_tokens = max_role_tokens
        # the policy playing the Corrector: its sampled ids are the ids to train, as is
        self.reuse_ids = self.is_pool and same_tokenizer
        # verdicts decoded under their JSON schema (our engines); otherwise the answer is
        # opened for the model and the lenient parser reads what it wrote
        self.structured = structured and self.is_pool

    def ping(self) -> bool:
        return True

    # ---- generation through the provider -----------------------------------------------------
    def _prompt_ids(self, text: str) -> list[int]:
        prompt = self.tokenizer.apply_chat_template([{"role": "user", "content": valid_text(text)}], tokenize=False,
                                                    add_generation_prompt=True)
        ids = self.tokenizer.encode(prompt, add_special_tokens=False)
        budget = self.max_model_len - self.max_role_tokens - 1
        return ids if len(ids) <= budget else ids[:8] + ids[-(budget - 8):]  # keep the head marker, cut the middle

    def _generate(self, texts: list[str], temperature: float, seeds: list[int] | None = None,
                  prefix: str = "", schema: str | None = None) -> list[Attempt]:
        """``ids`` are None for endpoints.

        ``prefix`` starts the model's answer for it (on our own engines only): a small
        policy asked for JSON writes prose instead; opening the object leaves it only the
        values to write. ``schema`` constrains the answer to one object of that JSON schema."""
        if not self.is_pool:
            out = []
            for t in texts:
                try:
                    out.append(Attempt(self.provider.chat(t, temperature, self.max_role_tokens), None, True))
                except Exception as e:  # timeouts, garbage: the candidate is skipped and counted
                    out.append(Attempt("", None, False, error=f"{type(e).__name__}: {e}"))
            return out
        sampling = SamplingParams(max_tokens=self.max_role_tokens, temperature=temperature, json_schema=schema)
        if schema is not None:
            prefix = ""
        head = self.tokenizer.encode(prefix, add_special_tokens=False) if prefix else []
        gens = self.provider.generate([self._prompt_ids(t) + head for t in texts], sampling, seeds)
        eos = self.tokenizer.eos_token_id
        return [Attempt(prefix + self.tokenizer.decode([i for i in g.token_ids if i != eos]), g.token_ids,
                        g.finish_reason == "stop") for g in gens]

    # ---- roles ----------------------------------------------------------------------------
    def validate(self, queries: list[ValidateQuery]) -> list[Finding]:
        """Judge each step of each episode (all in one batch) with the reward evidence; the
        first step judged invalid is the finding. Unparsable verdicts count as valid."""
        texts, owners = [], []
        for qi, q in enumerate(queries):
            ep = q.episode
            evidence = evidence_text(q.evidence)
            for k in range(q.first_step, min(len(ep.actions), q.first_step + q.max_steps)):
                texts.append(load_prompt("validator", ep.language).format(
                    evidence=evidence, history=history_text(ep.history(k)), step=ep.actions[k]))
                owners.append((qi, k))
        verdicts = [parse_validator(g.text) for g in self._generate(texts, 0.0, prefix=VALIDATOR_PREFIX,
                                                                    schema=self._schema(VALIDATOR_SCHEMA))]
        judged, unparsable, first = [0] * len(queries), [0] * len(queries), {}
        for (qi, k), v in zip(owners, verdicts):
            judged[qi] += 1
            unparsable[qi] += v is None
            if v is not None and not v["is_valid"] and qi not in first:
                first[qi] = (k, v)  # owners are in step order within an episode
        return [Finding(*first.get(qi, (None, None)), judged=judged[qi], unparsable=unparsable[qi])
                for qi in range(len(queries))]

    def correct(self, queries: list[CorrectQuery], attempts: int, temperature: float,
                seeds: list[int]) -> list[list[Attempt]]:
        """Per query, ``attempts`` rewrites of the step; each attempt's ids are policy token
        ids ending in eos (an attempt cut by the token limit is not complete)."""
        texts, seed_list = [], []
        for q, seed in zip(queries, seeds):
            ep = q.episode
            text = load_prompt("corrector", ep.language).format(
                tools=tools_text(ep.tools), history=history_text(ep.history(q.step)), step=ep.actions[q.step],
                **verdict_fields(q.verdict))
            texts += [text] * attempts
            seed_list += [seed + a for a in range(attempts)]
        gens = self._generate(texts, temperature, seed_list)
        eos = self.policy_tokenizer.eos_token_id
        for g in gens:
            if not self.reuse_ids:
                g.ids = None
            if g.ids is None and g.complete:  # another model's text: tokenise the new turn once
                g.ids = self.policy_tokenizer.encode(valid_text(g.text.strip()), add_special_tokens=False) + [eos]
            elif g.ids is not None and (not g.ids or g.ids[-1] != eos):
                g.complete = False  # cut by the token limit: not a whole turn
            g.ids = g.ids or []
        return [gens[i * attempts:(i + 1) * attempts] for i in range(len(queries))]

    def verify(self, queries: list[VerifyQuery]) -> list[dict | None]:
        """V1 (consistent with the context) and V3 (plausible) verdicts on each rewrite."""
        texts = [load_prompt("verifier", q.language).format(
            evidence=evidence_text(q.evidence), history=history_text(q.history), step=q.step,
            corrected=q.corrected, **verdict_fields(q.verdict)) for q in queries]
        return [parse_verifier(g.text) for g in self._generate(texts, 0.0, prefix=VERIFIER_PREFIX,
                                                               schema=self._schema(VERIFIER_SCHEMA))]

    def _schema(self, schema: str) -> str | None:
        return schema if self.structured else None


class RuleRoles(Restartable):
    """An environment's rule-based Validator and Corrector (``env.rti_rules()``) behind the
    role calls. The rules see the whole episode and the evidence and name the first
    derailing step themselves; their fix is text, tokenised once with the policy's tokenizer."""

    def __init__(self, env_creator, env_config: dict, policy_tokenizer_path: str):
        from transformers import AutoTokenizer

        self.rules = env_creator(dict(env_config)).unwrapped.rti_rules()
        if self.rules is None:
            raise ValueError("this environment has no rule-based roles: its rti_rules() returned None")
        self.policy_tokenizer = AutoTokenizer.from_pretrained(policy_tokenizer_path)

    def ping(self) -> bool:
        return True

    def validate(self, queries: list[ValidateQuery]) -> list[Finding]:
        out = []
        for q in queries:
            v = self.rules.validate(q.episode.messages, q.episode.actions, q.evidence)
            found = v is not None and not v.get("is_valid", True) and int(v["step"]) >= q.first_step
            out.append(Finding(int(v["step"]), v) if found else Finding())
        return out

    def correct(self, queries: list[CorrectQuery], attempts: int, temperature: float,
                seeds: list[int]) -> list[list[Attempt]]:
        """One attempt per query: the rules are deterministic."""
        eos = self.policy_tokenizer.eos_token_id
        out = []
        for q in queries:
            text = self.rules.correct(q.episode.messages, q.episode.actions, q.evidence, q.verdict)
            ids = self.policy_tokenizer.encode(valid_text(text), add_special_tokens=False) + [eos] if text else []
            out.append([Attempt(text or "", ids, bool(text))])
        return out
