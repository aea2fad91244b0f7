"""``populora eval`` / ``populora report`` end to end on a training run's MLflow layout (parent run, one child run
per member with a real PEFT adapter dir, a baseline run), with the tiny random model and --limit 1."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import train_in_process, wait_for

from populora.evaluation.harness import benchmarks as B
from populora.evaluation.cli import eval_main, report_main
from populora.platform.store import runlayout as rl

ROOT = B.data_dir()
pytestmark = pytest.mark.skipif(not (ROOT / B.CHECKSUMS).is_file(), reason=f"no benchmark data at {ROOT}")
BENCH = "humaneval_plus,livecodebench,gsm8k"
FAST = ["--benchmarks", BENCH, "--limit", "1", "--max-new-tokens", "8"]
TINY = ["model.tiny_random=true", "model.lora_rank=4"]


def _save_adapters(tmp: Path, names: list[str]) -> dict[str, Path]:
    from populora.platform.backends import LoraSpec, PeftBackend
    from populora.platform.model.models import load_base, resolve_source

    model, tok = load_base(resolve_source("embedded"), tiny_random=True, device="cpu")
    backend = PeftBackend(model, tok, LoraSpec(rank=4))
    out = {}
    for i, n in enumerate(names):
        backend.add_adapter(n, seed=i)
        g = torch.Generator().manual_seed(i)  # non-zero B, so members really differ from the base
        backend.set_adapter_state(n, {k: torch.randn(v.shape, generator=g) * 0.5 for k, v in backend.adapter_state(n).items()})
        out[n] = backend.save_adapter(n, tmp / "adapters" / n)
    return out


def _training_run(tracker, tmp: Path, kind: str, members: dict[str, Path | None], baseline: str = "",
                  overrides: tuple[str, ...] = ()) -> str:
    """The tags, params and run-dir config.yaml populora train leaves (see populora/training/loop.py)."""
    from populora.platform import config as config_io
    from populora.training import load_config

    run_dir = tmp / f"run_{kind}"
    rid = tracker.start_run("eval-test", kind, tags={"populora.kind": kind, "populora.status": "finished",
                                                      "populora.run_dir": str(run_dir), "populora.baseline_run": baseline})
    cfg = load_config(None, TINY + (["population.single_agent=true"] if kind == "baseline" else []) + list(overrides))
    tracker.log_params(rid, config_io.flatten(cfg))
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(config_io.dump(cfg))
    tracker.log_text(rid, config_io.dump(cfg), "config.yaml")
    for i, (m, path) in enumerate(members.items()):
        tags = {"populora.member_id": m, "populora.role": "both" if m.startswith("B") else "teacher",
                "populora.alive": str(path is not None).lower(), "populora.adapter_dir": str(path or tmp / "gone" / m)}
        child = tracker.start_run("eval-test", m, tags=tags, parent=rid)
        # the compute ledger: member i generated and trained 100 * (i + 1) tokens
        tracker.log_metrics(child, {"compute/cumulative/generated_tokens": 100.0 * (i + 1),
                                    "compute/cumulative/trained_tokens": 100.0 * (i + 1), "compute/cumulative/rollouts": 2.0}, 1)
    per_adapter = 100.0 * (len(members) + 1) / 2
    tracker.log_metrics(rid, {"compute/per_adapter/generated_tokens": per_adapter, "compute/per_adapter/trained_tokens": per_adapter}, 1)
    return rid


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("evalrun")
    os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{tmp / 'mlflow.db'}"
    from populora.platform.store.tracking import Tracker

    tracker = Tracker()
    adapters = _save_adapters(tmp, ["T0", "S0", "B0"])
    baseline = _training_run(tracker, tmp, "baseline", {"B0": adapters["B0"]})
    population = _training_run(tracker, tmp, "population", {"T0": adapters["T0"], "S0": adapters["S0"], "S1": None}, baseline)
    yield tracker, population, baseline, tmp
    os.environ.pop("MLFLOW_TRACKING_URI", None)


def _metrics(tracker, run_id):
    return tracker.get_run(run_id).data.metrics


def test_eval_run_logs_metrics_table_and_report(runs, capsys):
    tracker, pop, baseline, tmp = runs
    assert eval_main(["--run", pop, *FAST]) == 0
    children = {c.data.tags[rl.MEMBER_ID]: c.info.run_id for c in tracker.children(pop)}
    for m in ("T0", "S0"):
        keys = set(_metrics(tracker, children[m]))
        assert {"eval/humaneval_plus/plus", "eval/humaneval_plus/base", "eval/livecodebench/pass_at_1", "eval/gsm8k/accuracy"} <= keys
    assert not [k for k in _metrics(tracker, children["S1"]) if k.startswith("eval")]  # died before saving an adapter: skipped under --members all
    b0 = tracker.children(baseline)[0].info.run_id
    assert "eval/gsm8k/accuracy" in _metrics(tracker, b0)
    assert "eval_base/gsm8k/accuracy" in _metrics(tracker, pop)
    arts = {a.path for a in tracker.client.list_artifacts(pop, "eval")}
    assert {"eval/results.json", "eval/table.json", "eval/report.md", "eval/report.csv"} <= arts
    data = tracker.load_json(pop, "eval/results.json")
    assert set(data["results"]) == {"T0", "S0", "baseline (B0)", "base model"}
    entry = data["results"]["T0"]["humaneval_plus"]
    assert {"plus", "plus_stderr", "base", "n", "alias"} <= set(entry) and entry["n"] == 1
    assert data["config"]["generation"]["temperature"] == 0.0 and data["config"]["limit"] == 1
    capsys.readouterr()
    assert report_main(["--run", pop]) == 0
    printed = capsys.readouterr()
    out = printed.out
    assert "Downloading artifacts" not in out + printed.err  # MLflow's progress bars stay off the report
    lines = [x for x in out.splitlines() if x.strip()]
    assert len(lines) == len(set(lines)), "a line printed twice"
    table = lines[lines.index(next(x for x in lines if x.startswith("scores in %"))):]
    table = table[:next(i for i, x in enumerate(table) if x.startswith("tokens/adapter")) + 1]
    head = table[0].split()[3:]
    assert sorted(head[:2]) == ["S0", "T0"] and head[2:] == ["mean", "weakest", "best", "baseline", "base", "mean", "-",
                                                             "baseline", "[95%]", "weakest", "-", "baseline", "[95%]"]
    # the benchmarks scored and the averages that are a fact of their own (GSM8K alone is the math avg: no row)
    assert [x.split("  ")[0] for x in table[1:]] == ["HumanEval+", "LiveCodeBench 2408-2501 (public tests)", "GSM8K",
                                                    "code avg (= AZR)", "overall (mean of 3)", "tokens/adapter"]
    assert all("-" != cell for x in table[1:-1] for cell in x.split()[-4:-2])  # every verdict cell filled
    assert sum(x.startswith("verdict: ") for x in lines) == 1
    assert [x for x in lines if x.startswith("compute: ")] == [
        "compute: not compute-matched: the baseline spent 0.50x the population's per-adapter compute (200 vs 400 generated +"]
    md = (tmp / "run_population" / "eval" / "report.md").read_text()
    assert "LiveCodeBench 2408-2501 (public tests)" in md and "HumanEval+" in md
    assert "--limit 1: the first 1 of each benchmark, not comparable with full-benchmark scores" in md
    header = (tmp / "run_population" / "eval" / "report.csv").read_text().splitlines()[0].split(",")
    assert len(header) == 1 + 10 + 5 + 1 and header[-6:] == ["code avg (= AZR)", "math avg (7 incl. GSM8K)", "overall (mean of 10)",
                                                            "math avg (AZR: 6 no GSM8K)", "total (AZR)", "tokens/adapter"]


def test_finished_pairs_are_not_redone(runs, capsys, monkeypatch):
    tracker, pop, _, tmp = runs
    pairs = tmp / "run_population" / "eval" / "pairs"
    assert len(list(pairs.glob("*/*.json"))) == 4 * 3
    import populora.platform.model.models as models

    monkeypatch.setattr(models, "load_base", lambda *a, **k: pytest.fail("all pairs are done: no model needed"))
    capsys.readouterr()
    assert eval_main(["--run", pop, *FAST]) == 0
    assert capsys.readouterr().err.count("done earlier") == 12
    # a pair whose result file is missing (killed before it was written) is the only one redone
    monkeypatch.undo()
    (pairs / "T0" / "gsm8k.json").unlink()
    before = {p: p.stat().st_mtime_ns for p in pairs.glob("*/*.json")}
    assert eval_main(["--run", pop, "--members", "T0", "--no-base", *FAST]) == 0
    assert (pairs / "T0" / "gsm8k.json").is_file()
    assert all(p.stat().st_mtime_ns == t for p, t in before.items())


# ``populora.evaluation.cli eval ...`` whose runner holds after storing its first pair (a marker file says so) and
# holds every later pair before it is stored, until the test kills it
HOLD_AFTER_FIRST_PAIR = """
import sys, threading, time
from pathlib import Path
from populora.evaluation import cli
from populora.evaluation.harness import runner
marker, held, store = Path(sys.argv[1]), threading.Lock(), runner.Runner._store
def first_then_hold(self, *args, **kwargs):
    held.acquire()  # never released: a later pair (another thread's too) waits here
    out = store(self, *args, **kwargs)
    marker.write_text("stored")
    time.sleep(3600)
    return out
