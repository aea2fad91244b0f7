"""scripts/gpu-shapes.sh, the GPU kit that needs no weights, in its CPU dry run (so it cannot rot before a GPU is
lent): the paper-4t4s step's phases run at tiny shapes, and the plan's figures printed beside them are
``populora plan``'s own."""

import json
import os
import subprocess
import sys

from conftest import ROOT
from populora.platform import config as config_io
from populora.training import TrainConfig
from populora.training.compute.workload import make_plan

SCRIPT = ROOT / "scripts" / "gpu-shapes.sh"


def test_dry_run_runs_one_cut_step_and_prints_the_plans_figures():
    out = subprocess.run([str(SCRIPT), "--dry-run", "--json", "--decode-probe", "3"], capture_output=True, text=True, timeout=600,
                         env={**os.environ, "PYTHON": sys.executable})
    assert out.returncode == 0, out.stdout + out.stderr
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["dry_run"] is True and r["device"] == "cpu" and r["max_memory_allocated_gb"] is None
    phases = r["phases"]
    assert set(phases) == {"generate_propose", "generate_solve", "update"}
    assert set(r["decode_probe"]) == {"hf_generate_bare_ms", "backend_base_rows_ms", "backend_mixed_adapters_ms"}
    assert all(p["generated"] >= 1 for k, p in phases.items() if k.startswith("generate"))
    assert phases["update"]["rows"] == 16  # 8 adapters (4 teachers + 4 students), propose and solve rows each
    cfg = config_io.load(TrainConfig, str(ROOT / "configs" / "paper-4t4s.yaml"), [])
    want = make_plan(cfg)
    assert r["plan"]["vllm"]["memory_gb"] == want["memory_gb"]["total"]
    assert r["plan"]["vllm"]["step_time_s"] == want["step_time_s"]
    assert r["plan"]["torch"]["generate_s"] > r["plan"]["vllm"]["generate_s"]

