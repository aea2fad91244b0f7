"""Evaluation: score adapters on the ten benchmarks and build the member / population / baseline table.

What the UI (and other parts of PopuLoRA) may use is exported here: the benchmark registry, the report's pure
summary functions, so the Compare page shows the numbers ``populora report`` prints, and a sweep's statistics
and figures, so it shows what ``populora report --sweep`` writes. Everything else in this package is internal.
Importing this package loads no model and no evaluation harness.
"""

from populora.evaluation.benchmarks import BENCHMARKS, GROUPS
from populora.evaluation.figures import arms_race as arms_race_figure
from populora.evaluation.figures import intervals as intervals_figure
from populora.evaluation.figures import sweep_curves
from populora.evaluation.report import AVERAGES, averages, population_mean, weakest_best
from populora.evaluation.sweep_report import ReportError as SweepReportError
from populora.evaluation.sweep_report import build as sweep_statistics
from populora.evaluation.sweep_report import gather as gather_sweep

__all__ = ["AVERAGES", "BENCHMARKS", "GROUPS", "SweepReportError", "arms_race_figure", "averages", "gather_sweep",
           "intervals_figure", "population_mean", "sweep_curves", "sweep_statistics", "weakest_best"]
