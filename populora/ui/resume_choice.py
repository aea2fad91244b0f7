"""The Runs page's choice of the checkpoint a Resume continues from: the newest intact one (the default, as
``populora train --resume RUN``: verified against its manifest, a damaged newer one skipped and said so in the
job's log), or one named step (``--resume RUN --step N``), for a run whose newest checkpoint is suspect."""

from __future__ import annotations

import streamlit as st

from populora.platform.store import runlayout as rl

NEWEST = "newest intact checkpoint"


def checkpoint_step(run_id: str, tags: dict) -> int | None:
    """The step the user chose, None for the newest intact one (also where the run keeps one checkpoint or none:
    nothing to choose)."""
    steps = rl.checkpoint_steps(rl.run_dir_of(tags))
    if len(steps) < 2:
        return None
    labels = {None: NEWEST} | {s: f"step {s}" for s in reversed(steps)}
    return st.selectbox("Resume from", list(labels), format_func=labels.get, key=f"resume_step_{run_id}",
                        help="Each checkpoint is verified (file sizes and CRC-32) before it is trusted; a named step "
                             "that fails the check is refused, the newest intact one is taken otherwise")
