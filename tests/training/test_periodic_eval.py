"""In-training evaluation (``eval.every``): the config's errors, the fixed subset, scoring the trainer's own
adapters in place, and a real tiny run through the CLI that logs eval histories on every member run and the
population's statistics on the parent, without changing what training does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import cli_in_process, train_in_process

from populora.evaluation.harness import benchmarks
from populora.platform.store import runlayout as rl
from populora.platform.config import ConfigError
from populora.training import load_config
from populora.training import periodic_eval as pe

ROOT = Path(__file__).resolve().parents[2]
DATA = benchmarks.data_dir()
needs_data = pytest.mark.skipif(not (DATA / benchmarks.CHECKSUMS).is_file(), reason=f"no benchmark data at {DATA}")


# ====================================================================== config
@pytest.mark.parametrize("override, field, fix", [
    ("eval.every=-1", "eval.every", "0 (off) or a number of steps"),
    ("eval.benchmarks=gsm9k", "eval.benchmarks", "unknown benchmark 'gsm9k'; valid: humaneval_plus"),
    ("eval.benchmarks=", "eval.benchmarks", "no benchmark selected"),
    ("eval.limit=0", "eval.limit", "at least 1"),
    ("eval.protocol=full", "eval.protocol", "'auto', 'azr' or 'quick'"),
    ("eval.evry=2", "eval.evry", "valid keys there: batch_size, benchmarks, every"),
])
def test_bad_eval_values_name_the_field_and_the_fix(override, field, fix):
    with pytest.raises(ConfigError) as err:
        load_config(None, [override])
    assert field in str(err.value) and fix in str(err.value), str(err.value)


def test_benchmarks_accept_groups_and_lists_in_canonical_order():
    assert load_config(None, ["eval.benchmarks=gsm8k,code"]).eval.names == ["humaneval_plus", "mbpp_plus", "livecodebench", "gsm8k"]
    assert load_config(None, ["eval.benchmarks=[gsm8k, mbpp_plus]"]).eval.names == ["mbpp_plus", "gsm8k"]
    assert load_config(None, []).eval.every == 0, "off by default"


def test_the_cli_refuses_a_bad_eval_value_before_any_run(mlflow_store, capsys):
    code = cli_in_process("train", "--set", "eval.every=-2")
    err = capsys.readouterr().err
    assert code == 2 and "eval.every" in err and "e.g. eval.every=10" in err, err
    assert not Path(mlflow_store.removeprefix("sqlite:///")).exists() or not _runs(mlflow_store)


def test_missing_benchmark_data_is_refused_before_the_run_exists(mlflow_store, tmp_path, monkeypatch):
    from populora.training.loop import Trainer

    monkeypatch.setenv("POPULORA_DATA_DIR", str(tmp_path / "nowhere"))
    cfg = load_config(None, ["model.tiny_random=true", "eval.every=1"])
    with pytest.raises(ConfigError) as err:
        Trainer.create(cfg)
    assert "eval.every=1 needs eval.benchmarks=gsm8k" in str(err.value) and "eval.every=0" in str(err.value)
    assert "populora data fetch" in str(err.value)
    assert not _runs(mlflow_store), "no MLflow run was started"


# ====================================================================== the subset
@needs_data
def test_subset_is_fixed_by_its_seed_and_a_true_subset(tmp_path):
    names = ["gsm8k", "humaneval_plus", "livecodebench"]
    a = pe.write_subset(DATA, names, 5, 0, tmp_path / "a")
    b = pe.write_subset(DATA, names, 5, 0, tmp_path / "b")
    c = pe.write_subset(DATA, names, 5, 1, tmp_path / "c")
    benchmarks.verify(a, names)  # its own SHA256SUMS: the evaluation library reads it like any data dir
    for name in names:
        got = benchmarks.read_records(a, name)
        full = benchmarks.read_records(DATA, name)
        assert len(got) == 5 and all(r in full for r in got), name
        assert got == benchmarks.read_records(b, name), "same seed, same problems"
        assert [full.index(r) for r in got] == sorted(full.index(r) for r in got), "kept in file order"
    assert benchmarks.read_records(c, "gsm8k") != benchmarks.read_records(a, "gsm8k"), "another seed, other problems"
    # another benchmark list keeps each benchmark's own draw (a population and its baseline can differ in list)
    d = pe.write_subset(DATA, ["gsm8k"], 5, 0, tmp_path / "d")
    assert benchmarks.read_records(d, "gsm8k") == benchmarks.read_records(a, "gsm8k")


def test_population_stats_take_the_weakest_and_best_member_whole():
    per = {"T0": {"eval/gsm8k/score": 0.5, "eval/gsm8k/truncated_rate": 0.1, "eval/gsm8k/accuracy_stderr": 0.2},
           "S0": {"eval/gsm8k/score": 0.25, "eval/gsm8k/truncated_rate": 0.9, "eval/gsm8k/accuracy_stderr": 0.1},
           "S1": {"eval/gsm8k/score": 0.25, "eval/gsm8k/truncated_rate": 0.3, "eval/gsm8k/accuracy_stderr": 0.3}}
    s = pe.population_stats(per, ["gsm8k"])
    assert s["eval_population/mean/gsm8k/score"] == pytest.approx(1 / 3)
    assert s["eval_population/weakest/gsm8k/truncated_rate"] == 0.9, "S0: the tie goes to the first id"
    assert s["eval_population/best/gsm8k/truncated_rate"] == 0.1
    assert "eval_population/mean/gsm8k/accuracy_stderr" not in s, "a mean of standard errors is not one"
    assert s["eval_population/weakest/gsm8k/accuracy_stderr"] == 0.1


# ====================================================================== scoring in place
@needs_data
def test_scores_the_backends_own_adapters_in_place_and_counts_their_compute(tiny_backend, tmp_path):
    cfg = load_config(None, ["model.tiny_random=true", "eval.every=1", "eval.limit=2", "eval.max_new_tokens=4"])
    for i, m in enumerate(("S0", "S1")):
        tiny_backend.add_adapter(m, seed=i)
    before = {m: {k: v.clone() for k, v in tiny_backend.adapter_state(m).items()} for m in ("S0", "S1")}
    evaluation = pe.PeriodicEval(cfg, tmp_path)
    scored = evaluation.run(tiny_backend, ["S0", "S1"], step=3)
    assert tiny_backend.adapters == ["S0", "S1"], "nothing loaded or removed: the trainer's adapters, in place"
    for m in ("S0", "S1"):
        assert all((before[m][k] == v).all() for k, v in tiny_backend.adapter_state(m).items())
        assert set(scored.member_metrics[m]) >= {"eval/gsm8k/score", "eval/gsm8k/accuracy", "eval/gsm8k/truncated_rate"}
        # 2 problems, greedy, at most 4 new tokens each: what the backend generated for this member
        assert scored.spent[m]["completions"] == 2 and 2 <= scored.spent[m]["generated_tokens"] <= 8
        pair = json.loads((tmp_path / pe.STEPS_DIR / "step_000003" / "pairs" / m / "gsm8k.json").read_text())
        assert pair["n"] == 2 and pair["config"]["batched"] is True
    assert scored.run_metrics["eval_population/mean/gsm8k/score"] == pytest.approx(
        sum(scored.member_metrics[m]["eval/gsm8k/score"] for m in ("S0", "S1")) / 2)


# ====================================================================== a real run
def _runs(uri: str) -> list:
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exps = [e.experiment_id for e in client.search_experiments()]
    return client.search_runs(exps, max_results=100) if exps else []


# smoke.yaml's population and evolution (6 members by step 2), with short generations: the tiny random model never
# stops early, so smoke's 128 / 48 tokens per proposal / answer were most of a run's CPU and nothing here needs them;
# from the seed programs (tasks.seed_rounds=0): step-0 seeding is not what in-training evaluation is about
SHORT = ["--set", "tasks.max_new_tokens_propose=24", "--set", "tasks.max_new_tokens_solve=8", "--set", "tasks.seed_rounds=0"]


def _train(tmp_path: Path, monkeypatch, runs: dict[str, list[str]]) -> dict[str, str]:
    """One ``populora train`` per name of ``runs`` (its overrides), each on its own store, one after the other in
    this process (``train_in_process``: the imports once, not ~9 s per run); returns their stores' URIs by name."""
    monkeypatch.chdir(tmp_path)
    stores = {}
    for name, overrides in runs.items():
        stores[name] = f"sqlite:///{tmp_path / name}.db"
        monkeypatch.setenv("MLFLOW_TRACKING_URI", stores[name])
        assert train_in_process("--config", str(ROOT / "configs/smoke.yaml"), "--quiet", "--set", "model.tiny_random=true",
                                "--set", "steps=2", *SHORT, *overrides) == 0, name
    return stores


