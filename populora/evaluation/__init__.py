"""Evaluation: score adapters on the ten benchmarks and build the member / population / baseline table.

What the UI (and other parts of PopuLoRA) may use is exported here: the benchmark registry, the typed results
and the one population summary (``summary.py``: ``Results``, ``population_summary``) with the report's pick and
its label (``report_summary``, ``report_pick_label``), so the Compare page shows the numbers ``populora report`` prints, and a sweep's statistics
and figures, so it shows what ``populora report --sweep`` writes; the evaluation config (the UI launches ``populora eval``
on it as a job; its one entry point is ``populora.evaluation.evaluate.evaluate``) and ``eval_progress``, which
reads a running evaluation's pairs, with ``eval_size`` / ``eval_pace`` for its estimate before launching and ``planned_mde``
for the smallest difference a sweep of so many seeds detects; the verdict of a
population against its baseline (``build_verdict``, in one sentence ``verdict_sentence``, with ``with_baseline`` and ``compute_side_by_side``). Everything else
in this package is internal.
Importing this package loads no model and no evaluation harness.
"""

from populora.evaluation.harness.benchmarks import BENCHMARKS, GROUPS
from populora.evaluation.config import EvalConfig
from populora.evaluation.estimate import pace as eval_pace
from populora.evaluation.estimate import size as eval_size
from populora.evaluation.evaluate import progress as eval_progress
from populora.evaluation.figures import arms_race as arms_race_figure
from populora.evaluation.figures import intervals as intervals_figure
from populora.evaluation.figures import sweep_curves
from populora.evaluation.statistics.power import planned as planned_mde
from populora.evaluation.statistics.power import sampling_gain
from populora.evaluation.results import metric_keys as eval_metric_keys
from populora.evaluation.report import AVERAGES, averages, printed_averages
from populora.evaluation.report import pick_label as report_pick_label
from populora.evaluation.report import summary_of as report_summary
from populora.evaluation.statistics.sweep_report import ReportError as SweepReportError
from populora.evaluation.statistics.sweep_report import build as sweep_statistics
from populora.evaluation.statistics.sweep_report import column_heads as sweep_column_heads
from populora.evaluation.statistics.sweep_report import printed_arms as sweep_printed_arms
from populora.evaluation.statistics.sweep_report import score_cell as sweep_score_cell
from populora.evaluation.summary import Results, Summary, population_summary
from populora.evaluation.statistics.sweep_report import gather as gather_sweep
from populora.evaluation.targets import BASE, BASELINE, MEMBER, checkpoint_steps
from populora.evaluation.statistics.verdict import COLUMNS as VERDICT_COLUMNS
from populora.evaluation.statistics.verdict import build as build_verdict
from populora.evaluation.statistics.verdict import cells as verdict_cells
from populora.evaluation.statistics.verdict import compute_side_by_side, with_baseline
from populora.evaluation.statistics.headline import plain as verdict_sentence
from populora.evaluation.compute import figure as compute_figure
from populora.evaluation.compute import kl_forward_of, matched_note

__all__ = ["AVERAGES", "BASE", "BASELINE", "BENCHMARKS", "MEMBER", "EvalConfig", "GROUPS", "Results", "Summary", "SweepReportError",
           "arms_race_figure", "averages", "build_verdict", "checkpoint_steps", "compute_figure", "compute_side_by_side",
           "eval_metric_keys", "eval_pace", "eval_progress", "eval_size", "gather_sweep", "intervals_figure", "kl_forward_of", "matched_note", "planned_mde", "sampling_gain",
           "population_summary", "printed_averages", "report_pick_label", "report_summary", "sweep_column_heads", "sweep_curves", "sweep_printed_arms", "sweep_score_cell", "sweep_statistics",
           "VERDICT_COLUMNS", "verdict_cells", "verdict_sentence", "with_baseline"]
