"""The faithful τ² user: an LLM prompted with the simulation guidelines and the task
scenario, playing "assistant" in its own conversation (role flipping, README §8.2).

The model is reached through a chat callable ``chat_fn(messages) -> str`` so that ``envs``
stays free of engines: the actor graph wires it to an engine actor (any local model,
including the policy itself), and ``OpenAIChatClient`` reaches any OpenAI-compatible
endpoint with the standard library only.

Tool calls travel as text in both directions, in the Hermes convention every local chat
template understands: the user's calls as ``<tool_call>{...}</tool_call>`` blocks in its
own (assistant-role) turns, the results as ``<tool_response>`` blocks in a user-role turn.
This keeps the role-flipped history a plain alternation of user and assistant turns.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from typing import Callable

from envs.tau2.users import UserContext, UserSimulator
from envs.tool_calls import format_assistant_turn, format_tool_call, parse_tool_calls

ChatFn = Callable[[list[dict]], str]


def tools_prompt(tools: list) -> str:
    """The user's phone tools, described for a model that answers in plain text."""
    schemas = "\n".join(json.dumps(t.schema()) for t in tools)
    return ("\n\n# Tools\n\nYou can operate your phone with these functions:\n<tools>\n" + schemas + "\n</tools>\n\n"
            "To use one, reply with the call only, written as\n"
            '<tool_call>{"name": <function-name>, "arguments": <args-json-object>}</tool_call>\n'
            "Its result comes back to you inside <tool_response></tool_response>. "
            "Otherwise reply with your message to the agent.")


class LLMUser(UserSimulator):
    name = "llm"
    faithful = True

    def __init__(self, chat_fn: ChatFn):
        if not callable(chat_fn):
            raise TypeError("LLMUser needs chat_fn(messages: list[dict]) -> str")
        self.chat_fn = chat_fn
        self.history: list[dict] = []

    def reset(self, ctx: UserContext) -> None:
        system = ctx.system_prompt + (tools_prompt(ctx.tools) if ctx.tools else "")
        self.history = [{"role": "system", "content": system}]

    def respond(self, incoming: list[dict]) -> dict:
        results = [m for m in incoming if m["role"] == "tool"]
        if results:
            body = "\n".join(f"<tool_response>\n{m['content']}\n</tool_response>" for m in results)
            self.history.append({"role": "user", "content": body})
        else:  # the agent's words become "user" turns of the simulator's own conversation
            self.history.append({"role": "user", "content": "\n".join(m.get("content") or "" for m in incoming)})
        reply = self.chat_fn([dict(m) for m in self.history])
        if not isinstance(reply, str):
            raise TypeError(f"chat_fn must return a string, got {type(reply).__name__}")
        turn = parse_tool_calls(reply)
        calls = turn["tool_calls"]
        content = turn["content"] or None
        if turn["parse_error"] and not calls:
            content = reply  # a garbled call is kept as what the user said
        # Store the turn as the model wrote it (calls re-serialised canonically).
        self.history.append({"role": "assistant", "content": format_assistant_turn(content or "", calls)})
        return {"content": content, "tool_calls": calls}


class OpenAIChatClient:
    """``chat_fn`` for an OpenAI-compatible ``/chat/completions`` endpoint (stdlib only).

    The API key comes from ``api_key`` or the environment variable ``api_key_env``; it is
    sent as a bearer token and never logged or shown in ``repr``.
    """

    def __init__(self, base_url: str, model: str, api_key: str | None = None, api_key_env: str = "OPENAI_API_KEY",
                 temperature: float = 0.0, max_tokens: int | None = None, timeout: float = 300.0,
                 extra_body: dict | None = None):
        if not base_url or not model:
            raise ValueError("OpenAIChatClient needs base_url (e.g. http://localhost:8000/v1) and model")
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self._api_key = api_key or os.environ.get(api_key_env) or None
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.timeout = timeout
        self.extra_body = dict(extra_body or {})

    def __repr__(self) -> str:
        return f"OpenAIChatClient(url={self.url!r}, model={self.model!r}, api_key={'***' if self._api_key else None})"

    def __call__(self, messages: list[dict]) -> str:
        body = {"model": self.model, "messages": messages, "temperature": self.temperature, **self.extra_body}
        if self.max_tokens is not None:
            body["max_tokens"] = self.max_tokens
        headers = {"Content-Type": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        request = urllib.request.Request(self.url, data=json.dumps(body).encode(), headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                payload = json.loads(response.read().decode())
        except urllib.error.HTTPError as e:
            detail = e.read().decode(errors="replace")[:500]
            raise RuntimeError(f"user-simulator endpoint {self.url} answered HTTP {e.code}: {detail}") from None
        except urllib.error.URLError as e:
            raise RuntimeError(f"user-simulator endpoint {self.url} unreachable: {e.reason}") from None
        message = payload["choices"][0]["message"]
        text = message.get("content") or ""
        # A server that returns native tool calls anyway: write them in the text convention.
        for call in message.get("tool_calls") or []:
            fn = call.get("function", {})
            args = fn.get("arguments") or "{}"
            try:
                args = json.loads(args) if isinstance(args, str) else args
            except json.JSONDecodeError:
                args = {}
            text += "\n" + format_tool_call(fn.get("name", ""), args)
        return text