def _histories(uri: str) -> dict[tuple[str, str], dict[int, float]]:
    """{(member id or "parent", metric): {step: value}} of every metric of the run."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    out = {}
    for r in _runs(uri):
        who = r.data.tags.get(rl.MEMBER_ID, "parent")
        for key in r.data.metrics:
            out[(who, key)] = {m.step: m.value for m in client.get_metric_history(r.info.run_id, key)}
    return out


@needs_data
@pytest.mark.slow  # two tiny runs through the CLI, ~1 min
def test_a_run_with_eval_every_1_logs_eval_histories_and_trains_as_without(tmp_path, monkeypatch):
    """smoke.yaml evolves at step 2 (half of each role replaced): a replaced member is scored through the step it
    trained last (step 2, before evolution), its child from the step it was born (2); the parent's mean / weakest
    / best at a step are over the members alive after it (as its checkpoint holds them)."""
    stores = _train(tmp_path, monkeypatch, {"on": ["--set", "eval.every=1", "--set", "eval.benchmarks=gsm8k", "--set", "eval.limit=2",
                                      "--set", "eval.max_new_tokens=8"], "off": []})
    on, off = stores["on"], stores["off"]
    (parent,) = [r for r in _runs(on) if rl.PARENT not in r.data.tags]
    assert parent.data.tags[rl.EVAL_EVERY] == "1" and parent.data.tags[rl.EVAL_SUBSET] == "gsm8k@2"
    h = _histories(on)
    members = {r.data.tags[rl.MEMBER_ID]: r for r in _runs(on) if rl.PARENT in r.data.tags}
    assert len(members) == 6, sorted(members)
    alive_at, scored_at = {1: set(), 2: set()}, {1: set(), 2: set()}
    for m, run in members.items():
        born = int(run.data.params["born_step"])
        died = int(run.data.tags.get(rl.REPLACED_AT, 99))
        steps = [s for s in (1, 2) if born <= s <= died]  # trained at its replacement step: scored then too
        for s in steps:
            scored_at[s].add(m)
            if s < died:
                alive_at[s].add(m)
        for key in ("eval/gsm8k/score", "eval/gsm8k/accuracy", "eval/gsm8k/truncated_rate",
                    "compute/eval/generated_tokens", "compute/eval/completions"):
            assert sorted(h[(m, key)]) == steps, (m, key, h.get((m, key)))
        assert all(v == 2 for v in h[(m, "compute/eval/completions")].values())
    assert alive_at[1] and alive_at[2] and alive_at[1] != alive_at[2], "evolution replaced members at step 2"
    for s, alive in alive_at.items():
        scores = [h[(m, "eval/gsm8k/score")][s] for m in alive]
        assert h[("parent", "eval_population/mean/gsm8k/score")][s] == pytest.approx(sum(scores) / len(scores))
        assert h[("parent", "eval_population/weakest/gsm8k/score")][s] == min(scores)
        assert h[("parent", "eval_population/best/gsm8k/score")][s] == max(scores)
        assert h[("parent", "compute/eval/generated_tokens")][s] == sum(h[(m, "compute/eval/generated_tokens")][s]
                                                                         for m in scored_at[s])
        assert h[("parent", "time/eval_s")][s] > 0
    assert scored_at[2] > alive_at[2] and scored_at[1] == alive_at[1]  # the replaced were scored at step 2
    # each score is linked to the LoggedModel of the weights scored: the member's checkpoint of that step, or a
    # replaced member's model at its death (MLflow 3's model_id on the metric)
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=on)
    models = {(m.tags[rl.REGISTRY_MEMBER], int(m.tags[rl.MODEL_STEP])): m
              for m in client.search_logged_models([parent.info.experiment_id], max_results=1000)}
    for s, scored in scored_at.items():
        for m in scored:
            linked = [(x.value, x.step) for x in models[(m, s)].metrics if x.key == "eval/gsm8k/score"]
            assert linked == [(h[(m, "eval/gsm8k/score")][s], s)], (m, s, linked)
    # training is the same with evaluation on: every training metric, the compute-matching ledger included
    # (wall-clock figures aside: time/*, system/*, and the seconds an evolution operator took)
    trained = {k: v for k, v in _histories(off).items()
               if not k[1].startswith(("time/", "system/")) and not k[1].endswith("/seconds")}
    assert trained and {k: h[k] for k in trained} == trained
    assert ("parent", "compute/per_adapter/generated_tokens") in trained


# ====================================================================== on Ray model workers
@needs_data
@pytest.mark.slow  # a local Ray instance with two model workers, ~2 min
def test_members_on_ray_workers_are_scored_as_on_the_local_path(local_ray, mlflow_store):
    """Rows go to the worker holding each member's adapter: the same completions as the local multi-LoRA path."""
    from populora.training.loop import Trainer

    tiny = ["steps=1", "model.tiny_random=true", "model.lora_rank=4", "tasks.max_new_tokens_propose=16",
            "tasks.max_new_tokens_solve=8", "tasks.tasks_per_teacher=1", "evolution.every=0", "eval.every=1",
            "eval.limit=2", "eval.max_new_tokens=6", "ray.cpus_per_model_worker=0.5", "ray.cpus_per_sandbox_worker=0.5",
            "tasks.seed_buffer=2", "tasks.seed_rounds=1"]  # a short step-0 seeding: ~7 s of CPU less per trainer

    def completions(trainer) -> dict[str, list[str]]:
        folder = trainer.run_dir / pe.STEPS_DIR / "step_000001" / "samples"
        return {m: [json.loads(line)["completion"] for line in (folder / m / "gsm8k.jsonl").read_text().splitlines()]
                for m in ("T0", "T1", "S0", "S1")}

    local = Trainer.create(load_config(None, tiny))
    local_record = local.step()
    remote = Trainer.create(load_config(None, tiny + ["ray.address=local", "ray.model_workers=2", "ray.sandbox_workers=1"]))
    try:
        assert set(remote.backend.owner.values()) == {0, 1}, "members really spread over both workers"
        remote_record = remote.step()
    finally:
        remote.close()  # its workers: the shared local Ray's CPUs free for the next test
    assert completions(remote) == completions(local)
    for m in ("T0", "T1", "S0", "S1"):
        got, want = remote_record["member_metrics"][m], local_record["member_metrics"][m]
        assert got["eval/gsm8k/score"] == want["eval/gsm8k/score"]
        assert got["compute/eval/generated_tokens"] == want["compute/eval/generated_tokens"] > 0


def test_the_launch_preflight_names_missing_eval_data(tmp_path, monkeypatch):
    from populora.training import preflight_problems

    cfg = load_config(None, ["eval.every=2"])
    monkeypatch.setenv("POPULORA_DATA_DIR", str(tmp_path / "nowhere"))
    (problem,) = preflight_problems(cfg, cuda=False)
    assert problem.startswith("eval.every=2 needs eval.benchmarks=gsm8k") and "eval.every=0" in problem
    monkeypatch.setenv("POPULORA_DATA_DIR", str(DATA))
    assert preflight_problems(cfg, cuda=False) == [] or not (DATA / benchmarks.CHECKSUMS).is_file()
