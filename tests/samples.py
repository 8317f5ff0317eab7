"""Hand-made learner samples shared by the learner tests (CPU and GPU)."""

import random


def make_batch(seed: int = 0, n: int = 4, prompt: int = 6, completion: int = 10) -> list[dict]:
    """Learner samples with random ids, alternating advantages, token weights near 1 and
    off-policy behaviour log-probs: the learner tests' common batch."""
    rng = random.Random(seed)
    samples = []
    for i in range(n):
        length = prompt + completion + 3 * i
        mask = [0] * prompt + [1] * (length - prompt)
        samples.append({"ids": [rng.randrange(200, 5000) for _ in range(length)], "loss_mask": mask,
                        "behaviour_logprobs": [-rng.uniform(5, 12) if m else 0.0 for m in mask],
                        "token_weight": [rng.uniform(0.8, 1.2) if m else 1.0 for m in mask],
                        "advantage": (-1.0) ** i * (0.5 + i / 4), "policy_version": 0})
    return samples
