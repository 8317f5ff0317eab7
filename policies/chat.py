"""Chat rendering, tokens in / tokens out.

A trajectory is one append-only token buffer (``TokenBuffer``). The renderer appends the
ids of each new message (system, user, tool) as the chat template renders it, appends the
generation prompt before the policy speaks, and the engine's sampled ids are appended
exactly as sampled. History is never decoded and re-encoded: the ids the engine generated
are the ids the learner trains on.

How a message's ids are found: the chat template is applied to the message list with and
without the new message and the *text difference* is tokenised on its own. For ChatML
templates (SmolLM2, Qwen) every difference starts at a special token, so no BPE merge can
cross a boundary. ``drift`` re-renders a finished list from scratch and reports where the
incremental buffer differs, to catch templates for which that does not hold.

Tools: the schemas go into the system prompt (Hermes style, written for this library) and
tool results are shown to the model as user turns wrapped in ``<tool_response>`` when the
template has no tool role (SmolLM2's has none).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from envs.tool_calls import format_assistant_turn, parse_tool_calls

# Used when a tokenizer has no chat template of its own (and ``fallback_template="chatml"``).
CHATML_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# Kept short on purpose: SmolLM2-135M copies any tag a long preamble mentions (it answered
# with made-up <tool_response> blocks when this text described them).
TOOLS_PREAMBLE = (
    "\n\nYou can use these tools:\n<tools>\n{schemas}\n</tools>\n"
    "Call a tool by writing <tool_call>{{\"name\": \"...\", \"arguments\": {{...}}}}</tool_call>. "
    "Answer in plain text when you are done."
)


@dataclass
class TokenBuffer:
    """One trajectory's tokens and the per-token arrays beside them."""

    ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)  # 1 only on policy-generated tokens
    logprobs: list[float] = field(default_factory=list)  # behaviour log-probs (0 where mask is 0)
    token_weight: list[float] = field(default_factory=list)  # RTI reweighting, 1 by default

    def append_context(self, ids: list[int]) -> None:
        """Tokens the policy did not generate (prompts, tool results, template glue)."""
        self.ids += ids
        self.loss_mask += [0] * len(ids)
        self.logprobs += [0.0] * len(ids)
        self.token_weight += [1.0] * len(ids)

    def append_generated(self, ids: list[int], logprobs: list[float]) -> None:
        if len(ids) != len(logprobs):
            raise ValueError(f"{len(ids)} generated ids but {len(logprobs)} logprobs")
        self.ids += ids
        self.loss_mask += [1] * len(ids)
        self.logprobs += list(logprobs)
        self.token_weight += [1.0] * len(ids)

    def __len__(self) -> int:
        return len(self.ids)

    def to_dict(self) -> dict:
        return {"ids": self.ids, "loss_mask": self.loss_mask, "logprobs": self.logprobs, "token_weight": self.token_weight}


class ChatTemplateError(ValueError):
    pass


