"""Reading an episode's OpenAI-style message list.

The chat renderer, the intervention and an env's rule-based roles all need the same two
readings of a transcript; they live here, beside the environments that write it, so an env
can use them without importing the policy or the training code.
"""

from __future__ import annotations


def own_turn_positions(messages: list[dict], num_turns: int) -> list[int]:
    """Indices of an episode's own assistant turns in the messages the policy saw: the last
    ``num_turns`` assistant messages (``ChatRenderer.begin`` puts the env's worked example,
    itself an assistant turn, before them)."""
    pos = [i for i, m in enumerate(messages) if m.get("role") == "assistant"]
    return pos[len(pos) - num_turns:] if num_turns else []


def grounding_text(history_messages: list[dict]) -> str:
    """The text facts may come from: user messages and tool outputs, in order."""
    return "\n".join(str(m.get("content") or "") for m in history_messages if m.get("role") in ("user", "tool"))


__all__ = ["grounding_text", "own_turn_positions"]