runner.Runner._store = first_then_hold
sys.exit(cli.COMMANDS[sys.argv[2]](sys.argv[3:]))
"""


def test_killed_evaluation_resumes(runs, tmp_path, capsys):
    tracker, pop, _, _ = runs
    out = tmp_path / "eval"
    cmd = [sys.executable, "-m", "populora.evaluation.cli", "eval", "--run", pop, "--members", "T0", "--no-base",
           "--out", str(out), *FAST]
    # the same evaluation, held once its first pair is stored (every later pair waits): killed there, mid-evaluation,
    # at an event rather than a race between the poll and the remaining pairs
    marker = tmp_path / "first_pair_stored"
    held = [sys.executable, "-c", HOLD_AFTER_FIRST_PAIR, str(marker), *cmd[3:]]
    proc = subprocess.Popen(held, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    wait_for(lambda: marker.exists() or proc.poll() is not None, 300, "a first stored pair")
    assert proc.poll() is None, proc.communicate()[1][-2000:]
    os.killpg(proc.pid, signal.SIGKILL)  # killed mid-evaluation
    proc.wait()
    first = {p: p.stat().st_mtime_ns for p in out.glob("pairs/*/*.json")}
    assert 1 <= len(first) < 6
    capsys.readouterr()
    # the resume and the report in this process (the other tests' way; the killed one was its own process)
    assert eval_main(cmd[4:]) == 0
    assert capsys.readouterr().err.count("done earlier") == len(first)
    assert len(list(out.glob("pairs/*/*.json"))) == 6 and not list(out.glob("pairs/*/.*.tmp"))
    assert all(p.stat().st_mtime_ns == t for p, t in first.items())
    assert report_main(["--results", str(out / "results.json")]) == 0
    assert "population mean" in capsys.readouterr().out


def test_bad_input_names_what_is_valid(runs, tmp_path, capsys):
    _, pop, _, _ = runs
    assert eval_main(["--run", pop, "--benchmarks", "gsm8k,hellaswag"]) == 2
    assert "valid: humaneval_plus, mbpp_plus, livecodebench" in capsys.readouterr().err
    assert eval_main(["--run", pop, "--data-dir", str(tmp_path / "nope"), *FAST]) == 2
    err = capsys.readouterr().err
    assert "SHA256SUMS" in err and "HumanEvalPlus-v0.1.10.jsonl" in err and "populora data fetch" in err
    assert eval_main(["--run", "0123456789abcdef", *FAST]) == 2
    assert "populora runs" in capsys.readouterr().err
    assert eval_main(["--adapter", str(tmp_path), *FAST]) == 2
    assert "not a PEFT adapter dir" in capsys.readouterr().err


def test_unknown_member_lists_the_valid_ones(runs, capsys):
    _, pop, _, _ = runs
    assert eval_main(["--run", pop, "--members", "T0,X9", *FAST]) == 2
    err = capsys.readouterr().err
    assert "unknown member(s) X9" in err and "valid: S0, S1, T0" in err


def test_the_base_model_comes_from_the_runs_config(runs, capsys):
    from populora.evaluation.config import run_model

    tracker, pop, _, tmp = runs
    other = _training_run(tracker, tmp / "other", "baseline", {"B0": tmp / "adapters" / "B0"},
                          overrides=("model.dtype=bfloat16",))
    assert eval_main(["--run", pop, "--baseline", other, *FAST]) == 2
    err = capsys.readouterr().err
    assert f"baseline run {other} was trained on" in err and "dtype='bfloat16'" in err and "not comparable" in err
    (tmp / "other" / "run_baseline" / "config.yaml").unlink()  # the run dir is on another machine: the artifact
    assert run_model(other, tmp / "other" / "run_baseline", tracker.uri).dtype == "bfloat16"
    assert eval_main(["--run", pop, "--model", "HuggingFaceTB/SmolLM2-135M", *FAST]) == 2
    assert "a run is scored on the base model its own config names" in capsys.readouterr().err


def test_batched_population_scores_equal_one_at_a_time(runs, tmp_path):
    """Every target of a benchmark in mixed-adapter batches (the default) scores exactly as one pair at a time:
    the same metrics and the same completions, for members, the baseline and the bare base model."""
    _, pop, _, _ = runs
    args = ["--run", pop, "--benchmarks", BENCH, "--limit", "2", "--max-new-tokens", "8"]
    assert eval_main([*args, "--out", str(tmp_path / "batched")]) == 0
    assert eval_main([*args, "--out", str(tmp_path / "single"), "--one-at-a-time"]) == 0
    def scores(d):  # all but where, how long and in which mode: they differ by construction
        res = json.loads((tmp_path / d / "results.json").read_text())["results"]
        return {t: {b: {k: v for k, v in e.items() if k not in ("seconds", "samples_file", "pair_config")}
                    for b, e in r.items()} for t, r in res.items()}

    batched, single = scores("batched"), scores("single")
    modes = {json.loads((tmp_path / d / "results.json").read_text())["results"]["T0"]["gsm8k"]["pair_config"]["batched"]
             for d in ("batched", "single")}
    assert modes == {True, False}  # each pair says how it was made
    assert set(batched) == set(single) == {"T0", "S0", "baseline (B0)", "base model"}
    assert batched == single
    for f in (tmp_path / "single" / "samples").glob("*/*.jsonl"):
        assert (tmp_path / "batched" / "samples" / f.parent.name / f.name).read_text() == f.read_text(), f
    # the members really differ from the base model, so a mix-up of adapters between rows would show
    texts = {d.name: (d / "humaneval_plus.jsonl").read_text() for d in (tmp_path / "single" / "samples").iterdir()}
    assert len(set(texts.values())) > 1, texts


def test_switches_that_turn_a_field_off_say_so_in_their_help():
    """``--one-at-a-time`` / ``--no-base`` set a field to false; their help must not read as the field's "on" text."""
    from populora.evaluation.cli import _eval_parser

    helps = {a.option_strings[0]: a.help for a in _eval_parser()._actions if a.option_strings}
    assert helps["--one-at-a-time"].startswith("sets batched=false; batched: Every target of a benchmark at once")
    assert helps["--no-base"].startswith("sets include_base=false; include_base: Also score the bare base model")
    assert helps["--base-only"].endswith("[base_only=true]")
    assert helps["--limit"].endswith("[limit]")