class ChatRenderer:
    """Renders chat messages to token ids incrementally (see module docstring)."""

    def __init__(self, tokenizer, fallback_template: str | None = "chatml"):
        self.tokenizer = tokenizer
        template = getattr(tokenizer, "chat_template", None)
        if not template:
            if fallback_template != "chatml":
                raise ChatTemplateError(
                    f"tokenizer {getattr(tokenizer, 'name_or_path', '')!r} has no chat template and no fallback was "
                    "chosen; set fallback_template='chatml' or use a model whose tokenizer ships a chat template")
            template = CHATML_TEMPLATE
        self.template = template
        self.tool_role = "tool" if "'tool'" in template or '"tool"' in template else None
        eos = tokenizer.eos_token_id
        if eos is None:
            raise ChatTemplateError("tokenizer has no eos token; the engine could not tell where a turn ends")
        self.eos_id = eos
        self._glue = self._assistant_glue()

    # ---- text level -----------------------------------------------------------------------
    def system_with_tools(self, content: str, tools: list[dict] | None) -> str:
        """The system prompt text with the tool schemas appended (Hermes style)."""
        if not tools:
            return content
        schemas = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
        return content + TOOLS_PREAMBLE.format(schemas=schemas)

    def _prepare(self, message: dict) -> dict:
        """One env message as the template sees it (tool calls as text, tool role mapped)."""
        role, content = message["role"], message.get("content") or ""
        if role == "assistant" and message.get("tool_calls"):
            content = format_assistant_turn(content, message["tool_calls"])
        if role == "tool":
            content = f"<tool_response>\n{content}\n</tool_response>"
            if self.tool_role is None:
                role = "user"
        return {"role": role, "content": content}

    def render_text(self, messages: list[dict], add_generation_prompt: bool = False) -> str:
        prepared = [self._prepare(m) for m in messages]
        return self.tokenizer.apply_chat_template(
            prepared, chat_template=self.template, tokenize=False, add_generation_prompt=add_generation_prompt)

    def _delta(self, before: str, after: str) -> str:
        if not after.startswith(before):
            raise ChatTemplateError(
                "the chat template is not append-only (rendering one more message changed earlier text); "
                "incremental token buffers need a prefix-stable template such as ChatML")
        return after[len(before):]

    def _encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    # ---- token level ----------------------------------------------------------------------
    def begin(self, messages: list[dict], tools: list[dict] | None = None,
              demonstration: list[dict] | None = None) -> tuple[list[dict], TokenBuffer]:
        """Open a trajectory: put the tool schemas into the system prompt, insert the env's
        worked example (if any) after it, and render the opening messages. Returns the
        message list as the model sees it and its buffer.

        Why a demonstration: a model as small as SmolLM2-135M almost never emits a tool call
        from schemas alone, but it copies the syntax after one natural example exchange.
        Placeholder examples ("<city>") do not teach it the syntax, so the example comes from
        the environment, which knows its domain. It is context (loss mask 0), on a fixed
        input unrelated to the task."""
        messages = [dict(m) for m in messages]
        if tools:
            if messages and messages[0]["role"] == "system":
                messages[0]["content"] = self.system_with_tools(messages[0]["content"], tools)
            else:
                messages.insert(0, {"role": "system", "content": self.system_with_tools("", tools).lstrip()})
        if demonstration:
            messages[1:1] = [dict(m) for m in demonstration]
        buf = TokenBuffer()
        buf.append_context(self.full_ids(messages))
        return messages, buf

    def messages_ids(self, prior: list[dict], new: list[dict]) -> list[int]:
        """Ids of ``new`` messages appended after ``prior`` (which ended with a closed turn)."""
        return self._encode(self._delta(self.render_text(prior), self.render_text(prior + new)))

    def generation_prompt_ids(self, messages: list[dict]) -> list[int]:
        return self._encode(self._delta(self.render_text(messages), self.render_text(messages, True)))

    def _assistant_glue(self) -> str:
        """Template text after the end-of-turn token of an assistant message (ChatML: '\\n').

        The engine stops at eos, so this glue is appended as context, never trained on."""
        probe = [{"role": "user", "content": "x"}]
        opened = self.render_text(probe, True)
        closed = self.render_text(probe + [{"role": "assistant", "content": "PROBE"}])
        tail = self._delta(opened, closed)
        eos_text = self.tokenizer.convert_ids_to_tokens(self.eos_id)
        if "PROBE" not in tail or eos_text not in tail.split("PROBE", 1)[1]:
            raise ChatTemplateError(f"the chat template does not close assistant turns with the eos token {eos_text!r}")
        return tail.split("PROBE", 1)[1].split(eos_text, 1)[1]

    def close_assistant_ids(self, generated: list[int]) -> list[int]:
        """Context ids that finish an assistant turn after its generated ids."""
        ids = [] if generated and generated[-1] == self.eos_id else [self.eos_id]
        return ids + self._encode(self._glue)

    def decode_turn(self, generated: list[int]) -> dict:
        """Generated ids -> ``{content, tool_calls, parse_error}`` (eos stripped)."""
        text = self.tokenizer.decode([i for i in generated if i != self.eos_id], skip_special_tokens=False)
        return {"text": text, **parse_tool_calls(text)}

    @staticmethod
    def decode_text(text: str) -> dict:
        """An assistant turn's text as a message dict (the form environments record)."""
        turn = parse_tool_calls(text)
        message = {"role": "assistant", "content": turn["content"]}
        if turn["tool_calls"]:
            message["tool_calls"] = turn["tool_calls"]
        return message

    def full_ids(self, messages: list[dict], add_generation_prompt: bool = False) -> list[int]:
        return self._encode(self.render_text(messages, add_generation_prompt))

    def drift(self, messages: list[dict], buffer_ids: list[int]) -> dict | None:
        """Compare an incremental buffer with a from-scratch render of ``messages``.

        Returns None when they are identical, else where they first differ (token index and
        a short window of both sides). A difference usually means a generated turn was
        tokenised non-canonically (harmless: training uses the generated ids) or the
        template is not append-only (harmful)."""
        ref = self.full_ids(messages)
        if ref == list(buffer_ids):
            return None
        i = next((k for k, (a, b) in enumerate(zip(ref, buffer_ids)) if a != b), min(len(ref), len(buffer_ids)))
        window = slice(max(i - 3, 0), i + 5)
        return {
            "index": i, "buffer_len": len(buffer_ids), "reference_len": len(ref),
            "buffer": self.tokenizer.decode(list(buffer_ids)[window]), "reference": self.tokenizer.decode(ref[window]),
        }
