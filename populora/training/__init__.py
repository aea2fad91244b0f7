"""Training: the population self-play loop.

What other parts of PopuLoRA (the UI, evaluation, the CLI) may use is exported here; everything else in this
package is internal and may change. Importing this package does not import torch.
"""

from populora.training.compute.baseline import matched_baseline, too_small
from populora.training.compute.budget import stop_words as baseline_stop_words
from populora.training.config import TrainConfig, job_slots, load_config, presets, presets_dir
from populora.training.measures.curriculum_tracker import EQUAL_M, RECENT
from populora.training.league_plan import PROGRESS_FILE as LEAGUE_PROGRESS_FILE
from populora.training.measures.monitors import MEANINGS as MONITOR_MEANINGS
from populora.training.measures.paper_figures import FiguresError, figure_set
from populora.training.run.fork import checkpoint_config, checkpoint_population, fork_config, fork_name, resize_preview, role_sizes
from populora.training.run.preflight import problems as preflight_problems
from populora.training.run.sweep import plan as plan_sweep
from populora.training.run.sweep import sweep_id
from populora.training.tasks import proposal_prefill
from populora.training.compute.workload import make_plan
from populora.training.compute.workload import render as render_plan

__all__ = ["EQUAL_M", "baseline_stop_words", "LEAGUE_PROGRESS_FILE", "MONITOR_MEANINGS", "RECENT", "FiguresError", "TrainConfig", "checkpoint_config",
           "checkpoint_population", "figure_set", "fork_config", "fork_name", "job_slots", "load_config", "make_plan", "matched_baseline",
           "plan_sweep", "preflight_problems", "presets", "presets_dir", "proposal_prefill", "render_plan", "resize_preview",
           "role_sizes", "sweep_id", "too_small"]