# ====================================================================== --step: a checkpoint's adapters
def _adapter_weights(path: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(path / "adapter_model.safetensors"))


def test_step_scores_the_members_alive_at_that_checkpoint_with_its_adapters(mlflow_store, tmp_path, capsys):
    """A real tiny run (2 steps, evolution at step 2): ``--step 1`` scores the members alive at step 1 with their
    step-1 adapters (other weights than the final ones), through the same scoring as ``--adapter`` on that dir
    (the reference: same generations), into eval/step_000001 (local and MLflow), leaving member metrics alone."""
    from populora.evaluation import results
    from populora.platform.store.tracking import Tracker

    # in this process (the run only makes the store), short generations, from the seed programs: what is scored
    # here is which checkpoint's adapters, not what the random model wrote
    assert train_in_process("--config", str(Path(__file__).resolve().parents[2] / "configs/smoke.yaml"),
                            "--set", "model.tiny_random=true", "--set", "steps=2", "--set", f"output_dir={tmp_path / 'runs'}",
                            "--set", "tasks.max_new_tokens_propose=24", "--set", "tasks.max_new_tokens_solve=8",
                            "--set", "tasks.seed_rounds=0", "--quiet") == 0
    tracker = Tracker()
    rid = next(r.info.run_id for r in tracker.client.search_runs([e.experiment_id for e in tracker.client.search_experiments()])
               if r.data.tags.get(rl.KIND) == rl.POPULATION)
    run_dir = Path(tracker.get_run(rid).data.tags[rl.RUN_DIR])
    assert eval_main(["--run", rid, "--step", "7", "--benchmarks", "gsm8k"]) == 2
    err = capsys.readouterr().err
    assert "no checkpoint at step 7" in err and "checkpoints at step(s) 1, 2" in err

    fast = ["--benchmarks", "gsm8k", "--limit", "1", "--max-new-tokens", "6"]
    assert eval_main(["--run", rid, "--step", "1", *fast]) == 0
    out = run_dir / "eval" / "step_000001"
    data = json.loads((out / "results.json").read_text())
    state = json.loads((run_dir / "checkpoints" / "step_000001" / "state.json").read_text())
    alive_then = sorted(m["id"] for m in state["population"]["members"] if m["alive"])
    members = sorted(k for k, t in data["targets"].items() if t["kind"] == "member")
    assert members == alive_then == ["S0", "S1", "T0", "T1"] and data["config"]["step"] == 1
    final_alive = {c.data.tags[rl.MEMBER_ID] for c in tracker.children(rid) if c.data.tags.get(rl.ALIVE) == "true"}
    assert final_alive != set(alive_then), "evolution at step 2 replaced members: step 1 must score the old ones"
    for m in members:
        assert Path(data["targets"][m]["adapter_dir"]) == run_dir / "checkpoints" / "step_000001" / "adapters" / m
    changed = [m for m in members if m in final_alive and any(
        not torch.equal(a, b) for a, b in zip(_adapter_weights(Path(data["targets"][m]["adapter_dir"])).values(),
                                              _adapter_weights(Path(tracker.get_run(data["targets"][m]["mlflow_run"])
                                                                    .data.tags[rl.ADAPTER_DIR])).values()))]
    assert changed, "a member trained between step 1 and the end: its step-1 adapter has other weights"
    assert results.load(tracker, rid, step=1)["results"] == data["results"]  # logged as eval/step_000001/results.json
    capsys.readouterr()
    assert report_main(["--run", rid, "--step", "1"]) == 0 and "T1" in capsys.readouterr().out  # T1 died at step 2
    assert report_main(["--run", rid, "--step", "2"]) == 2 and "--step 2" in capsys.readouterr().err
    for c in tracker.children(rid):
        assert not any(k.startswith("eval/") for k in c.data.metrics), "a checkpoint's scores are not member metrics"
    # the reference: the same adapter dir scored as --adapter on the run's base gives the same generations
    t0 = data["targets"]["T0"]["adapter_dir"]
    ref = tmp_path / "ref"
    assert eval_main(["--adapter", t0, "--tiny-random", "--out", str(ref), *fast]) == 0
    sample = lambda path: [json.loads(line)["completion"] for line in Path(path).read_text().splitlines()]  # noqa: E731
    assert sample(out / "samples" / "T0" / "gsm8k.jsonl") == sample(ref / "samples" / "T0" / "gsm8k.jsonl")
