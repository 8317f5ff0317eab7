"""Add a training method in one file: Dr. GRPO as an algorithm plug-in, trained on Lookup-v0.

Dr. GRPO (Liu et al., 2025, "Understanding R1-Zero-Like Training") removes two biases of
GRPO: the advantage is the reward minus the group mean, not divided by the group's standard
deviation (which up-weights groups that are nearly all right or all wrong), and the loss is
divided by a constant (sequences x a token budget) instead of by the tokens actually
generated (which favours long wrong answers). A plug-in overrides exactly those two pieces:
the ``advantages`` hook on the driver and the ``loss`` the learner actors run; everything
else (rollouts, replay, publishing, checkpoints) is the shared loop's.

    python examples/custom_algorithm.py                  # 3 iterations on tier 1 from the Lookup start policy
    python examples/custom_algorithm.py --iterations 6 --eval-tiers 1
    ray job submit --working-dir . -- python examples/custom_algorithm.py

Results to expect (under 10 minutes on 2 cores): one metrics line per iteration, as
``examples/lookup.py --quick`` prints them, with the success rate of the policy's own tier-1
rollouts rising from about 0.3, and a learner loss on the Dr. GRPO scale (larger in size
than GRPO's, since unnormalised advantages are larger on mixed groups). Every option of
``examples/lookup.py`` works here, ``--algorithm`` defaulting to this file's method.
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from examples import lookup  # noqa: E402
from rti_actors.algorithms import register_algorithm  # noqa: E402
from rti_actors.algorithms.grpo import GRPO  # noqa: E402
from rti_actors.losses import grpo_loss  # noqa: E402


@register_algorithm
class DrGRPO(GRPO):
    name = "dr-grpo"
    normaliser = "sequences"  # the learner passes the global number of sequences
    TOKEN_BUDGET = 96         # L_max: the rollouts' max_new_tokens per turn in examples/lookup.py

    @staticmethod
    def loss(logp, batch, settings, normaliser, entropy=None):
        # the clipped token surrogate summed, over a constant: sequences x the token budget
        return grpo_loss(logp, batch["blp"], batch["adv"], batch["tw"], batch["mask"], clip_eps=settings["clip_eps"],
                         num_tokens=normaliser * DrGRPO.TOKEN_BUDGET)

    def advantages(self, driver, groups: list) -> dict:
        for g in groups:
            mean = float(np.mean([t.reward for t in g]))
            for t in g:
                t.advantage = t.reward - mean  # no division by the group's std
        return {"dr_grpo/mean_abs_advantage": float(np.mean([abs(t.advantage) for g in groups for t in g]))
                if groups else 0.0}


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    defaults = {"--algorithm": DrGRPO.name, "--model": "start", "--tiers": "1", "--eval-tiers": "",
                "--iterations": "3", "--tasks-per-iteration": "4", "--lr": "2e-4", "--max-new-tokens": "96", "--no-base-eval": None}
    for flag, value in defaults.items():
        if flag not in argv:
            argv += [flag] if value is None else [flag, value]
    lookup.main(argv)


if __name__ == "__main__":
    main()
