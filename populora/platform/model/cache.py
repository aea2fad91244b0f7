"""Where populora keeps what it builds once and reuses: ``$POPULORA_CACHE_DIR``, else ``~/.cache/populora``
(de-quantised GGUF models, the tiny Qwen2 model, fetched benchmark data, the empty MLflow store)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    return Path(os.environ.get("POPULORA_CACHE_DIR") or Path.home() / ".cache" / "populora")
