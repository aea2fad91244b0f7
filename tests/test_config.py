"""Config presets and overrides: every preset validates, bad keys and values fail naming the field."""

from pathlib import Path

import pytest

from populora.platform import config as config_io
from populora.training.config import TrainConfig

CONFIGS = sorted((Path(__file__).parents[1] / "configs").glob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_every_preset_validates(path):
    cfg = config_io.load(TrainConfig, path)
    assert cfg.steps >= 1


def test_overrides_are_typed_and_nested():
    cfg = config_io.load(TrainConfig, None, ["steps=7", "model.lora_rank=4", "tasks.kinds=[code_o, code_i]", "population.single_agent=true"])
    assert (cfg.steps, cfg.model.lora_rank, cfg.tasks.kinds, cfg.population.single_agent) == (7, 4, ["code_o", "code_i"], True)


@pytest.mark.parametrize("override, words", [
    ("population.teacher=3", ["population.teacher", "teachers"]),
    ("steps=abc", ["steps", "integer"]),
    ("steps=0", ["steps", "greater than or equal to 1"]),
    ("model.lora_rank", ["no '='"]),
    ("tasks.kinds=[code_x]", ["tasks.kinds", "code_o"]),
    ("steps.x=1", ["steps", "not a section"]),
    ("matchmaking.teachers_per_student=9", ["teachers_per_student", "population.teachers"]),
])
def test_bad_overrides_name_the_field(override, words):
    with pytest.raises(config_io.ConfigError) as err:
        config_io.load(TrainConfig, None, [override])
    for w in words:
        assert w in str(err.value), str(err.value)


def test_bad_files(tmp_path):
    with pytest.raises(config_io.ConfigError, match="does not exist"):
        config_io.load(TrainConfig, tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("steps: [1,\n")
    with pytest.raises(config_io.ConfigError, match="not valid YAML"):
        config_io.load(TrainConfig, bad)
    bad.write_text("- 1\n- 2\n")
    with pytest.raises(config_io.ConfigError, match="mapping"):
        config_io.load(TrainConfig, bad)
    bad.write_text("populaton:\n  teachers: 2\n")
    with pytest.raises(config_io.ConfigError, match="populaton: unknown key"):
        config_io.load(TrainConfig, bad)


def test_flatten_round_trips_every_field():
    flat = config_io.flatten(TrainConfig())
    assert flat["population.teachers"] == "2" and flat["model.backend"] == "multilora"
    assert len(flat) > 40
