"""Finding the user's Claw-Eval copy: lookup order and the error that says how to get it."""

from pathlib import Path

import pytest

from envs.claw_eval import ENV_VAR, PINNED_COMMIT, UPSTREAM_URL, ClawEvalDataError, find_data_dir

SYNTHETIC = Path(__file__).resolve().parents[1] / "data" / "claw_eval"


def _copy(tmp_path: Path, name: str) -> Path:
    """A minimal valid copy: tasks/<one task>/task.yaml."""
    root = tmp_path / name
    (root / "tasks" / "T001_x").mkdir(parents=True)
    (root / "tasks" / "T001_x" / "task.yaml").write_text("task_id: T001_x\n")
    return root


def test_config_wins_over_env_and_cache(tmp_path):
    cfg, env, cache = _copy(tmp_path, "cfg"), _copy(tmp_path, "env"), _copy(tmp_path, "cache")
    assert find_data_dir(cfg, environ={ENV_VAR: str(env)}, cache_dir=cache) == cfg.resolve()


def test_env_var_wins_over_cache(tmp_path):
    env, cache = _copy(tmp_path, "env"), _copy(tmp_path, "cache")
    assert find_data_dir(None, environ={ENV_VAR: str(env)}, cache_dir=cache) == env.resolve()


def test_cache_is_last(tmp_path):
    cache = _copy(tmp_path, "cache")
    assert find_data_dir(None, environ={}, cache_dir=cache) == cache.resolve()
    assert find_data_dir(None, environ={ENV_VAR: ""}, cache_dir=cache) == cache.resolve()  # empty = unset


def test_synthetic_tree_is_a_valid_copy():
    assert find_data_dir(SYNTHETIC, environ={}) == SYNTHETIC


def test_missing_everywhere_says_how_to_obtain(tmp_path):
    with pytest.raises(ClawEvalDataError) as err:
        find_data_dir(None, environ={}, cache_dir=tmp_path / "nothing")
    msg = str(err.value)
    assert f"git clone {UPSTREAM_URL}" in msg and f"checkout {PINNED_COMMIT}" in msg
    assert ENV_VAR in msg and 'env_config["data_dir"]' in msg


@pytest.mark.parametrize("layout", ["absent", "no_tasks", "empty_tasks"])
def test_wrong_named_copy_fails_instead_of_falling_through(tmp_path, layout):
    # A typo'd data_dir must not silently use the (valid) env var or cache copy.
    bad = tmp_path / "bad"
    if layout != "absent":
        bad.mkdir()
    if layout == "empty_tasks":
        (bad / "tasks").mkdir()
    good = _copy(tmp_path, "good")
    with pytest.raises(ClawEvalDataError, match="data_dir"):
        find_data_dir(bad, environ={ENV_VAR: str(good)}, cache_dir=good)
    with pytest.raises(ClawEvalDataError, match=ENV_VAR) as err:
        find_data_dir(None, environ={ENV_VAR: str(bad)}, cache_dir=good)
    assert "git clone" in str(err.value)
