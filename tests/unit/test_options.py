"""The options are declared once (rti_actors/options.py): the config's sections, its setters,
the learner's defaults, the restore check and docs/CONFIG.md all read that declaration."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest

from rti_actors.checkpoints import config_changes
from rti_actors.config import RTIConfig
from rti_actors.learner import DEFAULTS as LEARNER_DEFAULTS
from rti_actors.options import DEFAULTS, LAYOUT, OWNER, SECTIONS, ConfigError, learner_settings, options_markdown

REPO = Path(__file__).resolve().parents[2]


def test_docs_config_page_is_generated_from_the_declaration():
    page = (REPO / "docs" / "CONFIG.md").read_text()
    assert page == options_markdown(), ("docs/CONFIG.md is stale: regenerate it with python -c \"from "
                                        "rti_actors.options import options_markdown; "
                                        "open('docs/CONFIG.md', 'w').write(options_markdown())\"")
    for name, cls in SECTIONS.items():
        assert f"## `{name}`" in page and all(f"| `{f.name}` |" in page for f in fields(cls))


def test_every_section_has_its_setter_and_its_defaults():
    config = RTIConfig()
    for name in SECTIONS:
        assert callable(getattr(config, name)), name
        assert config[name] == DEFAULTS[name]
    assert config.training(lr=3e-6)["training"]["lr"] == 3e-6


def test_the_learner_defaults_are_the_options_defaults():
    settings = learner_settings(DEFAULTS)
    assert {k: LEARNER_DEFAULTS[k] for k in settings} == settings
    assert settings["luffy_gamma"] == DEFAULTS["luffy"]["gamma"] == 0.1


def test_the_restore_check_reads_layout_and_owner_from_the_declaration():
    base = RTIConfig().to_dict()
    for section, keys in LAYOUT.items():
        for key in keys:
            changed = {**base, section: {**base[section], key: "changed"}}
            assert config_changes(base, changed) == [], (section, key)
    trained = {**base, "training": {**base["training"], "lr": 0.5}}
    assert config_changes(base, trained) == ["training.lr: 1e-06 -> 0.5"]
    assert OWNER == {"interventions": {"rti"}, "luffy": {"luffy"}, "opd": {"opd"}, "aepo": {"aepo"}}
    rti_only = {**base, "interventions": {**base["interventions"], "ppl_threshold": 9.0}}
    assert config_changes(base, rti_only) == []  # a GRPO run reads no RTI option


def test_a_blank_string_is_not_text():
    with pytest.raises(ConfigError, match=r"evaluation\(split='  '\) must be a non-empty string"):
        RTIConfig().environment("Navigation-v0").policy(engine="hf").evaluation(split="  ").validate()
