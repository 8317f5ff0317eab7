"""The faithful τ² user: an LLM prompted with the simulation guidelines and the task
scenario, playing "assistant" in its own conversation (role flipping, as upstream does).

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
from typing import Callable

from envs.openai_client import OpenAIChatClient  # noqa: F401  (re-exported: the endpoint user)
from envs.tau2.users import UserContext, UserSimulator
from envs.tool_calls import format_assistant_turn, parse_tool_calls

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
