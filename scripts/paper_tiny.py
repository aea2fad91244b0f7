"""The paper's own path end to end at tiny scale, by overrides only: configs/paper-4t4s.yaml and its baseline
configs/paper-baseline.yaml on the tiny Qwen2 model, vLLM generation on the real CPU engine inside 2
data-parallel Ray workers, seeding, one evolution, a checkpoint, kill -9 and resume, then ``populora eval``
under the azr protocol. Run it in the vLLM venv (``make vllm-venv``):

    PYTHONPATH=. .venv-vllm/bin/python scripts/paper_tiny.py [--dir DIR] [--json]

What it checks (exit 1 and the reason if any fails): the population run is killed (-9) once its step-1
checkpoint exists and resumed from it; both runs end FINISHED with every step logged exactly once (nothing lost,
nothing duplicated); the population evolved once; both runs share one ``pair`` id (linked); the evaluation of
the population run scores every member under protocol azr. Printed: each phase's wall time, the steps' own
phase times (MLflow ``time/*``) and the compute ledger (``compute/per_adapter/*``) of both runs, side by side.
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


def train_killed_and_resumed(out: Path, env: dict, logs: Path, phases: dict) -> str:
    """The population run, kill -9 once its step-1 checkpoint is on disk, then --resume to the end: its run id."""
    t0 = time.perf_counter()
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
    if proc.poll() is not None:
        raise SystemExit(f"the population run ended (exit {proc.returncode}) before its step-1 checkpoint:\n"
                         + (logs / "population.log").read_text()[-3000:])
    started = psutil.Process(proc.pid).children(recursive=True)  # Ray's processes, the workers, their engines
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    phases["population: start to step-1 checkpoint, then kill -9"] = time.perf_counter() - t0
    _, alive = psutil.wait_procs(started, timeout=120)
    left = [f"{p.pid} {p.name()}" for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    phases["left after kill -9 (120 s later)"] = left
    code, text, s = run([sys.executable, "-m", "populora.cli", "train", "--resume", run_id, "--quiet"],
                        logs / "resume.log", env)
    phases["population: resume to the end"] = s
    if code != 0:
        raise SystemExit(f"the resume failed (exit {code}):\n{text[-3000:]}")
    return run_id


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
    args = ap.parse_args(argv)
    d = Path(args.dir or tempfile.mkdtemp(prefix="populora-paper-tiny-")).resolve()
    (d / "logs").mkdir(parents=True, exist_ok=True)
    os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{d / 'mlflow.db'}"
    pair = f"tiny-paper-{int(time.time())}"
    env = {**os.environ, "PAIR": pair, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    phases, t0 = {}, time.perf_counter()
    pop = train_killed_and_resumed(d / "runs", env, d / "logs", phases)
    code, text, phases["baseline: train"] = run(train_cmd("paper-baseline.yaml", d / "runs", pair, BASELINE), d / "logs" / "baseline.log", env)
    if code != 0:
        raise SystemExit(f"the baseline failed (exit {code}):\n{text[-3000:]}")
    base = next(iter(re.findall(r"^run ([0-9a-f]{32}):", text, re.M)))
    code, text, phases["eval: population run, azr protocol"] = run(
        [sys.executable, "-m", "populora.cli", "eval", "--run", pop, *EVAL], d / "logs" / "eval.log", env)
    if code != 0:
        raise SystemExit(f"the evaluation failed (exit {code}):\n{text[-3000:]}")
    phases["total"] = time.perf_counter() - t0
    left = phases.pop("left after kill -9 (120 s later)")
    result = {"dir": str(d), "phases_s": {k: round(v, 1) for k, v in phases.items()}, "left_after_kill_9": left,
              "population": summary(pop), "baseline": summary(base), "population_run": pop, "baseline_run": base,
              "eval_protocol": next(iter(re.findall(r"under protocol (\w+)", text)), None),
              "eval_log_tail": text.strip().splitlines()[-12:]}
    problems = [f"{k} run {r['status']}, steps logged {r['steps_logged']}" for k, r in
                (("population", result["population"]), ("baseline", result["baseline"]))
                if r["status"] != "FINISHED" or r["steps_logged"] != list(range(1, STEPS + 1))]
    if result["population"]["pair"] != pair or result["baseline"]["pair"] != pair:
        problems.append(f"the runs are not linked by pair {pair}")
    if left:
        problems.append(f"processes left 120 s after the trainer's kill -9: {left}")
    if result["eval_protocol"] != "azr":
        problems.append(f"the evaluation ran under protocol {result['eval_protocol']}, not azr")
    result["problems"] = problems
    print(json.dumps(result, indent=None if args.json else 1))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
