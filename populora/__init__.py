"""PopuLoRA: population-based self-play post-training of LLMs with LoRA adapters."""

from populora.platform import threads as _threads

_threads.configure()  # before anything imports torch: idle OpenMP threads sleep instead of spinning (see there)

__version__ = "0.1.0"
# The distribution this package ships in (PyPI's `populora` is another project with the same import name): the
# `populora` command checks it before anything else (populora_platform.py).
__distribution__ = "populora-platform"
