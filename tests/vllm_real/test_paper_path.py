"""The paper's own path end to end at tiny scale (scripts/paper_tiny.py): configs/paper-4t4s.yaml and its baseline
by overrides only, the tiny Qwen2 model, the real vLLM CPU engine inside 2 data-parallel Ray workers, seeding, one
evolution, a checkpoint, evaluation under the azr protocol.

`make test` (`make test-vllm`, beside the main suite) runs ``--quick``: the population run to its end and its
evaluation, 2 engine starts (~70 s of CPU). `make test-paper` runs the whole path as well: kill -9 and resume with
nothing lost or duplicated, and a linked baseline (6 engine starts, ~400 s of CPU; docs/gpu.md has its phase
times). The parts the quick run leaves out are also tested in make test on the torch path: kill -9 and resume
(tests/training/test_training_loop.py), a lost data-parallel worker and its resume
(tests/platform/test_data_parallel.py), the linked baseline (tests/training/test_baseline_rule.py)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "paper_tiny.py"


def _paper_tiny(tmp_path, *flags) -> dict:
    out = subprocess.run([sys.executable, str(SCRIPT), "--dir", str(tmp_path), "--json", *flags], capture_output=True,
                         text=True, timeout=3600)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["problems"] == [] and r["left"] == []
    pop = r["population"]
    assert pop["status"] == "FINISHED" and pop["steps_logged"] == [1, 2]
    assert pop["evolutions"] == 2  # paper-4t4s replaces 0.25 of 8 members at its one evolution (step 2)
    assert r["eval_protocol"] == "azr"
    return r


# make test's 1200 s per test is too short beside the main suite for the whole path: the CI run of 2026-11-27 timed
# it out at 1200 s, where it took 649 s alone (docs/gpu.md); its subprocess has its own 3600 s
@pytest.mark.timeout(3000)
def test_paper_presets_population_to_its_end_and_its_evaluation(tmp_path):
    r = _paper_tiny(tmp_path, "--quick")
    assert r["quick"] and r["baseline"] is None and r["population"]["pair"] is not None


@pytest.mark.paper
@pytest.mark.timeout(3000)
def test_paper_presets_end_to_end_at_tiny_scale(tmp_path):
    r = _paper_tiny(tmp_path)
    pop, base = r["population"], r["baseline"]
    assert base["status"] == "FINISHED" and base["steps_logged"] == [1, 2]
    assert pop["pair"] == base["pair"] is not None
    assert pop["tags"].get("populora.kind") != base["tags"].get("populora.kind")
