"""``EnginePool`` copies, one per env runner, spread their calls over the engines.

Ray pickles a pool into every actor it is passed to; ``pickle.loads(pickle.dumps(pool))``
is that copy. Plain strings stand in for the actor handles: ``pick()`` only chooses one.
"""

import pickle

from rti_actors.engine_actor import EnginePool


def _copy(pool):
    return pickle.loads(pickle.dumps(pool))


def test_runners_in_lockstep_use_different_engines():
    pool = EnginePool(["e0", "e1"])
    runners = [_copy(pool), _copy(pool)]
    for _ in range(4):  # each step, every runner makes one call
        assert sorted(r.pick() for r in runners) == ["e0", "e1"]


def test_copies_start_on_every_engine():
    pool = EnginePool(["e0", "e1", "e2"])
    assert sorted(_copy(pool).pick() for _ in range(3)) == ["e0", "e1", "e2"]


def test_one_copy_rotates_over_the_engines():
    runner = _copy(EnginePool(["e0", "e1", "e2"]))
    picks = [runner.pick() for _ in range(9)]
    assert all(picks.count(e) == 3 for e in ("e0", "e1", "e2"))
    assert all(a != b for a, b in zip(picks, picks[1:]))
