"""An evaluation reports progress as its generations finish, not only as (target, benchmark) pairs end: batched,
every target of a benchmark finishes at once, so pairs alone read "0/5" until the end (issue 31). The oracle
backend answers from the references; one item per generation batch, so each batch is one step of progress."""

from __future__ import annotations

import json

import pytest

from oracle_backend import OracleBackend
from populora.evaluation.harness import benchmarks as B
from populora.evaluation import eval_pace, eval_progress
from populora.evaluation.harness import protocol as P
from populora.evaluation.evaluate import Plan, write_progress
from populora.evaluation.harness.generation import GenConfig
from populora.evaluation.harness.runner import ITEMS_DIR, Runner
from populora.evaluation.targets import MEMBER, Target

ROOT = B.data_dir()
pytestmark = pytest.mark.skipif(not (ROOT / B.CHECKSUMS).is_file(), reason=f"no benchmark data at {ROOT}")
LIMIT = 4


class Watching(OracleBackend):
    """Before each generation: what the UI would read now (every pair's stored file and items file)."""

    def __init__(self, out, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.out, self.seen = out, []

    def generate(self, prompts, adapters, *args, **kwargs):
        self.seen.append(eval_progress(self.out))
        return super().generate(prompts, adapters, *args, **kwargs)


def test_a_batched_evaluation_shows_generations_done_before_any_pair_finishes(tmp_path):
    out = tmp_path / "out"
    targets = []
    for mode in ("reference", "wrong"):
        (tmp_path / "adapters" / mode).mkdir(parents=True)
        targets.append(Target(mode, MEMBER, str(tmp_path / "adapters" / mode)))
    write_progress(Plan(targets, ["gsm8k"], ROOT, out, model=None))
    backend = Watching(out, ROOT, ["gsm8k"])
    runner = Runner(lambda: backend, ROOT, out, GenConfig(batch_size=1), LIMIT, {"base": "oracle"}, log=lambda m: None,
                    batched=True, protocol=P.resolve("quick", None, max_new_tokens=64), progress=False)
    runner.run(targets, ["gsm8k"])
    # mid-run: no pair stored yet, yet generations done show for a target (the UI's "2/4" cell and its ETA)
    mid = [rows for rows in backend.seen if not any(r["done"] for r in rows)
           and any(r["items"] and r["items"] < r["items_total"] for r in rows)]
    assert mid, backend.seen
    assert all(r["items_total"] == LIMIT for r in mid[-1] if r["items_total"])
    final = eval_progress(out)
    assert [(r["target"], r["done"], r["items"], r["items_total"]) for r in final] == \
        [("reference", True, LIMIT, LIMIT), ("wrong", True, LIMIT, LIMIT)]
    assert final[0]["score"] == 1.0 and final[1]["score"] == 0.0  # the oracle's known answers
    stored = json.loads((out / ITEMS_DIR / "reference" / "gsm8k.json").read_text())
    assert stored["updated"] >= stored["started"]
    assert eval_pace(final) is None or eval_pace(final) > 0
