"""scripts/gpu-smoke.sh, the GPU acceptance test, on a machine without a GPU: its --help lists checks (a)-(e), and
without CUDA a check fails (one JSON line, non-zero exit) instead of passing on the CPU or the meta device."""

import json
import os
import subprocess
import sys

import pytest
import torch

from conftest import ROOT

SCRIPT = ROOT / "scripts" / "gpu-smoke.sh"


def test_help_lists_checks_a_to_f():
    out = subprocess.run([str(SCRIPT), "--help"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    for check, words in (("(a)", "distinct"), ("(b)", "log-prob"), ("(c)", "paper-4t4s"), ("(d)", "Ray"),
                         ("(e)", "device tests"), ("(f)", "data-parallel")):
        line = next((l for l in out.stdout.splitlines() if l.strip().startswith(check)), "")
        assert words in line, (check, out.stdout)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is visible: the no-GPU failure cannot be shown")
def test_without_a_gpu_a_check_fails_with_one_json_line(tmp_path):
    env = {**os.environ, "PYTHON": sys.executable, "SMOKE_DIR": str(tmp_path)}
    out = subprocess.run([str(SCRIPT), "--checks", "e"], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 1, out.stdout + out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["passed"] is False and set(result["checks"]) == {"e"}
    assert "no CUDA GPU" in result["checks"]["e"]["reason"]
