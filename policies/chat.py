"""Chat rendering, tokens in / tokens out.

A trajectory is one append-only token buffer (``TokenBuffer``). The renderer appends the
ids of each new message (system, user, tool) as the chat template renders it, appends the
generation prompt before the policy speaks, and the engine's sampled ids are appended
exactly as sampled. History is never decoded and re-encoded: the ids the engine generated
are the ids the learner trains on.

How a message's ids are found: the chat template is applied to the message list with and
without the new message and the *text difference* is tokenised on its own. In the
templates below every difference starts at a special token, so no BPE merge can cross a
boundary. ``drift`` re-renders a finished list from scratch and reports where the
incremental buffer differs, to catch templates for which that does not hold.

Why training templates of our own: the templates model families ship are written for
serving, where each request re-renders the whole chat, and several rewrite history (Qwen3's
drops the ``<think>`` blocks of earlier assistant turns). A buffer that keeps what was
sampled needs every earlier turn rendered unchanged, so each family below has a template
that renders each message from that message alone:

* ``chatml``: ChatML framing (SmolLM2 and any ``<|im_start|>`` model); tool results are
  user turns wrapped in ``<tool_response>``; Hermes ``<tool_call>`` syntax.
* ``qwen3`` (Qwen3, Qwen3-MoE, Qwen3.5): the same framing and tool-result turns, the tools
  listed as JSON inside ``<tools></tools>`` in the system prompt, and the ``<think>`` block
  of every assistant turn kept verbatim.
* ``llama3`` (Llama 3.x): ``<|begin_of_text|>``, ``<|start_header_id|>role<|end_header_id|>``
  headers, ``<|eot_id|>``; tool results in the ``ipython`` role; calls as JSON objects
  ``{"name": ..., "parameters": {...}}``.

The Jinja templates only frame turns; the body of each message (tool calls in the family's
syntax, reasoning, tool-result wrapping, tool schemas) is written here in Python. With
``chat_template="auto"`` a family is picked from the model's ``model_type`` and the
tokenizer's special tokens; a model of no known family keeps its tokenizer's own template
(the ChatML fallback when it has none). Construction renders a probe tool conversation
with the chosen template and refuses one that is not append-only.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from envs.tool_calls import format_assistant_turn, parse_tool_calls

# Used when a tokenizer has no chat template of its own (and ``fallback_template="chatml"``).
CHATML_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# Qwen3 frames every turn exactly as ChatML does; what is Qwen's (tools preamble, thinking,
# tool-result turns) is in the message bodies, which the renderer writes.
QWEN3_TEMPLATE = CHATML_TEMPLATE

# The begin-of-text token comes with the first message, so rendering more messages only
# ever appends; the header's blank line is part of the header, as in Llama 3's prompts.
LLAMA3_TEMPLATE = (
    "{% for message in messages %}{% if loop.first %}{{ '<|begin_of_text|>' }}{% endif %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] + '<|eot_id|>' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)

# Kept short on purpose: SmolLM2-135M copies any tag a long preamble mentions (it answered
# with made-up <tool_response> blocks when this text described them).
TOOLS_PREAMBLE = (
    "\n\nYou can use these tools:\n<tools>\n{schemas}\n</tools>\n"
    "Call a tool by writing <tool_call>{{\"name\": \"...\", \"arguments\": {{...}}}}</tool_call>. "
    "Answer in plain text when you are done."
)

# Qwen3 is trained on a "# Tools" section with one JSON schema per line inside <tools> and
# calls in <tool_call> blocks; this is our wording of that layout.
QWEN3_TOOLS_PREAMBLE = (
    "\n\n# Tools\n\nYou may call the functions whose JSON signatures are listed inside <tools></tools>:\n"
    "<tools>\n{schemas}\n</tools>\n\n"
    "To call one, write a JSON object with its name and arguments inside <tool_call></tool_call> tags:\n"
    "<tool_call>\n{{\"name\": <function name>, \"arguments\": <arguments as a JSON object>}}\n</tool_call>"
)

# Llama 3.x calls custom tools with a bare JSON object that names its arguments "parameters".
LLAMA3_TOOLS_PREAMBLE = (
    "\n\nYou can call the functions below (one JSON schema per line):\n{schemas}\n\n"
    "To call a function, reply with a JSON object of the form "
    "{{\"name\": <function name>, \"parameters\": <arguments as a JSON object>}}, one per line. "
    "Answer in plain text when you are done."
)

TOOL_RESPONSE = "<tool_response>\n{content}\n</tool_response>"


@dataclass(frozen=True)
class ChatFamily:
    """How one model family's turns look (see the module docstring)."""

    name: str
    template: str               # Jinja that frames {role, content} messages
    syntax: str                 # tool-call syntax of assistant turns (envs.tool_calls.SYNTAXES)
    tool_role: str | None       # role of tool results; None: a user turn wrapped in <tool_response>
    preamble: str               # appended to the system prompt when the env has tools
    tokens: tuple[str, ...] = ()  # framing tokens the tokenizer must hold as single tokens
    model_types: tuple[str, ...] = ()  # model_type prefixes that "auto" maps to this family


