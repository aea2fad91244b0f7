"""The paper's own path end to end at tiny scale, by overrides only: configs/paper-4t4s.yaml and its baseline
configs/paper-baseline.yaml on the tiny Qwen2 model, vLLM generation on the real CPU engine inside 2
data-parallel Ray workers, seeding, one evolution, a checkpoint, kill -9 and resume, then ``populora eval``
under the azr protocol. Run it in the vLLM venv (``make vllm-venv``):

    PYTHONPATH=. .venv-vllm/bin/python scripts/paper_tiny.py [--dir DIR] [--json] [--quick]

What it checks (exit 1 and the reason if any fails): the population run is killed (-9) once its step-1
checkpoint exists and resumed from it; both runs end FINISHED with every step logged exactly once (nothing lost,
nothing duplicated); the population evolved once; both runs share one ``pair`` id (linked); the evaluation of
the population run scores every member under protocol azr. Printed: each phase's wall time, the steps' own
phase times (MLflow ``time/*``) and the compute ledger (``compute/per_adapter/*``) of both runs, side by side.

``--quick`` (what `make test` runs; `make test-paper` runs the whole path): the population run alone, uninterrupted,
then its evaluation, 2 engine starts instead of 6; it checks the population as above and that nothing it started
(Ray, its workers, their engines) outlives its normal end.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
STEPS = 2
# everything the tiny run changes in the presets: the model, the sizes, the workers (nothing else)
OVERRIDES = [
    f"steps={STEPS}", "model.base=tiny-qwen2", "model.dtype=float32", "model.device=cpu",
    "tasks.tasks_per_teacher=2", "tasks.seed_buffer=4", "tasks.seed_rounds=1", "tasks.max_new_tokens_propose=48",
    "tasks.max_new_tokens_solve=24", "solver.batch_per_kind=2", "optim.max_seq_len=512",
    "evolution.every=2", "checkpoint.every=1", "checkpoint.log_adapters_every=0",
    "ray.address=local", "ray.placement=data_parallel", "ray.model_workers=2", "ray.sandbox_workers=1",
    "ray.num_cpus=4", "ray.cpus_per_model_worker=1", "ray.cpus_per_sandbox_worker=0.5",
]
# the presets' population proposes 32 tasks per teacher and trains 128 buffer tasks per kind and student, its
# baseline 16 and 64: the same 2:1 cut keeps them compute-matched per adapter (compute/per_adapter/*)
BASELINE = ["tasks.tasks_per_teacher=1", "solver.batch_per_kind=1"]
EVAL = ["--protocol", "azr", "--benchmarks", "gsm8k,humaneval_plus", "--limit", "1", "--max-new-tokens", "16"]


def train_cmd(config: str, out: Path, pair: str, extra=()) -> list[str]:
    sets = [*OVERRIDES, *extra, f"output_dir={out}", f"pair={pair}"]
    return [sys.executable, "-m", "populora.cli", "train", "--config", str(ROOT / "configs" / config), "--quiet",
            *[a for s in sets for a in ("--set", s)]]


def run(cmd: list[str], log: Path, env: dict) -> tuple[int, str, float]:
    t0 = time.perf_counter()
    with open(log, "w") as f:
        code = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=ROOT).returncode
    return code, log.read_text(), time.perf_counter() - t0


def left_of(started: list, timeout: float) -> list[str]:
    """The processes of ``started`` still running ``timeout`` s later."""
    _, alive = psutil.wait_procs(started, timeout=timeout)
    return [f"{p.pid} {p.name()}" for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def train_killed_and_resumed(out: Path, env: dict, logs: Path, phases: dict) -> tuple[str, list[str]]:
    """The population run, kill -9 once its step-1 checkpoint is on disk, then --resume to the end: its run id, and
    what the killed trainer started still running 120 s after the kill."""
    t0 = time.perf_counter()
    proc, run_id, started = until_step_1(out, env, logs)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    phases["population: start to step-1 checkpoint, then kill -9"] = time.perf_counter() - t0
    left = left_of(started, 120)
    code, text, s = run([sys.executable, "-m", "populora.cli", "train", "--resume", run_id, "--quiet"],
                        logs / "resume.log", env)
    phases["population: resume to the end"] = s
    if code != 0:
        raise SystemExit(f"the resume failed (exit {code}):\n{text[-3000:]}")
    return run_id, left


def train_to_the_end(out: Path, env: dict, logs: Path, phases: dict) -> tuple[str, list[str]]:
    """``--quick``: the population run uninterrupted; what it started (Ray, its workers, their engines) must end with
    it (``Trainer.close``). Its run id, and what it started still running 120 s after its end."""
    t0 = time.perf_counter()
    proc, run_id, started = until_step_1(out, env, logs, may_end=True)
    code = proc.wait()
    phases["population: start to the end"] = time.perf_counter() - t0
    if code != 0:
        raise SystemExit(f"the population run failed (exit {code}):\n" + (logs / "population.log").read_text()[-3000:])
    return run_id, left_of(started, 120)


def until_step_1(out: Path, env: dict, logs: Path, may_end: bool = False):
    """The population run started and its step-1 checkpoint on disk: (process, run id, the processes it started);
    ``may_end``: a run that already ended well is no error (nothing of it left to list)."""
    log = open(logs / "population.log", "w")
    proc = subprocess.Popen(train_cmd("paper-4t4s.yaml", out, env["PAIR"]), stdout=log, stderr=subprocess.STDOUT,
                            env=env, cwd=ROOT)
    run_id = None
    while proc.poll() is None:
        text = (logs / "population.log").read_text()
        run_id = run_id or next(iter(re.findall(r"^run ([0-9a-f]{32}):", text, re.M)), None)
        if run_id and any((out / run_id / "checkpoints").glob("step_000001")):
            break
        time.sleep(0.5)
    if may_end and proc.poll() == 0:
        return proc, run_id, []
    if proc.poll() is not None:
        raise SystemExit(f"the population run ended (exit {proc.returncode}) before its step-1 checkpoint:\n"
                         + (logs / "population.log").read_text()[-3000:])
    return proc, run_id, psutil.Process(proc.pid).children(recursive=True)  # Ray's, the workers, their engines


def summary(run_id: str) -> dict:
    from mlflow import MlflowClient

    from populora.platform.store.runlayout import STEP_SENTINEL

    client = MlflowClient()
    r = client.get_run(run_id)
    steps = sorted(m.step for m in client.get_metric_history(run_id, STEP_SENTINEL))
    times = {}
    for key in r.data.metrics:
        if key.startswith("time/"):
            times[key] = {m.step: round(m.value, 2) for m in client.get_metric_history(run_id, key)}
    return {"status": r.info.status, "steps_logged": steps, "pair": r.data.tags.get("populora.pair") or r.data.params.get("pair"),
            "ledger": {k: v for k, v in sorted(r.data.metrics.items()) if k.startswith("compute/per_adapter/")},
            "step_times": times, "evolutions": r.data.metrics.get("evolution/replaced", None),
            "tags": {k: v for k, v in r.data.tags.items() if k in ("populora.seed_fallback", "populora.kind")}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", help="where runs, the MLflow store and logs go (default: a new temp dir)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--quick", action="store_true",
                    help="the population run alone, uninterrupted, then its evaluation: 2 engine starts instead of 6 "
                         "(no kill -9 and resume, no baseline); make test runs this, make test-paper the whole path")
    args = ap.parse_args(argv)
    d = Path(args.dir or tempfile.mkdtemp(prefix="populora-paper-tiny-")).resolve()
    (d / "logs").mkdir(parents=True, exist_ok=True)
    os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{d / 'mlflow.db'}"
    pair = f"tiny-paper-{int(time.time())}"
    env = {**os.environ, "PAIR": pair, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    phases, t0 = {}, time.perf_counter()
    if args.quick:
        (pop, left), base, left_after = train_to_the_end(d / "runs", env, d / "logs", phases), None, "its end"
    else:
        (pop, left), left_after = train_killed_and_resumed(d / "runs", env, d / "logs", phases), "its kill -9"
        code, text, phases["baseline: train"] = run(train_cmd("paper-baseline.yaml", d / "runs", pair, BASELINE),
                                                    d / "logs" / "baseline.log", env)
        if code != 0:
            raise SystemExit(f"the baseline failed (exit {code}):\n{text[-3000:]}")
        base = next(iter(re.findall(r"^run ([0-9a-f]{32}):", text, re.M)))
    code, text, phases["eval: population run, azr protocol"] = run(
        [sys.executable, "-m", "populora.cli", "eval", "--run", pop, *EVAL], d / "logs" / "eval.log", env)
    if code != 0:
        raise SystemExit(f"the evaluation failed (exit {code}):\n{text[-3000:]}")
    phases["total"] = time.perf_counter() - t0
    result = {"dir": str(d), "quick": args.quick, "phases_s": {k: round(v, 1) for k, v in phases.items()},
              "left": left, "population": summary(pop), "baseline": summary(base) if base else None,
              "population_run": pop, "baseline_run": base,
              "eval_protocol": next(iter(re.findall(r"under protocol (\w+)", text)), None),
              "eval_log_tail": text.strip().splitlines()[-12:]}
    runs = [(k, result[k]) for k in ("population", "baseline") if result[k] is not None]
    problems = [f"{k} run {r['status']}, steps logged {r['steps_logged']}" for k, r in runs
                if r["status"] != "FINISHED" or r["steps_logged"] != list(range(1, STEPS + 1))]
    if any(r["pair"] != pair for _, r in runs):
        problems.append(f"the runs are not linked by pair {pair}")
    if left:
        problems.append(f"processes left 120 s after the trainer's {left_after}: {left}")
    if result["eval_protocol"] != "azr":
        problems.append(f"the evaluation ran under protocol {result['eval_protocol']}, not azr")
    result["problems"] = problems
    print(json.dumps(result, indent=None if args.json else 1))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
