"""AdamW's settings (``AdamConfig``), the one place an optimizer setting is declared: training's ``optim`` section
extends it, and every backend builds its optimizer from it (``backends/optimizer.py`` ``make_optimizer``, which
imports it from here). Torch-free, so reading a training config loads no torch."""

from __future__ import annotations

from pydantic import Field

from populora.platform.config import Section


class AdamConfig(Section):
    """AdamW's settings, shared by every adapter of a run (training's ``optim`` section extends this one)."""

    lr: float = Field(5e-5, gt=0, description="AdamW learning rate of every adapter (AZR full fine-tune: 1e-6; LoRA needs more)")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay")

    def adam(self) -> AdamConfig:
        """Just these settings (a subclass's other fields dropped): what a backend sends to its Ray workers, which
        never need training's schema to read it.

        >>> AdamConfig(lr=0.1).adam()
        AdamConfig(lr=0.1, weight_decay=0.0)
        """
        return AdamConfig(**self.model_dump(include=set(AdamConfig.model_fields)))
