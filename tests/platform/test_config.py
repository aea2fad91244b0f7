"""Config presets and overrides: every preset validates, bad keys and values fail naming the field."""

import re
from pathlib import Path

import pytest

from populora.platform import config as config_io
from populora.training.config import TrainConfig

CONFIGS = sorted((Path(__file__).parents[2] / "configs").glob("*.yaml"))


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


# ---- the evaluation config (populora eval)
def test_eval_flags_map_onto_the_eval_config(tmp_path):
    from populora.evaluation.cli import eval_config

    cfg = eval_config(["--run", "r1", "--no-base", "--limit", "3", "--temperature", "0.5", "--n-samples", "4",
                       "--device", "cpu", "--set", "generation.top_p=0.9"])
    assert (cfg.run, cfg.include_base, cfg.limit, cfg.device) == ("r1", False, 3, "cpu")
    assert (cfg.generation.temperature, cfg.generation.n_samples, cfg.generation.top_p) == (0.5, 4, 0.9)
    assert cfg.generation.max_new_tokens is None and cfg.members == "all"  # the schema's defaults (None: the protocol's budgets)
    preset = tmp_path / "eval.yaml"
    preset.write_text("adapter: some/dir\nmodel:\n  tiny_random: true\ngeneration:\n  seed: 7\n")
    cfg = eval_config(["--config", str(preset), "--seed", "8"])  # a flag overrides the file
    assert (cfg.adapter, cfg.model.tiny_random, cfg.generation.seed) == ("some/dir", True, 8)


@pytest.mark.parametrize("argv, words", [
    (["--run", "r", "--set", "generation.temprature=1"], ["generation.temprature", "top_p"]),
    (["--run", "r", "--limit", "0"], ["limit", "greater than or equal to 1"]),
    (["--limit", "2"], ["say what to evaluate", "--run RUN_ID"]),
    (["--run", "r", "--model", "HuggingFaceTB/SmolLM2-135M"], ["model.*", "its own config"]),
    (["--run", "r", "--set", "adapter=x"], ["run and adapter exclude each other"]),
])
def test_bad_eval_configs_name_the_field(argv, words):
    from populora.evaluation.cli import eval_config

    with pytest.raises(config_io.ConfigError) as err:
        eval_config(argv)
    for w in words:
        assert w in str(err.value), str(err.value)


def test_sweep_flags_map_onto_the_eval_config():
    from populora.evaluation.cli import eval_config

    cfg = eval_config(["--sweep", "sw-1", "--base", "--limit", "1"])
    assert (cfg.sweep, cfg.sweep_base, cfg.run, cfg.limit) == ("sw-1", True, None, 1)
    assert eval_config(["--sweep", "sw-1"]).sweep_base is False  # a sweep scores the base only when asked
    for argv, words in ((["--run", "r", "--base"], "sweep_base (--base) is for sweep"),
                        (["--sweep", "s", "--set", "run=r"], "run and sweep exclude each other"),
                        (["--sweep", "s", "--tiny-random"], "model.*")):
        with pytest.raises(config_io.ConfigError, match=re.escape(words)):
            eval_config(argv)


def test_report_flags_map_onto_the_report_config():
    from populora.evaluation.cli import report_config

    cfg = report_config(["--sweep", "sw-1", "--json", "--between", "a=1", "a=2", "--out", "rep"])
    assert (cfg.sweep, cfg.as_json, cfg.between, cfg.out) == ("sw-1", True, [("a=1", "a=2")], "rep")
    assert report_config(["--results", "r.json"]).as_json is False
    for argv, words in (([], "report one of"), (["--run", "r", "--set", "sweep=s"], "got run and sweep"),
                        (["--run", "r", "--between", "a", "b"], "add --sweep ID")):
        with pytest.raises(config_io.ConfigError, match=re.escape(words)):
            report_config(argv)


def test_unknown_key_in_an_eval_config_file_is_named(tmp_path):
    from populora.evaluation.cli import eval_config

    preset = tmp_path / "eval.yaml"
    preset.write_text("run: r\ngeneration:\n  temprature: 0.5\n")
    with pytest.raises(config_io.ConfigError, match=r"generation.temprature: unknown key .*valid keys there: .*temperature"):
        eval_config(["--config", str(preset)])


def test_a_runs_base_model_comes_from_its_own_config(tmp_path):
    from populora.evaluation.config import run_model
    from populora.platform.config import ModelSource
    from populora.training import load_config

    cfg = load_config(None, ["model.base=some/hf-id", "model.gguf_file=w.gguf", "model.dtype=bfloat16"])
    (tmp_path / "config.yaml").write_text(config_io.dump(cfg))  # what populora train writes into the run dir
    assert run_model("r1", tmp_path) == ModelSource(base="some/hf-id", gguf_file="w.gguf", dtype="bfloat16")
    with pytest.raises(config_io.ConfigError, match="run r2 has no config at"):
        run_model("r2", tmp_path / "elsewhere")


def test_without_its_run_dir_a_runs_config_comes_from_its_artifact(tmp_path):
    """eval / export on a machine that has the MLflow store but not the run dir read the logged config.yaml."""
    from populora.evaluation.config import run_model
    from populora.platform.store.tracking import Tracker
    from populora.training import load_config

    tracker = Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}")
    rid = tracker.start_run("cfg-test", "r")
    with pytest.raises(config_io.ConfigError, match="nor a config.yaml artifact"):
        run_model(rid, tmp_path / "gone", tracker.uri)
    cfg = load_config(None, ["model.base=some/hf-id", "model.dtype=bfloat16"])
    tracker.log_text(rid, config_io.dump(cfg), "config.yaml")
    assert run_model(rid, tmp_path / "gone", tracker.uri).base == "some/hf-id"


def test_a_shipped_preset_is_found_by_name_from_any_directory(tmp_path, monkeypatch):
    # the presets ship in the package (an installed wheel has no configs/ beside the working dir)
    monkeypatch.chdir(tmp_path)
    shipped = config_io.load(TrainConfig, config_io.PRESETS / "smoke.yaml")
    assert shipped.name == "smoke"
    assert config_io.load(TrainConfig, "smoke") == config_io.load(TrainConfig, "configs/smoke.yaml") == shipped
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "smoke.yaml").write_text("steps: 7\n")  # a file that exists is read, never a preset
    assert config_io.load(TrainConfig, "configs/smoke.yaml").steps == 7
    with pytest.raises(config_io.ConfigError, match="smoke") as err:  # the message lists the presets
        config_io.load(TrainConfig, "no-such-preset")
    assert "does not exist" in str(err.value) and "paper-4t4s" in str(err.value)
