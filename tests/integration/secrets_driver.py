"""An RTI run whose roles are an OpenAI-compatible endpoint on 127.0.0.1 (served here, in a
thread) that needs a bearer key, given as a user gives it: in RTI_ROLE_API_KEY. Trains one
iteration (every group fails, so the roles are asked), saves a checkpoint, and prints how many
requests carried the key.

    RTI_ROLE_API_KEY=... python tests/integration/secrets_driver.py MODEL RUN_DIR
"""

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from rti_actors import RTIConfig  # noqa: E402
from tests.fake_openai import serve  # noqa: E402
from tests.integration import learnable_env  # noqa: E402, F401  (registers FirstLetter-v0)

SEEN = {"with_key": 0, "requests": 0}


def answer(path, headers, body):
    SEEN["requests"] += 1
    SEEN["with_key"] += headers.get("Authorization") == f"Bearer {os.environ['RTI_ROLE_API_KEY']}"
    prompt = body["messages"][0]["content"]
    text = ('{"is_valid": false, "error_types": ["wrong_answer"], "diagnosis": "d", "suggest_next": "s"}'
            if '"is_valid"' in prompt else "a reply")
    return {"choices": [{"message": {"role": "assistant", "content": text}}]}


def main():
    model, run_dir = sys.argv[1], sys.argv[2]
    with serve(answer) as roles:
        algo = (RTIConfig()
                .environment("FirstLetter-v0", env_config={"target": "\u2603"})  # unreachable: every group fails
                .policy(model=model, engine="hf", max_new_tokens=4, max_model_len=512, temperature=1.0)
                .env_runners(num_env_runners=1, num_envs_per_env_runner=4, num_cpus_per_env_runner=0.25)
                .training(algorithm="rti", group_size=2, tasks_per_iteration=2, skip_zero_variance_groups=False)
                .interventions(roles=roles.base_url, verifier_llm=False)
                .learners(backend="deepspeed", zero_stage=0)
                .checkpointing(every=1)
                .reporting(run_dir=run_dir, run_name="keyed", tensorboard=True, plot=True, progress_bar=False)
                .build())
        try:
            m = algo.train()
            print(repr(algo.config), algo.plugin.intervention, flush=True)  # what a user might print
        finally:
            algo.stop()
        print("RESULT " + json.dumps({**SEEN, "triggered": m["rti/triggered_groups"]}), flush=True)


if __name__ == "__main__":
    main()
