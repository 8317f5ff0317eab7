"""The agent endpoint (rti_actors/agent_endpoint.py) and the env runner's agent mode
(rti_actors/agent_runner.py), in one process: a scripted engine behind the endpoint, the
real ``openai`` client in front of it, SmolLM2's tokenizer and chat template."""

from __future__ import annotations

import asyncio
import json
import threading

import openai
import pytest
from openai import AsyncOpenAI

import envs
from examples.openai_agent import tool_loop as example_loop
from policies.chat import ChatRenderer, TokenBuffer
from policies.engines import Generation, SamplingParams
from rti_actors.agent_endpoint import Endpoint
from rti_actors.env_runner import Continuation, EnvRunner, ReplayFailure, _agent_seed
from rti_actors.groups import scored_groups
from rti_actors.trajectory import EpisodeSpec
from tests.unit.tau2_testdata import DATA_DIR, needs_data
from tests.unit.test_tau2_env import gold_turns

TOOLS = [{"type": "function", "function": {"name": "get_person", "description": "Read a record.",
                                           "parameters": {"type": "object", "properties": {"id": {"type": "string"}}}}}]
CALL = '<tool_call>\n{"name": "get_person", "arguments": {"id": "P7"}}\n</tool_call>'
SAMPLING = SamplingParams(max_tokens=64, temperature=0.8)


class ScriptedEngines:
    """An engine pool that answers each prompt with the next scripted text (a tool call
    while the prompt holds no tool result, then an answer) and keeps every call."""

    def __init__(self, tokenizer, answer: str = "The city is Lyon."):
        self.tok, self.answer, self.calls = tokenizer, answer, []

    def text_for(self, prompt: list[int]) -> str:
        return self.answer if "<tool_response>" in self.tok.decode(prompt) else CALL

    async def generate_async(self, prompts, sampling, seeds):
        out = []
        for prompt in prompts:
            ids = self.tok.encode(self.text_for(prompt), add_special_tokens=False) + [self.tok.eos_token_id]
            out.append(Generation(ids, [-0.01 * (k + 1) - len(self.calls) for k in range(len(ids))], "stop", 3))
        self.calls.append({"prompts": [list(p) for p in prompts], "sampling": sampling, "seeds": list(seeds),
                           "gens": out})
        return out


@pytest.fixture()
def renderer(tokenizer):
    return ChatRenderer(tokenizer)


def serve(renderer, engines, episode, max_len: int = 2048):
    """Run ``episode(client, endpoint, key)`` against a fresh endpoint; its result and the record."""
    async def main():
        ep = await Endpoint(renderer, engines, max_len, _agent_seed).start()
        try:
            url, key = ep.open(EpisodeSpec("t1", 2, seed=5), SAMPLING)
            async with AsyncOpenAI(base_url=url, api_key=key, max_retries=0) as client:
                result = await episode(client)
            return result, ep.close(key)
        finally:
            await ep.stop()
    return asyncio.run(main())


OPENING = [{"role": "system", "content": "You read records."}, {"role": "user", "content": "Where is P7?"}]


async def tool_loop(client, edit=None):
    """A plain openai tool loop; ``edit(messages)`` may rewrite the history before turn 2."""
    messages, replies = list(OPENING), []
    for _ in range(3):
        r = await client.chat.completions.create(model="policy", messages=messages, tools=TOOLS, logprobs=True)
        replies.append(r)
        msg = r.choices[0].message
        messages.append(msg.model_dump(exclude_none=True))
        if not msg.tool_calls:
            return replies
        for call in msg.tool_calls:
            messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps({"id": "P7", "city": "Lyon"})})
        if edit:
            edit(messages)
    return replies


