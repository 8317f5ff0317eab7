"""An episode's messages as a verifiers ``Trace``, the object its scoring reads.

verifiers scores a ``Trace``: a chain of ``MessageNode``s (root to leaf), assistant
turns marked ``sampled``, the tools on the root. The episode's chat messages map one to
one: the k-th tool call of the episode gets the id ``call_k``, the id the ``ToolEnv`` gives
its result, so ``trace.tool_messages`` pair with the calls as in a verifiers rollout. No
token ids are attached: the scoring hooks read messages, never tokens.
"""

from __future__ import annotations

import json

import verifiers.v1 as vf
from verifiers.v1.graph import MessageNode
from verifiers.v1.state import state_cls
from verifiers.v1.trace import AgentInfo, Trace, TraceTask


def _message(m: dict, next_call: list[int]):
    role, content = m["role"], m.get("content") or ""
    if role == "system":
        return vf.SystemMessage(content=content)
    if role == "user":
        return vf.UserMessage(content=content)
    if role == "tool":
        return vf.ToolMessage(tool_call_id=str(m.get("tool_call_id", "")), content=content, name=m.get("name"))
    calls = []
    for call in m.get("tool_calls") or []:
        next_call[0] += 1
        calls.append(vf.ToolCall(id=f"call_{next_call[0]}", name=str(call.get("name")),
                                 arguments=json.dumps(call.get("arguments", {}), ensure_ascii=False)))
    return vf.AssistantMessage(content=content, tool_calls=calls or None)


def build_trace(task: vf.Task, messages: list[dict], tools: list[dict], prompt_len: int,
                stop_condition: str | None = None) -> Trace:
    """The trace of ``messages``; the first ``prompt_len`` are the task's prompt (not sampled)."""
    vf_tools = [vf.Tool(name=t["function"]["name"], description=t["function"].get("description", ""),
                        parameters=t["function"].get("parameters", {})) for t in tools]
    trace = Trace(task=TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash),
                  agent=AgentInfo(config=vf.AgentConfig()), state=state_cls(type(task))(), tools=vf_tools)
    next_call = [0]
    for i, m in enumerate(messages):
        trace.nodes.append(MessageNode(parent=i - 1 if i else None, message=_message(m, next_call),
                                       sampled=m["role"] == "assistant" and i >= prompt_len,
                                       tools=vf_tools if i == 0 else []))
    trace.stop_condition = stop_condition
    trace.is_completed = trace.ok = True
    return trace


__all__ = ["build_trace"]
