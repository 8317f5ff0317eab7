"""``failover.Members``: calls go to live actors, a dead one's share is played by another,
results keep their order, and only an empty pool stops the run, saying who died and why.

In-process objects stand in for actor handles (``Members`` calls them directly); a dead
actor is one whose methods raise ``ActorDiedError``, as a Ray call to it does."""

import pickle

import pytest
import ray

from rti_actors.engine_actor import EnginePool
from rti_actors.failover import Members, NoneLeft

KILLED = "The actor is dead because it was killed by `ray.kill`."


def _died(actor_id: str | None = None) -> ray.exceptions.ActorDiedError:
    err = ray.exceptions.ActorDiedError()
    err.error_msg = f"The actor died unexpectedly before finishing this task.\n\tclass_name: EnvRunner\n{KILLED}"
    err.actor_id = actor_id
    return err


class Runner:
    """Plays items as ``(item, item * 10)``, whoever plays them; ``dies_after`` calls it is dead."""

    def __init__(self, dies_after: int | None = None):
        self.calls, self.dies_after = 0, dies_after

    def _enter(self):
        self.calls += 1
        if self.dies_after is not None and self.calls > self.dies_after:
            raise _died()

    def play(self, items, scale=10):
        self._enter()
        return [(item, item * scale) for item in items]

    def one(self, item, scale=10):
        self._enter()
        return item * scale

    def task_ids(self, split):
        self._enter()
        return [f"{split}-0", f"{split}-1"]


def test_a_call_goes_to_a_live_member_and_a_dead_one_is_not_called_again():
    dead, live = Runner(dies_after=0), Runner()
    runners = Members("env runner", [dead, live])
    assert [runners.call("task_ids", "eval") for _ in range(3)] == [["eval-0", "eval-1"]] * 3
    assert dead.calls == 1 and live.calls == 3
    assert runners.dead == {0: KILLED} and runners.live() == [1]
    assert runners[0] is dead and list(runners) == [dead, live]  # still the list of actors as given


def test_a_dead_members_shard_is_played_by_another_and_the_results_keep_their_order():
    items = list(range(10))
    want = Members("env runner", [Runner(), Runner(), Runner()]).spread("play", items, 3)
    dying = [Runner(), Runner(dies_after=0), Runner()]
    runners = Members("env runner", dying)
    sent = runners.send("play", items, 3)
    assert sent.collect() == want == [(i, 3 * i) for i in items]
    assert sent.resent == 1 and runners.live() == [0, 2]
    # the next spread deals its shards over the two live runners only
    assert runners.spread("play", items) == [(i, 10 * i) for i in items] and dying[1].calls == 1
    assert runners.map("one", [4, 5, 6]) == [40, 50, 60]


def test_when_none_is_left_the_first_line_names_the_kind_the_last_one_and_its_cause():
    runners = Members("env runner", [Runner(dies_after=0), Runner(dies_after=1)])
    assert runners.call("task_ids", "train") == ["train-0", "train-1"]  # runner 1, after runner 0 died
    with pytest.raises(NoneLeft) as info:
        runners.spread("play", [1, 2, 3])
    first, second = str(info.value).splitlines()
    assert first == f"env runner 1 is dead for good ({KILLED}) and no env runner is left"
    assert second.startswith("the others died before it: env runner 0 (") and KILLED in second
    with pytest.raises(NoneLeft, match="^env runner 1 is dead"):
        runners.call("task_ids", "train")


def test_a_call_that_raised_is_raised_as_it_is_not_sent_elsewhere():
    class Broken(Runner):
        def play(self, items, scale=10):
            self._enter()
            raise ValueError("the env has a bug")

    broken, other = Broken(), Runner()
    runners = Members("env runner", [broken, other])
    with pytest.raises(ValueError, match="the env has a bug"):
        runners.call("play", [1])
    assert runners.dead == {} and other.calls == 0


def test_an_actor_death_that_is_not_the_members_own_is_raised():
    # an engine's call fails because the learner whose weights it was given died: the
    # engine is alive and must not be dropped
    class Engine:
        _actor_id = bytes.fromhex("aa" * 16)

        def update_weights(self, weights, version):
            raise _died(actor_id="bb" * 16)

    engines = Members("engine", [Engine(), Engine()])
    with pytest.raises(ray.exceptions.ActorDiedError):
        engines.each("update_weights", None, 1)
    assert engines.dead == {}


def test_a_member_that_was_restarting_is_asked_again_not_dropped():
    class Restarting(Runner):
        def task_ids(self, split):
            self._enter()
            if self.calls == 1:
                raise ray.exceptions.ActorUnavailableError("The actor is restarting.", None)
            return ["t"]

    member = Restarting()
    runners = Members("env runner", [member])
    assert runners.call("task_ids", "train") == ["t"] and runners.dead == {} and member.calls == 2


def test_each_calls_every_live_member_and_drops_the_dead():
    engines = Members("engine", [Runner(), Runner(dies_after=0), Runner()])
    assert engines.each("one", 2) == {0: 20, 2: 20}
    assert engines.each("one", 3, only=[1, 2]) == {2: 30}
    with pytest.raises(NoneLeft, match="^engine 2 is dead for good"):
        Members("engine", [Runner(dies_after=0), Runner(dies_after=0), Runner(dies_after=0)]).each("one", 1)


def test_a_none_left_raised_inside_an_actor_arrives_with_its_own_first_line():
    # a runner whose engines all died raises NoneLeft in its process; Ray hands the driver a
    # RayTaskError that opens with the runner's call: the engine's line must come first
    inner = NoneLeft(f"engine 1 is dead for good ({KILLED}) and no engine is left")

    class Runner0(Runner):
        def play(self, items, scale=10):
            raise ray.exceptions.RayTaskError("EnvRunner.sample", "Traceback ...", inner).as_instanceof_cause()

    with pytest.raises(NoneLeft) as info:
        Members("env runner", [Runner0(), Runner()]).spread("play", [1, 2])
    assert str(info.value).splitlines()[0] == str(inner)


class Engine:
    def __init__(self, name: str, dead: bool = False):
        self.name, self.dead, self.calls = name, dead, 0

    def generate(self, prompts, sampling, seeds=None):
        self.calls += 1
        if self.dead:
            raise _died()
        return [self.name for _ in prompts]


def test_an_engine_pool_copy_drops_a_dead_engine_and_the_runners_call_is_not_lost():
    pool = pickle.loads(pickle.dumps(EnginePool([Engine("e0", dead=True), Engine("e1")])))  # as a runner has it
    assert [pool.generate([[1]], None)[0] for _ in range(4)] == ["e1"] * 4
    assert pool.handles[0].calls == 1 and pool.members.dead == {0: KILLED}
    assert [pool.pick().name for _ in range(3)] == ["e1"] * 3
    gone = EnginePool([Engine("e0", dead=True), Engine("e1", dead=True)])
    with pytest.raises(NoneLeft, match=r"^engine \d is dead for good \(The actor is dead because it was killed"):
        gone.generate([[1]], None)


def test_a_member_killed_by_rays_memory_monitor_counts_as_restarting_not_as_an_error():
    # Ray's memory monitor kills the process: the call raises OutOfMemoryError (not an actor
    # error), and the actor restarts like any crashed one, so the call is sent again
    class Oomed(Runner):
        def task_ids(self, split):
            self._enter()
            if self.calls == 1:
                raise ray.exceptions.OutOfMemoryError("Task was killed due to the node running low on memory.")
            return ["t"]

    member = Oomed()
    runners = Members("env runner", [member])
    assert runners.call("task_ids", "train") == ["t"] and runners.dead == {} and member.calls == 2
