"""A training script as a user writes one, with --checkpoint-every / --resume (rti_actors.resume),
on FirstLetter-v0, whose rewards vary under a flat random model so every iteration steps.

    python tests/integration/resume_driver.py MODEL RUN_DIR NAME --checkpoint-every 1 [--resume RUN_DIR/NAME]
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from rti_actors import RTIConfig  # noqa: E402
from rti_actors.reporting import progress_line  # noqa: E402
from rti_actors.resume import add_resume_args, build_resumable  # noqa: E402
from tests.integration import learnable_env  # noqa: E402, F401  (registers FirstLetter-v0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("run_dir")
    ap.add_argument("name")
    ap.add_argument("--iterations", type=int, default=3)
    add_resume_args(ap)
    a = ap.parse_args()
    config = (RTIConfig()
              .environment("FirstLetter-v0")
              .policy(model=a.model, engine="hf", max_new_tokens=4, max_model_len=512, temperature=1.0)
              .env_runners(num_env_runners=2, num_envs_per_env_runner=4, num_cpus_per_env_runner=0.25)
              .training(algorithm="grpo", group_size=4, tasks_per_iteration=2, lr=1e-3, skip_zero_variance_groups=False)
              .learners(backend="deepspeed", zero_stage=0)
              .reporting(run_dir=a.run_dir, run_name=a.name, tensorboard=False, plot=False))
    algo = build_resumable(config, a)
    for _ in range(a.iterations - algo.iteration):
        print(progress_line(algo.train()), flush=True)
    algo.stop()


if __name__ == "__main__":
    main()
