"""Write your own tool environment and train on it with GRPO — the page to copy first.

A unit-conversion desk: the agent gets a question, may call `convert`, and must answer
with the right number. Subclass `ToolEnv`, declare tools with JSON schemas, register it.

    python examples/custom_env.py                       # CPU quick run (tiny settings)
    python examples/custom_env.py --warmup-sft 10       # SFT on 10 oracle episodes first
    ray job submit --working-dir . -- python examples/custom_env.py --iterations 5
    python examples/custom_env.py --iterations 20 --checkpoint-every 5   # killed? resume it:
    python examples/custom_env.py --iterations 20 --checkpoint-every 5 --resume runs/<its run name>

Expect: one line of metrics per iteration (reward, success rate, learner loss), then an
evaluation table. SmolLM2-135M rarely solves it at first; the point is the wiring.
"""

import argparse

from envs import Task, Tool, ToolEnv, format_tool_call, register_env
from rti_actors import RTIConfig
from rti_actors.demonstrations import record_agent
from rti_actors.reporting import progress_line, sft_line
from rti_actors.resume import add_resume_args, build_resumable

FACTORS = {("km", "m"): 1000, ("m", "cm"): 100, ("kg", "g"): 1000, ("h", "min"): 60}
QUESTIONS = [(v, a, b) for v in (2, 3, 5, 7, 12) for (a, b) in FACTORS]


class UnitEnv(ToolEnv):
    SPLITS = ("train", "test")

    def task_ids(self, split):
        ids = [f"q{i}" for i in range(len(QUESTIONS))]
        return ids[::2] if split == "train" else ids[1::2]

    def load_task(self, task_id):
        value, a, b = QUESTIONS[int(task_id[1:])]
        convert = Tool("convert", "Convert a value between units.",
                       {"type": "object", "required": ["value", "from_unit", "to_unit"],
                        "properties": {"value": {"type": "number"}, "from_unit": {"type": "string"},
                                       "to_unit": {"type": "string"}}},
                       lambda value, from_unit, to_unit: {"result": value * FACTORS[(from_unit, to_unit)]})
        demo = [{"role": "user", "content": "How many grams is 4 kg?"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"name": "convert", "arguments": {"value": 4, "from_unit": "kg", "to_unit": "g"}}]}]
        return Task(task_id, "You convert units. Use the tool, then answer with the number.",
                    f"How many {b} is {value} {a}?", [convert], {"answer": value * FACTORS[(a, b)]},
                    demonstration=demo)

    def compute_reward(self):
        answer = self.messages[-1].get("content", "")
        ok = str(self.task.data["answer"]) in answer
        return float(ok), {"correct": ok}

    def reward_evidence(self):
        return {"answer": self.task.data["answer"]}

    def oracle_agent(self):  # optional: a scripted solver, whose episodes are demonstrations
        value, a, b = QUESTIONS[int(self.task.task_id[1:])]

        class Oracle:
            def act(self, observation):
                if observation[-1]["role"] == "tool":
                    return f"{value * FACTORS[(a, b)]} {b}."
                return format_tool_call("convert", {"value": value, "from_unit": a, "to_unit": b})
        return Oracle()


register_env("UnitDesk-v0", lambda cfg: UnitEnv(cfg))

def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--iterations", type=int, default=2)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--engine", default="vllm", choices=["vllm", "hf"])
    ap.add_argument("--warmup-sft", type=int, default=0, help="SFT on N oracle episodes first")
    ap.add_argument("--run-dir", default="runs")
    ap.add_argument("--run-name", default=None)
    add_resume_args(ap)  # --checkpoint-every N, --resume RUN_DIR
    args = ap.parse_args(argv)
    config = (RTIConfig().environment("UnitDesk-v0", env_config={"max_turns": 3})
              .policy(model=args.model, engine=args.engine, max_new_tokens=64, max_model_len=2048)
              .env_runners(num_env_runners=2, num_envs_per_env_runner=4)
              .training(algorithm="grpo", group_size=4, tasks_per_iteration=2)
              .evaluation(num_samples=2, num_tasks=4)
              .reporting(run_dir=args.run_dir, run_name=args.run_name))
    algo = build_resumable(config, args)
    if args.warmup_sft and algo.iteration == 0:
        print(sft_line(algo.pretrain_sft(record_agent("UnitDesk-v0", {}, algo.train_ids[:args.warmup_sft]))))
    for _ in range(args.iterations - algo.iteration):
        print(progress_line(algo.train()), flush=True)
    print(algo.evaluate()["table"])
    algo.stop()


if __name__ == "__main__":
    main()
