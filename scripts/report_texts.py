"""The report texts a first evaluation prints, through the report's own functions (issue 52's before/after):

1. one seed per arm, ``--limit 3`` on GSM8K and HumanEval+, four members and the baseline all scoring 0 (the tiny
   model solves nothing): ``verdict.build`` / ``verdict.text``, what ``populora report --run`` prints;
2. a simulated null 3-seed sweep, 4 benchmarks x 30 problems, a 0.15-logit training-seed effect shared by the
   benchmarks (``calibration_worlds.world``): ``sweep_report.build`` / ``sweep_report.text``, what ``populora
   sweep-report`` prints.

    python scripts/report_texts.py [--seed N]
"""

from __future__ import annotations

import argparse
import numpy as np

from populora.evaluation.statistics import calibration_worlds as W
from populora.evaluation.statistics import sweep_report, verdict
from populora.evaluation.summary import Results


def one_seed_limit_3() -> str:
    tables = {t: {b: {f"{b}/{i:04d}": 0.0 for i in range(3)} for b in ("humaneval_plus", "gsm8k")}
              for t in (*W.MEMBERS, "B0")}
    raw = {"results": {t: {b: {"score": 0.0} for b in by} for t, by in tables.items()},
           "targets": {**{t: {"kind": "member"} for t in W.MEMBERS}, "B0": {"kind": "baseline"}}}
    r = Results.from_dict(raw)
    r._tables = tables
    return verdict.text(verdict.build(r))


def three_seed_sweep(seed: int) -> str:
    m = W.Model("shared seed effect 0.15 logit", spread=4.0, sigma=0.15, shared=1.0, seeds=3)
    n = {b: 30 for b in ("humaneval_plus", "mbpp_plus", "aime24", "gsm8k")}
    results, _ = W.world(np.random.default_rng(seed), m, n)
    return sweep_report.text(sweep_report.build(W.sweep_configs(results)))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seed", type=int, default=52)
    args = p.parse_args()
    print("=== one seed, --limit 3 (GSM8K, HumanEval+), 4 members + baseline, every score 0 ===")
    print(one_seed_limit_3())
    print("=== 3-seed sweep (simulated null: 4 benchmarks x 30 problems, shared seed effect 0.15 logit) ===")
    print(three_seed_sweep(args.seed))


if __name__ == "__main__":
    main()
