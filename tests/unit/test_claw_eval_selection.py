"""Task selection and the train/test split (test tasks never in train)."""

from pathlib import Path

import pytest

from envs.claw_eval import family_in_test, hard20, load_tasks, select_tasks, split_tasks, tasks_for

SYNTHETIC = Path(__file__).resolve().parents[1] / "data" / "claw_eval"


@pytest.fixture(scope="module")
def tasks():
    return load_tasks(SYNTHETIC)


def ids(records):
    return [t.task_id for t in records]


def test_offline_language_difficulty(tasks):
    assert ids(select_tasks(tasks)) == ["T001zh_parcel_desk", "T002_parcel_desk", "T003_stock_recount",
                                        "T005_mail_digest", "T006_ops_handover"]
    assert ids(select_tasks(tasks, language="zh")) == ["T001zh_parcel_desk"]
    assert ids(select_tasks(tasks, difficulty="hard")) == ["T003_stock_recount", "T006_ops_handover"]
    assert ids(select_tasks(tasks, language="en", difficulty="easy")) == ["T002_parcel_desk"]


def test_explicit_ids(tasks):
    assert ids(select_tasks(tasks, ["T003_stock_recount", "T002_parcel_desk", "T003_stock_recount"])) == \
        ["T002_parcel_desk", "T003_stock_recount"]
    with pytest.raises(KeyError, match="T999"):
        select_tasks(tasks, ["T999_nope"])
    with pytest.raises(ValueError, match="web_real"):
        select_tasks(tasks, ["T004_live_price_check"])
    with pytest.raises(ValueError, match="unknown task selection"):
        select_tasks(tasks, "everything")


def test_hard20_rule(tasks):
    # Multi-service offline tasks in the language, hard before easy, more services first:
    # T006 (hard, three services), T003 (hard, two), then T002 (easy).
    assert ids(hard20(tasks, size=1)) == ["T006_ops_handover"]
    assert ids(hard20(tasks, size=2)) == ["T003_stock_recount", "T006_ops_handover"]
    assert ids(hard20(tasks, size=3)) == ["T002_parcel_desk", "T003_stock_recount", "T006_ops_handover"]
    assert ids(hard20(tasks, "zh", size=1)) == ["T001zh_parcel_desk"]
    with pytest.raises(ValueError, match="found 3"):
        hard20(tasks)  # the synthetic copy is far too small for 20


def test_hard20_split_holds_out_families(tasks):
    test = tasks_for(tasks, "hard20", "test", hard20_size=2)
    train = tasks_for(tasks, "hard20", "train", hard20_size=2)
    assert ids(test) == ["T003_stock_recount", "T006_ops_handover"]
    assert ids(train) == ["T002_parcel_desk", "T005_mail_digest"]  # single-service T005 is never in hard20
    assert ids(tasks_for(tasks, "hard20", "train", language="zh", hard20_size=0)) == ["T001zh_parcel_desk"]
    assert ids(tasks_for(tasks, "hard20", "all", hard20_size=2)) == ["T002_parcel_desk", "T003_stock_recount",
                                                                      "T005_mail_digest", "T006_ops_handover"]
    test3 = tasks_for(tasks, "hard20", "test", hard20_size=3)
    # every multi-service family held out
    assert ids(tasks_for(tasks, "hard20", "train", hard20_size=3)) == ["T005_mail_digest"]
    assert {t.family for t in test3} == {"parcel_desk", "stock_recount", "ops_handover"}


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("fraction", [0.0, 0.3, 0.5, 1.0])
def test_hash_split_is_a_family_partition(tasks, seed, fraction):
    pool = select_tasks(tasks)
    train = split_tasks(pool, "train", test_fraction=fraction, seed=seed)
    test = split_tasks(pool, "test", test_fraction=fraction, seed=seed)
    assert not {t.task_id for t in train} & {t.task_id for t in test}
    assert sorted(ids(train + test)) == ids(pool)
    assert not {t.family for t in train} & {t.family for t in test}  # twins stay together
    assert split_tasks(pool, "all") == pool
    assert tasks_for(tasks, "offline", "test", test_fraction=fraction, seed=seed) == test


def test_split_is_stable_when_other_tasks_leave(tasks):
    pool = select_tasks(tasks)
    for seed in range(20):
        full = ids(split_tasks(pool, "test", test_fraction=0.5, seed=seed))
        part = ids(split_tasks(pool[1:], "test", test_fraction=0.5, seed=seed))
        assert part == [i for i in full if i != pool[0].task_id]


def test_family_in_test_extremes_and_bad_args(tasks):
    assert not family_in_test("x", 0.0) and family_in_test("x", 1.0)
    assert family_in_test("x", 0.5, seed=3) == family_in_test("x", 0.5, seed=3)
    picks = [family_in_test(f"fam{i}", 0.3) for i in range(2000)]
    assert 0.25 < sum(picks) / len(picks) < 0.35
    with pytest.raises(ValueError):
        split_tasks(tasks, "dev")
    with pytest.raises(ValueError):
        split_tasks(tasks, "test", test_fraction=1.5)
