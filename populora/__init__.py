"""PopuLoRA: population-based self-play post-training of LLMs with LoRA adapters."""

__version__ = "0.1.0"
