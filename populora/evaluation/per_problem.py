"""Per-problem scores, read from the samples files a results.json names (``summary.Results.tables``): the tables
that the report's weakest / best (``selection.py``) and a sweep's paired tests (``sweep_report.py``) are computed on."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np


def sample_correct(sample: dict) -> float:
    """One generation's verdict, whichever suite wrote it (EvalPlus: plus = base and extra tests pass)."""
    if "plus_status" in sample:
        return float(sample.get("base_status") == "pass" and sample["plus_status"] == "pass")
    return float(bool(sample.get("passed", sample.get("correct", False))))


def problem_scores(samples_file: str | Path) -> dict[str, float]:
    """{problem id: mean verdict over its samples} (pass@1 per problem)."""
    per: dict[str, list[float]] = {}
    for line in Path(samples_file).read_text().splitlines():
        if line.strip():
            s = json.loads(line)
            per.setdefault(str(s["task_id"]), []).append(sample_correct(s))
    return {k: float(np.mean(v)) for k, v in per.items()}
