"""The interface every generation / scoring engine implements.

Token semantics, identical across engines:
  * ``generate`` samples from softmax(logits / temperature) (greedy when temperature is 0)
    and returns, for every generated id, its log-probability under that same tempered
    distribution (under temperature 1 for greedy). The end-of-turn token is included when
    the turn ended on it.
  * ``score`` teacher-forces ``completion`` after ``prompt`` and returns each completion
    token's log-probability under softmax(logits / temperature) (temperature <= 0 means 1).
    So ``score`` of generated ids reproduces ``generate``'s log-probs.
  * ``update_weights`` installs new weights with a version; older versions are rejected.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class SamplingParams:
    max_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop_token_ids: list[int] = field(default_factory=list)  # in addition to eos
    # a JSON schema (as a JSON string, so equal settings compare equal): the output is one
    # object of that schema, the engine masking every token that would break it
    json_schema: str | None = None

    def __post_init__(self):
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")


@dataclass
class Generation:
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str  # "stop" (eos or a stop id) or "length"
    version: int = 0  # weights version that produced it


class PromptTooLongError(ValueError):
    pass


class StaleWeightsError(ValueError):
    pass


def check_prompts(prompts: list[list[int]], max_model_len: int, max_new: int = 0) -> None:
    """Fail clearly (not deep inside an engine) when a prompt cannot fit the context."""
    for i, p in enumerate(prompts):
        if not p:
            raise ValueError(f"prompt {i} is empty")
        if len(p) + max(max_new, 1) > max_model_len:
            raise PromptTooLongError(
                f"prompt {i} has {len(p)} tokens and asks for up to {max_new} more, which exceeds the context of "
                f"{max_model_len} tokens; shorten the episode (max_turns, max_tool_output_chars) or raise max_model_len")


def check_version(current: int, new: int) -> None:
    if new <= current:
        raise StaleWeightsError(f"weights version {new} is not newer than the engine's version {current}")


def generation_budget(prompt_len: int, sampling: SamplingParams, max_model_len: int) -> int:
    """How many tokens a request may still generate within the context."""
    return max(min(sampling.max_tokens, max_model_len - prompt_len), 0)
