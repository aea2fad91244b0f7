"""Training: the population self-play loop.

What other parts of PopuLoRA (the UI, evaluation, the CLI) may use is exported here; everything else in this
package is internal and may change. Importing this package does not import torch.
"""

from populora.training.config import TrainConfig, load_config, presets, presets_dir

__all__ = ["TrainConfig", "load_config", "presets", "presets_dir"]
