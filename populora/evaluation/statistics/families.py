"""The families a verdict's p-values are adjusted in: one definition for every place that prints a comparison with
the baseline (``headline.adjust`` for a run's verdict and each configuration of a sweep, ``sweep_report.build``'s
list of comparisons, and the Holm level ``power.mde`` prices a design at).

- The primary: "population mean - baseline" on the overall average, one test per configuration compared with the
  baseline, Holm-adjusted among the configurations (one configuration, or a single run: a family of one, its
  own 5%). It is pre-specified: the one number a reader asks for.
- The secondary family, per configuration: every other comparison of that configuration with the baseline:
  population mean and weakest member, on each benchmark and each average (``groups``), the primary left out
  (10 benchmarks: 15 rows x 2 - 1 = 29 tests). "Weakest member vs baseline" overall is one of them, wherever it
  is printed.
- Comparisons between configurations (``report --sweep --between``): a family of their own.

Holm (1979), not Benjamini-Hochberg: see ``headline``.
"""

from __future__ import annotations

from populora.evaluation.harness import benchmarks

DELTAS = (("mean - baseline", "population mean"), ("weakest - baseline", "weakest"))
PRIMARY = ("overall", "mean - baseline")  # the one pre-specified comparison, at its own level; every other is secondary
AVERAGES = {"code avg": "code", "math avg": "math", "overall": None}  # ours, as in report.py


def groups(problems: dict[str, list[str]]) -> dict[str, tuple[list[str], list[float] | None]]:
    """{name: (benchmarks, weights)}: each benchmark alone, then ours (code avg / math avg / overall, unweighted
    means of the benchmarks scored) and AZR's: math avg (AZR) over AIME24/25, AMC23, MATH-500, Minerva and
    OlympiadBench, and total (AZR) = (code avg + math avg (AZR)) / 2, each benchmark weighted 1 / (2 x its group's
    size) (only when both groups were scored). ``problems``: {benchmark: its problems} (a list of names is the
    same with one dummy problem each)."""
    names = [b for b in problems if problems[b]]
    out: dict[str, tuple[list[str], list[float] | None]] = {b: ([b], None) for b in names}
    for avg, group in AVERAGES.items():
        members = [b for b in names if group is None or benchmarks.BENCHMARKS[b].group == group]
        if members:
            out[avg] = (members, None)
    code = [b for b in names if benchmarks.BENCHMARKS[b].group == "code"]
    math = [b for b in names if b in benchmarks.AZR_MATH]
    if math:
        out["math avg (AZR)"] = (math, None)
    if code and math:
        out["total (AZR)"] = (code + math, [1 / (2 * len(code))] * len(code) + [1 / (2 * len(math))] * len(math))
    return out


def family_size(names: list[str]) -> int:
    """The secondary family's size for a verdict on the benchmarks ``names``: every row of ``groups`` x the two
    differences, the primary left out.

    >>> family_size(list(benchmarks.BENCHMARKS)), family_size(["gsm8k", "humaneval_plus"])
    (29, 9)
    """
    rows = groups({b: ["x"] for b in names})
    return max(len(rows) * len(DELTAS) - (1 if "overall" in rows else 0), 1)
