"""An env runner's envs each take the next episode as soon as theirs ends: a long episode
holds up no other, so the engines see full batches and a wave never waits on its slowest."""

from envs import Task, ToolEnv
from policies.engines import SamplingParams, make_engine
from rti_actors.engine_actor import LocalEngines
from rti_actors.env_runner import EnvRunner
from rti_actors.options import DEFAULTS
from rti_actors.trajectory import EpisodeSpec

POLICY = {**DEFAULTS["policy"], "max_new_tokens": 4, "max_model_len": 1024}
SAMPLING = SamplingParams(max_tokens=4, temperature=1.0, top_p=1.0)


class TurnsEnv(ToolEnv):
    """Task "tN" lasts N assistant turns, whatever the replies."""

    DEFAULT_CONFIG = {**ToolEnv.DEFAULT_CONFIG, "max_turns": 20}

    def task_ids(self, split):
        return [f"t{n}" for n in range(1, 10)]

    def load_task(self, task_id):
        return Task(task_id, "You reply.", "Say anything.", [])

    def on_text_reply(self, content):
        done = self.turns >= int(self.task.task_id[1:])
        return ([] if done else [{"role": "user", "content": "Go on."}]), done

    def compute_reward(self):
        return float(self.turns), {}

    def reward_evidence(self):
        return {}


class CountingEngines(LocalEngines):
    def __init__(self, engine):
        super().__init__(engine)
        self.batches = []

    def generate(self, prompts, sampling, seeds=None):
        self.batches.append(len(prompts))
        return super().generate(prompts, sampling, seeds)


def test_an_env_takes_the_next_episode_as_soon_as_its_own_ends(tiny_model_path):
    engines = CountingEngines(make_engine("hf", tiny_model_path, max_model_len=1024))
    runner = EnvRunner(TurnsEnv, {}, 2, tiny_model_path, POLICY, engines)
    lengths = [6, 1, 1, 1, 1, 1, 1]
    specs = [EpisodeSpec(f"t{n}", j) for j, n in enumerate(lengths)]
    trajs = runner.sample(specs, SAMPLING)
    # in spec order, each as long as its task
    assert [(t.task_id, t.sample_index, t.num_turns) for t in trajs] == [(s.task_id, s.sample_index, n)
                                                                          for s, n in zip(specs, lengths)]
    assert [t.reward for t in trajs] == [float(n) for n in lengths]
    # one env plays the 6-turn episode while the other plays the six 1-turn ones beside it:
    # six turns of two; in waves of two it would have been 6 + 1 + 1 + 1 turns
    assert engines.batches == [2] * 6
    # an episode's seconds are its own, from its reset to its end
    assert trajs[0].seconds > max(t.seconds for t in trajs[1:])