FAMILIES: dict[str, ChatFamily] = {
    "chatml": ChatFamily("chatml", CHATML_TEMPLATE, "hermes", None, TOOLS_PREAMBLE),
    "qwen3": ChatFamily("qwen3", QWEN3_TEMPLATE, "hermes", None, QWEN3_TOOLS_PREAMBLE,
                        ("<|im_start|>", "<|im_end|>"), ("qwen3",)),
    "llama3": ChatFamily("llama3", LLAMA3_TEMPLATE, "llama3_json", "ipython", LLAMA3_TOOLS_PREAMBLE,
                         ("<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"), ("llama",)),
}
CHAT_FAMILIES = tuple(FAMILIES)

# The probe conversation rendered at construction: every kind of boundary an episode has
# (tools in the system prompt, thinking, one and several calls, tool results followed by a
# user turn), so a template that rewrites history fails here rather than mid-run.
PROBE_TOOLS = [{"type": "function", "function": {
    "name": "lookup", "description": "Look a word up in the dictionary.",
    "parameters": {"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]}}}]
PROBE_OPENING = [{"role": "system", "content": "You answer questions about words."},
                 {"role": "user", "content": "What does 'probe' mean?"}]
PROBE_TURNS = [
    ({"role": "assistant", "content": "", "reasoning_content": "The dictionary will know.",
      "tool_calls": [{"name": "lookup", "arguments": {"word": "probe"}}]},
     [{"role": "tool", "name": "lookup", "content": '{"meaning": "a test"}'}]),
    ({"role": "assistant", "content": "It means a test.", "reasoning_content": "The tool answered."},
     [{"role": "user", "content": "And 'drift' and 'buffer'?"}]),
    ({"role": "assistant", "content": "Looking both up.", "reasoning_content": "",
      "tool_calls": [{"name": "lookup", "arguments": {"word": "drift"}}, {"name": "lookup", "arguments": {"word": "buffer"}}]},
     [{"role": "tool", "name": "lookup", "content": '{"meaning": "a slow change"}'},
      {"role": "tool", "name": "lookup", "content": '{"meaning": "a holding area"}'},
      {"role": "user", "content": "Thanks."}]),
    ({"role": "assistant", "content": "Drift is a slow change; a buffer holds things."}, []),
]


_SURROGATE = re.compile("[\ud800-\udfff]")


def valid_text(text: str) -> str:
    """``text`` with every code point UTF-8 cannot encode (a lone surrogate, "\\ud800") replaced
    by U+FFFD. Tokenizers refuse such text with an exception, and env messages (tool results,
    simulated users) may carry it: everything the renderer tokenises passes through here."""
    return _SURROGATE.sub("\ufffd", text)


def check_chat_template(value) -> str | None:
    """What is wrong with a ``policy(chat_template=...)`` value, or None when it is usable."""
    if isinstance(value, str) and (value == "auto" or value in FAMILIES or _is_jinja(value)):
        return None
    return (f"policy(chat_template={value!r}): choose 'auto' (the model's family, from its config and tokenizer), "
            f"a family {list(CHAT_FAMILIES)} or a Jinja template string")


def _is_jinja(value: str) -> bool:
    return "{%" in value or "{{" in value


def _single_token(tokenizer, token: str) -> bool:
    return len(tokenizer.encode(token, add_special_tokens=False)) == 1


def model_type_of(tokenizer) -> str | None:
    """``model_type`` from the config.json beside a tokenizer loaded from a model folder."""
    path = Path(str(getattr(tokenizer, "name_or_path", "") or "")) / "config.json"
    try:
        return json.loads(path.read_text()).get("model_type")
    except (OSError, ValueError):
        return None


def detect_family(tokenizer, model_type: str | None) -> str | None:
    """The family ``chat_template="auto"`` picks, or None (the tokenizer's own template).

    The model_type decides when the tokenizer has the family's framing tokens (a Llama
    with SmolLM2's ChatML tokenizer is no Llama 3). Without a known model_type, the tokens
    alone decide: Llama 3 headers, or ChatML with <think> and <tool_call> (Qwen3's set,
    which QwQ-style models share)."""
    mt = (model_type or "").lower()
    for family in FAMILIES.values():
        if any(mt.startswith(p) for p in family.model_types) and all(_single_token(tokenizer, t) for t in family.tokens):
            return family.name
    if all(_single_token(tokenizer, t) for t in FAMILIES["llama3"].tokens):
        return "llama3"
    if all(_single_token(tokenizer, t) for t in (*FAMILIES["qwen3"].tokens, "<think>", "<tool_call>")):
        return "qwen3"
    return None


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

    def truncate(self, n: int) -> None:
        """Keep the first ``n`` tokens (and their per-token entries)."""
        for seq in (self.ids, self.loss_mask, self.logprobs, self.token_weight):
            del seq[n:]

    def __len__(self) -> int:
        return len(self.ids)

    def to_dict(self) -> dict:
        return {"ids": self.ids, "loss_mask": self.loss_mask, "logprobs": self.logprobs, "token_weight": self.token_weight}


class ChatTemplateError(ValueError):
    pass


class ChatRenderer:
    """Renders chat messages to token ids incrementally (see module docstring).

    ``chat_template``: "auto", a family name (``CHAT_FAMILIES``) or a Jinja string.
    ``fallback_template``: "chatml" or None, for "auto" on a tokenizer of no known family
    that has no template. ``model_type``: the model's config ``model_type``; by default
    read from the config.json beside the tokenizer (``name_or_path``)."""

    def __init__(self, tokenizer, fallback_template: str | None = "chatml", chat_template: str = "auto",
                 model_type: str | None = None):
        self.tokenizer = tokenizer
        self.model_type = model_type if model_type is not None else model_type_of(tokenizer)
        self.family, self.source = self._choose(chat_template, fallback_template)
        self.template = self.family.template
        self.tool_role = self.family.tool_role
        eos = tokenizer.eos_token_id
        if eos is None:
            raise ChatTemplateError("tokenizer has no eos token; the engine could not tell where a turn ends")
        self.eos_id = eos
        missing = [t for t in self.family.tokens if not _single_token(tokenizer, t)]
        if missing:
            raise ChatTemplateError(
                f"{self.source} needs the tokens {missing}, which the tokenizer does not hold as single tokens; "
                f"{self._fix()}")
        self._glue = self._assistant_glue()
        self._probe()

    # ---- choosing a template --------------------------------------------------------------
    def _choose(self, chat_template: str, fallback_template: str | None) -> tuple[ChatFamily, str]:
        problem = check_chat_template(chat_template)
        if problem:
            raise ChatTemplateError(problem)
        if chat_template in FAMILIES:
            return FAMILIES[chat_template], f"the {chat_template} training template (policy(chat_template={chat_template!r}))"
        if chat_template != "auto":
            return self._own("custom", chat_template), "the chat template given in policy(chat_template=...)"
        name = detect_family(self.tokenizer, self.model_type)
        if name:
            return FAMILIES[name], f"the {name} training template (chosen for model_type={self.model_type!r})"
        template = getattr(self.tokenizer, "chat_template", None)
        if template:
            return self._own("tokenizer", template), "the tokenizer's own chat template"
        if fallback_template != "chatml":
            raise ChatTemplateError(
                f"tokenizer {getattr(self.tokenizer, 'name_or_path', '')!r} has no chat template and no fallback was "
                "chosen; set fallback_template='chatml' or use a model whose tokenizer ships a chat template")
        return FAMILIES["chatml"], "the ChatML fallback template"

    @staticmethod
    def _own(name: str, template: str) -> ChatFamily:
        """A template we did not write: ChatML-style bodies, and the template's own tool role
        when it has one (it wraps tool results itself, so they are passed unwrapped)."""
        tool_role = "tool" if "'tool'" in template or '"tool"' in template else None
        return ChatFamily(name, template, "hermes", tool_role, TOOLS_PREAMBLE)

    def _fix(self) -> str:
        """The config change that would help, for error messages."""
        guess = detect_family(self.tokenizer, self.model_type)
        if guess and guess != self.family.name:
            return f"use policy(chat_template={guess!r})"
        others = [f for f in CHAT_FAMILIES if f != self.family.name]
        return f"use the training template of the model's family: policy(chat_template=...) with one of {others}"

    def _probe(self) -> None:
        """Play the probe conversation the way an env runner does, at text level, and check
        that the incremental text equals a from-scratch render after every turn."""
        messages = self._opening(PROBE_OPENING, PROBE_TOOLS)
        text = self.render_text(messages)
        eos_text = self.tokenizer.convert_ids_to_tokens(self.eos_id)
        for k, (assistant, env_messages) in enumerate(PROBE_TURNS):
            text += self._delta(self.render_text(messages), self.render_text(messages, True))
            text += self.assistant_text(assistant) + eos_text + self._glue
            messages.append(assistant)
            self._same(text, self.render_text(messages), f"assistant turn {k + 1} of a probe tool conversation")
            if env_messages:
                text += self._delta(self.render_text(messages), self.render_text(messages + env_messages))
                messages += env_messages

    def _same(self, incremental: str, reference: str, what: str) -> None:
        if incremental == reference:
            return
        i = next((k for k, (a, b) in enumerate(zip(incremental, reference)) if a != b),
                 min(len(incremental), len(reference)))
        raise ChatTemplateError(
            f"{self.source} is not append-only: after {what} a from-scratch render differs from the incremental one "
            f"at character {i} (incremental {incremental[max(i - 20, 0):i + 40]!r}, rendered "
            f"{reference[max(i - 20, 0):i + 40]!r}); a token buffer keeps every earlier turn as sampled, so the "
            f"template must render earlier turns unchanged; {self._fix()}")

    # ---- text level -----------------------------------------------------------------------
    def system_with_tools(self, content: str, tools: list[dict] | None) -> str:
        """The system prompt text with the tool schemas appended (the family's layout)."""
        if not tools:
            return content
        schemas = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
        return content + self.family.preamble.format(schemas=schemas)

    def assistant_text(self, message: dict) -> str:
        """An assistant message as the model writes it: reasoning block, prose, tool calls in
        the family's syntax."""
        return format_assistant_turn(message.get("content") or "", message.get("tool_calls") or [],
                                     self.family.syntax, message.get("reasoning_content"))

    def _prepare(self, message: dict) -> dict:
        """One env message as the template sees it (tool calls as text, tool role mapped)."""
        role, content = message["role"], message.get("content") or ""
        if role == "assistant" and (message.get("tool_calls") or message.get("reasoning_content") is not None):
            content = self.assistant_text(message)
        if role == "tool":
            if self.tool_role is None:
                role, content = "user", TOOL_RESPONSE.format(content=content)
            else:
                role = self.tool_role
        return {"role": role, "content": content}

    def render_text(self, messages: list[dict], add_generation_prompt: bool = False) -> str:
        prepared = [self._prepare(m) for m in messages]
        return self.tokenizer.apply_chat_template(
            prepared, chat_template=self.template, tokenize=False, add_generation_prompt=add_generation_prompt)

    def _delta(self, before: str, after: str) -> str:
        if not after.startswith(before):
            self._same(before, after[:len(before)], "one more message")
        return after[len(before):]

    def _encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(valid_text(text), add_special_tokens=False)

    # ---- token level ----------------------------------------------------------------------
    def _opening(self, messages: list[dict], tools: list[dict] | None,
                 demonstration: list[dict] | None = None) -> list[dict]:
        messages = [dict(m) for m in messages]
        if tools:
            if messages and messages[0]["role"] == "system":
                messages[0]["content"] = self.system_with_tools(messages[0]["content"], tools)
            else:
                messages.insert(0, {"role": "system", "content": self.system_with_tools("", tools).lstrip()})
        if demonstration:
            messages[1:1] = [dict(m) for m in demonstration]
        return messages

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
        messages = self._opening(messages, tools, demonstration)
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
            raise ChatTemplateError(
                f"{self.source} does not close assistant turns with the tokenizer's eos token {eos_text!r}, where the "
                "engines stop: use a tokenizer whose eos is the template's end-of-turn token (an instruct model's), "
                f"or {self._fix()}")
        return tail.split("PROBE", 1)[1].split(eos_text, 1)[1]

    def close_assistant_ids(self, generated: list[int]) -> list[int]:
        """Context ids that finish an assistant turn after its generated ids."""
        ids = [] if generated and generated[-1] == self.eos_id else [self.eos_id]
        return ids + self._encode(self._glue)

    def decode_turn(self, generated: list[int]) -> dict:
        """Generated ids -> ``{text, content, tool_calls, parse_error}`` (eos stripped), plus
        ``reasoning`` when the turn opened with a ``<think>`` block."""
        text = self.tokenizer.decode([i for i in generated if i != self.eos_id], skip_special_tokens=False)
        return {"text": text, **parse_tool_calls(text)}

    @staticmethod
    def decode_text(text: str) -> dict:
        """An assistant turn's text as a message dict (the form environments record, plus
        ``reasoning_content`` so that a re-render keeps the thinking the buffer holds)."""
        turn = parse_tool_calls(text)
        message = {"role": "assistant", "content": turn["content"]}
        if turn.get("reasoning") is not None:
            message["reasoning_content"] = turn["reasoning"]
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
