"""Evaluation: score adapters on the ten benchmarks and build the member / population / baseline table.

What the UI (and other parts of PopuLoRA) may use is exported here: the benchmark registry and the report's pure
summary functions, so the Compare page shows the numbers ``populora report`` prints. Everything else in this
package is internal. Importing this package loads no model and no evaluation harness.
"""

from populora.evaluation.benchmarks import BENCHMARKS, GROUPS
from populora.evaluation.report import AVERAGES, averages, population_mean, weakest_best

__all__ = ["AVERAGES", "BENCHMARKS", "GROUPS", "averages", "population_mean", "weakest_best"]