def test_tool_calls_are_parsed_and_the_sampled_tokens_recorded(renderer, tokenizer):
    engines = ScriptedEngines(tokenizer)
    replies, rec = serve(renderer, engines, tool_loop)
    first, second = replies
    msg = first.choices[0].message
    assert first.choices[0].finish_reason == "tool_calls" and msg.content is None
    assert [(c.type, c.function.name, json.loads(c.function.arguments)) for c in msg.tool_calls] == \
        [("function", "get_person", {"id": "P7"})]
    assert msg.tool_calls[0].id.startswith("call_")
    assert second.choices[0].finish_reason == "stop" and second.choices[0].message.content == "The city is Lyon."
    # the record: exactly the engine's ids and log-probs on the loss mask, in its turn spans
    assert not rec.prefix_break and len(rec.turn_spans) == 2 and rec.versions == [3, 3]
    for (start, end), call in zip(rec.turn_spans, engines.calls):
        gen = call["gens"][0]
        assert rec.buf.ids[start:end] == gen.token_ids and rec.buf.logprobs[start:end] == gen.logprobs
        # the prompt the engine got is the record up to that turn: the next prompt extends it
        assert call["prompts"][0] == rec.buf.ids[:start]
    assert sum(rec.buf.loss_mask) == sum(e - s for s, e in rec.turn_spans)
    assert [i for i, m in enumerate(rec.buf.loss_mask) if m] == [i for s, e in rec.turn_spans for i in range(s, e)]
    # what the client was told equals what was recorded (ids, log-probs, usage)
    for r, call in zip(replies, engines.calls):
        gen = call["gens"][0]
        assert r.choices[0].model_extra["token_ids"] == gen.token_ids
        assert [c.logprob for c in r.choices[0].logprobs.content] == gen.logprobs
        assert r.usage.prompt_tokens == len(call["prompts"][0]) and r.usage.completion_tokens == len(gen.token_ids)
    # the run's sampling and the env runner's seeds (turn index), whatever the request said
    assert [c["seeds"][0] for c in engines.calls] == [_agent_seed(EpisodeSpec("t1", 2, seed=5), k) for k in (0, 1)]
    assert all(c["sampling"] == SAMPLING for c in engines.calls)
    # the record renders back to the messages it holds (no history was re-tokenised differently)
    assert renderer.drift(rec.messages, rec.buf.ids) is None


def test_a_prompt_that_does_not_extend_the_record_breaks_it(renderer, tokenizer):
    def rewrite(messages):
        messages[2]["content"] = "I will look P7 up."  # the harness edits the returned assistant turn

    engines = ScriptedEngines(tokenizer)
    replies, rec = serve(renderer, engines, lambda c: tool_loop(c, rewrite))
    assert rec.prefix_break.startswith("request 1: messages[2] (assistant) differs")
    assert len(rec.turn_spans) == 1  # nothing after the break is recorded
    # the agent is still served, from its own messages rendered afresh
    assert replies[1].choices[0].message.content == "The city is Lyon."
    fresh = engines.calls[1]["prompts"][0]
    assert fresh[:len(rec.buf.ids)] != rec.buf.ids and "I will look P7 up." in tokenizer.decode(fresh)


@pytest.mark.parametrize("extra, says", [
    ({"stream": True}, "stream=true is not supported"),
    ({"n": 2}, "n=2"),
    ({"temperature": 0.2}, "samples at the run's temperature=0.8"),
    ({"stop": ["\n"]}, "unsupported field(s) ['stop']"),
    ({"tool_choice": "required"}, "only 'auto' is served"),
])
def test_a_request_it_cannot_serve_gets_a_400_that_says_why(renderer, tokenizer, extra, says):
    engines = ScriptedEngines(tokenizer)

    async def bad(client):
        with pytest.raises(openai.BadRequestError) as err:
            await client.chat.completions.create(messages=OPENING, model="policy", **{
                k: v for k, v in extra.items() if k in ("stream", "n", "temperature", "stop", "tool_choice")})
        return err.value

    err, rec = serve(renderer, engines, bad)
    assert err.status_code == 400 and says in err.body["message"]
    assert engines.calls == [] and rec.buf.ids == []


