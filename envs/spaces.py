"""Gymnasium spaces for chat messages (observations) and assistant turns (actions)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

_ROLES = {"system", "user", "assistant", "tool"}
_SAMPLE_CHARS = list("abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,?")


def _random_text(rng: np.random.Generator, max_length: int) -> str:
    n = int(rng.integers(1, max_length + 1))
    return "".join(rng.choice(_SAMPLE_CHARS, size=n))


class MessageListSpace(gym.Space):
    """A list of chat messages: dicts with a ``role`` and a string ``content``."""

    def __init__(self, seed: int | None = None):
        super().__init__(shape=None, dtype=None, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def contains(self, x) -> bool:
        return isinstance(x, list) and all(
            isinstance(m, dict) and m.get("role") in _ROLES and isinstance(m.get("content"), str) for m in x
        )

    def sample(self, mask=None, probability=None):
        return [{"role": "user", "content": _random_text(self.np_random, 64)}]

    def __repr__(self) -> str:
        return "MessageListSpace()"

    def __eq__(self, other) -> bool:
        return isinstance(other, MessageListSpace)


class AssistantTurnSpace(gym.Space):
    """An assistant turn: raw text, or a parsed ``{"content", "tool_calls"}`` dict."""

    def __init__(self, max_length: int = 32768, seed: int | None = None):
        super().__init__(shape=None, dtype=None, seed=seed)
        self.max_length = max_length

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def contains(self, x) -> bool:
        if isinstance(x, str):
            return len(x) <= self.max_length
        return isinstance(x, dict) and isinstance(x.get("content", None), str) and isinstance(x.get("tool_calls", []), list)

    def sample(self, mask=None, probability=None):
        return _random_text(self.np_random, 64)

    def __repr__(self) -> str:
        return f"AssistantTurnSpace(max_length={self.max_length})"

    def __eq__(self, other) -> bool:
        return isinstance(other, AssistantTurnSpace) and other.max_length == self.max_length
