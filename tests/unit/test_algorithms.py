"""The algorithm registry and its plug-ins: built-ins found by name, a user's method added
in one file (examples/custom_algorithm.py's Dr. GRPO) and run by a real learner, and no
algorithm dispatched by name anywhere but the registry."""

import importlib.util
import re

import pytest
import torch

from rti_actors import RTIConfig
from rti_actors.algorithms import BUILTIN, AlgorithmPlugin, algorithm_names, get_algorithm, register_algorithm
from rti_actors.options import ConfigError
from tests.conftest import REPO


@pytest.fixture
def registry(monkeypatch):
    """A registry that forgets what a test registers."""
    from rti_actors import algorithms

    monkeypatch.setattr(algorithms, "_registry", dict(algorithms._registry))
    return algorithms


def _load_example():
    spec = importlib.util.spec_from_file_location("custom_algorithm", REPO / "examples" / "custom_algorithm.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # registers "dr-grpo"
    return module


@pytest.fixture(scope="module")
def custom_example():
    return _load_example()


def _config(algorithm: str) -> RTIConfig:
    return RTIConfig().environment("Navigation-v0").policy(engine="hf").training(algorithm=algorithm)


def test_every_builtin_is_a_plugin_under_its_own_name():
    assert algorithm_names()[:6] == ("grpo", "gspo", "rti", "luffy", "opd", "aepo") == tuple(BUILTIN)
    for name in BUILTIN:
        plugin = get_algorithm(name)
        assert issubclass(plugin, AlgorithmPlugin) and plugin.name == name
    assert get_algorithm("gspo").normaliser == "sequences" and get_algorithm("aepo").with_entropy
    assert get_algorithm("luffy").episodes_per_task(_config("luffy").luffy(traces_per_group=2)) == 6
    assert get_algorithm("rti").episodes_per_task(_config("rti")) == 8


def test_registering_checks_the_class_and_refuses_a_taken_name(registry):
    class Mine(AlgorithmPlugin):
        name = "mine"

    with pytest.raises(ValueError, match="unknown algorithm 'mine'.*register_algorithm"):
        get_algorithm("mine")
    assert register_algorithm(Mine) is Mine and get_algorithm("mine") is Mine and "mine" in algorithm_names()

    class Other(AlgorithmPlugin):
        name = "grpo"

    with pytest.raises(ValueError, match="already registered.*overwrite=True"):
        register_algorithm(Other)
    assert register_algorithm(Other, overwrite=True) is Other and get_algorithm("grpo") is Other
    with pytest.raises(TypeError, match="AlgorithmPlugin subclass"):
        register_algorithm(object)
    for bad in ("", "sft"):
        with pytest.raises(ValueError, match="non-empty string other than 'sft'"):
            register_algorithm(type("Bad", (AlgorithmPlugin,), {"name": bad}))
    with pytest.raises(ValueError, match="'tokens' or 'sequences'"):
        register_algorithm(type("Bad", (AlgorithmPlugin,), {"name": "bad", "normaliser": "rows"}))


def test_a_script_imported_twice_registers_its_method_again(registry):
    """The integration test imports examples/custom_algorithm.py by name and this module by
    path: the second definition of the same class replaces the first instead of failing."""
    first, second = (_load_example() for _ in range(2))
    assert first.DrGRPO is not second.DrGRPO and get_algorithm("dr-grpo") is second.DrGRPO


def test_the_config_takes_a_registered_name_only(registry):
    with pytest.raises(ConfigError, match=r"training\(algorithm='mine'\): unknown algorithm.*register_algorithm"):
        _config("mine").validate()

    @register_algorithm
    class Mine(AlgorithmPlugin):
        name = "mine"

        @classmethod
        def validate(cls, config, ok):
            return [] if config["training"]["group_size"] % 2 == 0 else ["mine needs an even group_size"]

    _config("mine").validate()
    with pytest.raises(ConfigError, match="mine needs an even group_size"):
        _config("mine").training(group_size=3).validate()


def test_dr_grpo_example_centres_rewards_without_scaling(custom_example):
    from rti_actors.trajectory import Trajectory

    group = [Trajectory(task_id="t", sample_index=i, reward=r) for i, r in enumerate([1.0, 0.0, 0.0, 0.0])]
    metrics = get_algorithm("dr-grpo")(None).advantages(None, [group])
    assert [t.advantage for t in group] == [0.75, -0.25, -0.25, -0.25]  # GRPO's would be divided by the std
    assert metrics["dr_grpo/mean_abs_advantage"] == pytest.approx(0.375)
    assert "dr-grpo" in algorithm_names()
    _config("dr-grpo").validate()


def test_a_learner_runs_a_plugins_loss(custom_example, tiny_model_path):
    """The class travels to the learner with its settings: Dr. GRPO's loss is GRPO's summed
    surrogate over sequences x the token budget instead of over the loss tokens."""
    from rti_actors.learner import Learner
    from tests.samples import make_batch

    batch = make_batch(n=3)
    dr_grpo = custom_example.DrGRPO
    settings = {"backend": "torch", "lr": 1e-3, "dtype": "float32"}
    grpo = Learner(tiny_model_path, {**settings, "algorithm": "grpo"}).update(batch)
    learner = Learner(tiny_model_path, {**settings, "algorithm": "dr-grpo", "plugin": dr_grpo})
    mine = learner.update(batch)
    tokens, seqs = sum(sum(s["loss_mask"]) for s in batch), len(batch)
    assert mine["loss"] == pytest.approx(grpo["loss"] * tokens / (seqs * dr_grpo.TOKEN_BUDGET), rel=1e-4)
    assert not mine["skipped"] and torch.isfinite(torch.tensor(mine["grad_norm"]))
    with pytest.raises(ValueError, match="is algorithm 'dr-grpo', not 'grpo'"):
        Learner(tiny_model_path, {**settings, "algorithm": "grpo", "plugin": dr_grpo})


def test_no_algorithm_is_dispatched_by_name_outside_the_registry():
    """Comparing the configured algorithm with a name is how a method leaks into the shared
    code: every such choice belongs to a plug-in hook."""
    pattern = re.compile(r"""\["algorithm"\]\s*(==|!=|in\b|not in\b)|objective\s*==\s*"(?!sft")""")
    found = [f"{p.relative_to(REPO)}:{i}" for p in (REPO / "rti_actors").rglob("*.py")
             for i, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert found == []