def test_an_image_part_is_refused(renderer, tokenizer):
    async def bad(client):
        with pytest.raises(openai.BadRequestError) as err:
            await client.chat.completions.create(model="p", messages=[{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": "data:,"}}]}])
        return err.value

    err, _ = serve(renderer, ScriptedEngines(tokenizer), bad)
    assert "reads text parts only" in err.body["message"]


# ---- the env runner's agent mode ----------------------------------------------------------------
async def lookup_agent(client, task):
    """The example's plain openai tool loop on the env's tools, through the env (task.call_tool)."""
    return await example_loop(client, task, max_turns=4)


async def rewriting_agent(client, task):
    messages = list(task.messages)
    r = await client.chat.completions.create(model="policy", messages=messages, tools=task.tools)
    messages.append({"role": "assistant", "content": "something else"})  # not what was returned
    messages.append({"role": "user", "content": "go on"})
    await client.chat.completions.create(model="policy", messages=messages, tools=task.tools)
    return r.choices[0].message.content or ""


async def failing_agent(client, task):
    raise RuntimeError("my harness broke")


def runner(tiny_model_path, engines, agent, on_prefix_break="drop"):
    policy = {"max_model_len": 2048}
    return EnvRunner(envs.get_creator("Lookup-v0"), {"tiers": [1]}, 2, tiny_model_path, policy, engines,
                     max_episode_retries=1, agent={"agent": agent, "on_prefix_break": on_prefix_break, "timeout_s": 60})


def test_agent_mode_trains_on_the_recorded_tokens_and_the_env_grades_the_answer(tiny_model_path, tokenizer):
    r = runner(tiny_model_path, None, lookup_agent)
    task = r.task_ids("train")[0]
    question = r.envs[0].unwrapped.world.questions[task]
    r.engines = engines = ScriptedEngines(tokenizer, answer=f"The answer is {question.answer}.")
    # the scripted call reads P7; the env's grader needs the chain's own record: right only for
    # a question that starts at P7, otherwise the reply is graded wrong
    specs = [EpisodeSpec(task, i, seed=1) for i in range(3)]
    trajs = r.sample(specs, SAMPLING)
    assert [t.sample_index for t in trajs] == [0, 1, 2] and not any(t.infra_error for t in trajs)
    gens = [g for c in engines.calls for g in c["gens"]]
    assert len(gens) == 6
    for t in trajs:
        assert t.num_turns == 2 and len(t.turn_spans) == 2 and not t.prefix_break
        sampled = [t.ids[s:e] for s, e in t.turn_spans]
        assert all(any(g.token_ids == ids for g in gens) for ids in sampled)
        assert [t.ids[i] for i, m in enumerate(t.loss_mask) if m] == [i for ids in sampled for i in ids]
        b = t.reward_breakdown
        assert b["answered"] and b["fetched"] == (1 if question.chain[0] == "P7" else 0)
        assert t.reward == float(b["correct"])
        assert t.messages[-1]["content"] == f"The answer is {question.answer}."


def test_agent_mode_drops_or_flags_a_broken_prefix_and_counts_it(tiny_model_path, tokenizer):
    for mode, kept in (("drop", 0), ("flag", 2)):
        r = runner(tiny_model_path, ScriptedEngines(tokenizer), rewriting_agent, mode)
        task = r.task_ids("train")[0]
        trajs = r.sample([EpisodeSpec(task, i) for i in range(2)], SAMPLING)
        assert all(t.prefix_break and t.dropped == (mode == "drop") and len(t.turn_spans) == 1 for t in trajs)
        groups, counts = scored_groups(trajs)
        assert sum(map(len, groups)) == kept
        assert counts["agent/prefix_breaks"] == 2 and counts["agent/dropped_episodes"] == 2 - kept


def test_an_agent_that_raises_is_an_infrastructure_failure(tiny_model_path, tokenizer):
    r = runner(tiny_model_path, ScriptedEngines(tokenizer), failing_agent)
    (t,) = r.sample([EpisodeSpec(r.task_ids("train")[0])], SAMPLING)
    assert "raised RuntimeError: my harness broke" in t.infra_error and t.infra_retries == 1
    groups, counts = scored_groups([t])
    assert groups == [] and counts["faults/infra_episodes"] == 1


def test_a_slow_tool_holds_up_only_its_own_episode(tiny_model_path, tokenizer):
    """Each episode's tool call waits until the other episode's call has started too: only
    tool calls that run beside the event loop (not on it) get both episodes through."""
    barrier = threading.Barrier(2, timeout=30)

    def creator(config):
        env = envs.get_creator("Lookup-v0")(config)
        step = env.step

        def step_after_the_other_episodes_call(action):
            if action.get("tool_calls"):
                barrier.wait()
            return step(action)
        env.step = step_after_the_other_episodes_call
        return env

    r = runner(tiny_model_path, ScriptedEngines(tokenizer), lookup_agent)
    r.creator = creator
    r.envs = [creator(dict(r.env_config)) for _ in r.envs]
    task = r.task_ids("train")[0]
    trajs = r.sample([EpisodeSpec(task, i, seed=1) for i in range(2)], SAMPLING)
    assert [t.infra_error for t in trajs] == ["", ""] and all(t.num_turns == 2 for t in trajs)


# ---- a simulated user answering the agent's text replies (τ²-Bench) ---------------------------
class TurnEngines(ScriptedEngines):
    """Answers an episode's k-th request with ``turns[k]`` (k: the assistant turns the prompt
    already holds after τ²'s greeting), so episodes played side by side each get their own."""

    def __init__(self, tokenizer, turns: list[str]):
        super().__init__(tokenizer)
        self.turns = turns

    def text_for(self, prompt: list[int]) -> str:
        return self.turns[self.tok.decode(prompt).count("<|im_start|>assistant") - 2]


def tau2_runner(model_path, engines):
    return EnvRunner(envs.get_creator("Tau2Telecom-v0"), {"data_dir": str(DATA_DIR), "split": "base"}, 2,
                     model_path, {"max_model_len": 65536}, engines, max_episode_retries=0,
                     agent={"agent": tau2_agent, "on_prefix_break": "drop", "timeout_s": 60})


async def tau2_agent(client, task):
    return await example_loop(client, task, max_turns=20)


@needs_data
@pytest.mark.filterwarnings("ignore:τ² env uses the scripted user")
def test_an_agent_talks_with_taus_simulated_user_until_it_ends_the_conversation(tiny_model_path, tokenizer):
    """The example's loop on a τ² telecom task: its text turns go to the scripted user
    (``task.reply``), whose answers come back as user messages, its own phone tools hidden;
    the agent's tool call runs in the env. The gold turns score 1, the users' words are
    context in the record, and a replay continued after a user's answer gives the episode
    back token for token."""
    probe = tau2_runner(tiny_model_path, None)
    task = probe.task_ids("base")[6]
    turns = gold_turns(probe.envs[0].unwrapped, task)
    assert any(t.startswith("<tool_call>") for t in turns) and any("on your phone" in t for t in turns)
    r = tau2_runner(tiny_model_path, TurnEngines(tokenizer, turns))
    specs = [EpisodeSpec(task, i, seed=1, split="base") for i in range(2)]
    trajs = r.sample(specs, SAMPLING)
    for t in trajs:
        assert not t.infra_error and not t.prefix_break, (t.infra_error, t.prefix_break)
        assert (t.reward, t.terminated, t.info["termination_reason"]) == (1.0, True, "user_stop"), t.info
        assert len(t.turn_spans) == len(turns) and t.actions == turns
        roles = [m["role"] for m in t.messages]
        # the opening (system, greeting, the user's request), then a user's answer after every
        # text turn but the last (the user stopped), a tool result after the tool call
        said = [i for i, a in enumerate(turns[:-1]) if not a.startswith("<tool_call>")]
        assert roles.count("user") == 1 + len(said) and roles.count("tool") == len(turns) - 1 - len(said)
        # only the sampled turns are trained; what the user said is context
        assert [i for i, m in enumerate(t.loss_mask) if m] == [i for s, e in t.turn_spans for i in range(s, e)]
    assert trajs[0].ids == trajs[1].ids

    # RTI's replay through the conversation: continue at the turn after the first user answer,
    # with that turn's own ids as the "fix": the agent is replayed to it and the rest sampled
    t = trajs[0]
    k = said[0] + 1
    a, b = t.turn_spans[k]
    fix = t.ids[a:b]
    (c,) = r.continue_from([_continuation(t, k, fix, EpisodeSpec(task, 3, seed=1, round="0-0-rti", split="base"))],
                           SAMPLING)
    assert not isinstance(c, ReplayFailure), c
    assert c.ids == t.ids and c.reward == 1.0 and c.intervened_step == k


# ---- continuations by replay (RTI's fixes, AEPO's branches) --------------------------------------
RUNS = []


async def restless_agent(client, task):
    """Asks differently on every run: its replay cannot reproduce its first run."""
    RUNS.append(1)
    messages = list(task.messages) + [{"role": "user", "content": f"attempt {len(RUNS)}"}]
    r = await client.chat.completions.create(model="policy", messages=messages, tools=task.tools)
    return r.choices[0].message.content or ""


def _continuation(t, k: int, ids: list[int], spec: EpisodeSpec) -> Continuation:
    start = t.turn_spans[k][0]
    weights = [0.5 if m else 1.0 for m in t.loss_mask[:start]]  # an earlier fix's weights stay
    prefix = TokenBuffer(t.ids[:start], t.loss_mask[:start], t.logprobs[:start], weights)
    return Continuation(spec, t.actions[:k], [], prefix, t.turn_spans[:k], t.turn_versions[:k], ids,
                        [-0.25] * len(ids), [2.0] * len(ids), 7)


def test_a_continuation_replays_the_agent_to_the_corrected_turn_then_samples(tiny_model_path, tokenizer):
    r = runner(tiny_model_path, None, lookup_agent)
    task = r.task_ids("train")[0]
    answer = f"The answer is {r.envs[0].unwrapped.world.questions[task].answer}."
    r.engines = engines = ScriptedEngines(tokenizer, answer="I do not know.")
    (t,) = r.sample([EpisodeSpec(task, 0, seed=1)], SAMPLING)
    assert len(t.turn_spans) == 2 and t.messages[-1]["content"] == "I do not know."

    # turn 1 (the answer) corrected: turn 0 is replayed, the fix answered, nothing sampled
    fix = tokenizer.encode(answer, add_special_tokens=False) + [tokenizer.eos_token_id]
    spec = EpisodeSpec(task, 2, seed=1, round="0-0-rti")
    served = len(engines.calls)
    (c,) = r.continue_from([_continuation(t, 1, fix, spec)], SAMPLING)
    assert len(engines.calls) == served
    start = t.turn_spans[1][0]
    assert c.ids[:start] == t.ids[:start] and c.ids[start:start + len(fix)] == fix
    assert c.token_weight[:start] == [0.5 if m else 1.0 for m in t.loss_mask[:start]]
    assert c.token_weight[start:start + len(fix)] == [2.0] * len(fix)
    assert c.logprobs[start:start + len(fix)] == [-0.25] * len(fix)
    assert c.corrected_span == (start, start + len(fix)) and c.intervened_step == 1
    assert c.turn_versions == [t.turn_versions[0], 7] and (c.task_id, c.sample_index) == (task, 2)
    assert c.messages[-1]["content"] == answer and c.reward == float(c.reward_breakdown["correct"])

    # turn 0 corrected: the fix is answered, then the engines sample turn 1 under the
    # continuation's own seed
    call = tokenizer.encode(CALL, add_special_tokens=False) + [tokenizer.eos_token_id]
    (c0,) = r.continue_from([_continuation(t, 0, call, spec)], SAMPLING)
    assert len(engines.calls) == served + 1 and engines.calls[-1]["seeds"] == [_agent_seed(spec, 1)]
    assert c0.ids[c0.turn_spans[0][0]:c0.turn_spans[0][1]] == call and len(c0.turn_spans) == 2
    assert not c0.infra_error and c0.intervened_step == 0


def test_an_agent_that_does_not_replay_its_episode_gives_a_replay_failure(tiny_model_path, tokenizer):
    r = runner(tiny_model_path, ScriptedEngines(tokenizer), restless_agent)
    task = r.task_ids("train")[0]
    (t,) = r.sample([EpisodeSpec(task, 0, seed=1)], SAMPLING)
    call = tokenizer.encode(CALL, add_special_tokens=False) + [tokenizer.eos_token_id]
    (res,) = r.continue_from([_continuation(t, 0, call, EpisodeSpec(task, 2, seed=1, round="0-0-rti"))], SAMPLING)
    assert isinstance(res, ReplayFailure) and "did not replay the episode up to turn 0" in res.reason


# ---- the options, checked at build() ------------------------------------------------------------
def sync_agent(client, task):
    return ""


@pytest.mark.parametrize("agent, algorithm, says", [
    ("no_such_module:agent", "grpo", "cannot be loaded: ModuleNotFoundError"),
    ("tests.unit.test_agent_endpoint", "grpo", "must name an async function as 'package.module:function'"),
    (sync_agent, "grpo", "must be an async function `async def agent(client, task) -> str`"),
])
def test_a_bad_agent_setting_fails_at_build_saying_what_to_change(agent, algorithm, says):
    from rti_actors import RTIConfig
    from rti_actors.options import ConfigError

    config = RTIConfig().environment("Lookup-v0").policy(engine="hf").env_runners(agent=agent).training(algorithm=algorithm)
    with pytest.raises(ConfigError) as err:
        config.validate()
    assert says in str(err.value)
    RTIConfig().environment("Lookup-v0").policy(engine="hf").env_runners(agent=lookup_agent).validate()
    for method in ("rti", "aepo"):  # continuations are played by replay
        RTIConfig().environment("Lookup-v0").policy(engine="hf").env_runners(agent=lookup_agent).training(
            algorithm=method).validate()
    RTIConfig().environment("Lookup-v0").policy(engine="hf").env_runners(
        agent="tests.unit.test_agent_endpoint:lookup_agent").validate()
