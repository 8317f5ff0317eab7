"""Train an agent harness written against the OpenAI client: a plain tool loop on Lookup-v0.

The agent below is what you would write for any OpenAI-compatible server: it calls
``client.chat.completions.create`` with the tools, runs the tool calls it gets back, sends
the results and returns the final answer. With ``env_runners(agent=agent)`` each env runner
serves an endpoint on 127.0.0.1 backed by the run's engines; the endpoint records the token
ids and log-probs the engine sampled, the env grades the answer, and GRPO trains on exactly
the recorded tokens (docs/OPENAI_AGENTS.md).

How to run (from the repository root):

    python examples/openai_agent.py --quick            # GRPO on tier 1 from the Lookup start policy
    python examples/openai_agent.py --iterations 10 --tasks-per-iteration 8

With ``--algorithm rti`` the same loop trains with RTI: a failed episode's continuation is
played by running the agent again, its first requests answered with the recorded turns and
the corrected one (docs/OPENAI_AGENTS.md, "RTI and AEPO: continuing an episode by replay").
RTI works on groups that fail entirely, which tier 1 rarely has; on tiers 2 and 3 most do:

    python examples/openai_agent.py --algorithm rti --tiers 2,3 --iterations 1 --tasks-per-iteration 4 --group-size 4

The loop also talks with simulated users (``task.reply``), as τ²-Bench's envs need.

Results to expect (measured once on 2 CPU cores shared with a running benchmark; vLLM
engine, the start policy of results/lookup-cpu/start): `--iterations 1
--tasks-per-iteration 2 --group-size 4` played 8 episodes in 2 groups, 1.8 turns each on
average, with no prefix break, no infrastructure failure and no unparsable turn; success
was 0.50, the learner stepped once (policy version 1), and the iteration took 52 s. That
is a check of the machinery, not a learning curve. --quick (2 iterations of 4 tasks x
G = 8) did not finish its first iteration within a 600 s limit on that shared machine, so it
is unmeasured (examples/lookup.py --quick shows learning, with the library's own loop).
The RTI command above (tiers 2 and 3, rule roles; measured once, alone on 2 cores): every one
of the 4 groups failed entirely; all 16 failed episodes got a fix through the gate, 8 were
continued by replaying the agent (0 replay errors, 0 prefix breaks) and 1 of them succeeded,
so a quarter of the groups became learnable (none was before); the iteration took 90 s.
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from envs import make_env  # noqa: E402
from examples.lookup import start_policy  # noqa: E402
from rti_actors import RTIConfig  # noqa: E402
from rti_actors.reporting import progress_line  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
START_ADAPTER = ROOT / "results" / "lookup-cpu" / "start" / "adapter"


async def agent(client, task) -> str:
    return await tool_loop(client, task)


async def tool_loop(client, task, max_turns: int = 6) -> str:
    """A plain tool loop. ``task.call_tool`` runs the tool in the environment, so its grader
    sees the calls; a text reply goes to the env with ``task.reply``: in an env with a
    simulated user (τ²-Bench) the user answers and the loop goes on until the user ends the
    conversation, elsewhere it is the final answer. The worked example goes after the system
    prompt, where the start policy was trained to see it."""
    messages = task.messages[:1] + task.demonstration + task.messages[1:]
    answer = ""
    for _ in range(max_turns):
        reply = await client.chat.completions.create(model="policy", messages=messages, tools=task.tools)
        message = reply.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            answer = message.content or ""
            said = await task.reply(answer)
            if task.done:
                return answer
            messages.append({"role": "user", "content": said})
            continue
        for call in message.tool_calls:
            result = await task.call_tool(call.function.name, call.function.arguments)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return answer


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="start", help="'start' (the Lookup start policy), a built-in name or a folder")
    ap.add_argument("--algorithm", default="grpo")
    ap.add_argument("--tiers", default="1", help="Lookup tiers to train on, comma-separated (2 and 3: most groups "
                                                 "fail entirely, so RTI has groups to fix)")
    ap.add_argument("--iterations", type=int, default=6)
    ap.add_argument("--tasks-per-iteration", type=int, default=4)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--roles", default="rules", help="RTI's roles: 'rules' (Lookup's rule roles), 'self', a model "
                                                   "folder or an endpoint")
    ap.add_argument("--lr", type=float, default=2e-4)
    ap.add_argument("--on-prefix-break", default="drop", choices=["drop", "flag"])
    ap.add_argument("--run-dir", default="runs")
    ap.add_argument("--quick", action="store_true", help="2 iterations: check the machinery")
    args = ap.parse_args(argv)
    if args.quick:
        args.iterations = 2
    model = args.model
    if model == "start":
        model = (start_policy(START_ADAPTER, Path(args.run_dir) / "lookup-start-policy") if START_ADAPTER.is_dir()
                 else "smollm2-135m-instruct")
    tiers = [int(t) for t in args.tiers.split(",")]
    train = make_env("Lookup-v0", {"tiers": tiers}).unwrapped.task_ids("train")
    algo = (RTIConfig()
            .environment("Lookup-v0", env_config={"tiers": tiers, "max_turns": 6})
            .policy(model=model, engine="vllm", max_new_tokens=96, max_model_len=2048, temperature=1.0)
            .env_runners(num_env_runners=2, num_envs_per_env_runner=16, agent=agent,
                         on_prefix_break=args.on_prefix_break)
            .training(algorithm=args.algorithm, group_size=args.group_size, tasks_per_iteration=args.tasks_per_iteration,
                      lr=args.lr, task_ids=train)
            .interventions(roles=args.roles)
            .learners(backend="torch", share_prefix=True, pack_sequences=True, lora={"r": 16})
            .reporting(run_name="openai-agent", run_dir=args.run_dir)
            .build())
    try:
        for _ in range(args.iterations):
            m = algo.train()
            print(progress_line(m), f"prefix breaks {m.get('agent/prefix_breaks', 0)}", flush=True)
    finally:
        algo.stop()
    print(f"run directory: {algo.run_dir}")


if __name__ == "__main__":
    main()
