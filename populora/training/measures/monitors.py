"""Monitors that warn a researcher, each a pure function of a run's per-step series returning a ``Flag``:

- **collapse**: the student solve rate climbs to ~1 while the programs get simpler and the equal-volume
  diversity of what teachers write now falls (the paper's single agent drifting to easy, narrow tasks);
- **degenerate teaching**: teachers game the reward instead of teaching: almost every task invalid, constant
  outputs (f ignores its input), padding (dead code inflating size and complexity), the same task re-proposed;
- **population convergence**: the members become alike: teachers write the same structures (task overlap) or
  the adapters' weight-space distance collapses;
- **no learning signal**: most TRR++ groups are flat (all rewards equal, advantage 0) step after step, so the
  update has next to nothing to learn from (``learn/no_signal_share``, training/measures/learning.py);
- **generator out of sync**: the generator's log-probs of the tokens it sampled disagree with the trainer's past
  what numerics explain (``learn/mismatch_k3``, platform/backends/rollout_correction.py): a stale adapter, another
  temperature, another model; the rollouts are then off-policy.

Each compares the first and the last third of the steps so far (the window, at least ``MIN_STEPS`` steps), with
thresholds named below. ``adapter_distance`` and ``task_overlap`` compute the convergence series.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

MIN_STEPS = 6                 # fewer steps: nothing judged
COLLAPSE_SOLVE = 0.9          # the last third's mean solve rate at or above this ...
COLLAPSE_SOLVE_RISE = 0.1     # ... having risen at least this much from the first third
COLLAPSE_COMPLEXITY_DROP = 0.05   # complexity's relative fall (mean over the metrics given)
COLLAPSE_DIVERSITY_DROP = 0.10    # equal-volume diversity's relative fall
DEGENERATE = {                # the last third's mean at or above this fires degenerate teaching
    "invalid_rate": 0.9, "constant_output_rate": 0.5, "dead_code": 0.25, "reproposed_rate": 0.5}
CONVERGED_OVERLAP = 0.7       # teachers' structure sets this alike (Jaccard) in the last third
CONVERGED_DISTANCE = 0.25     # adapter distance fallen to this share of its first measured value
NO_SIGNAL_SHARE = 0.5         # more than this share of the groups flat ...
NO_SIGNAL_STEPS = 3           # ... at each of this many last steps fires "no learning signal"
# "generator out of sync": the mean k3 of the last OUT_OF_SYNC_STEPS measured steps above OUT_OF_SYNC_K3. Measured
# on vLLM's CPU engine against the fp32 trainer (scripts/mismatch_figures.py, SmolLM2-135M, 703 sampled tokens):
# fp32 engine k3 ~0 (max |diff| 5e-5); bf16 engine 2.8e-3 (max |diff| 0.29); samples at T=0.7 scored at 1: 0.44.
# slime's dense models in bf16 show 1e-5 to 1e-3. 0.02 is 7x the bf16 engine's, 20x below the temperature bug.
OUT_OF_SYNC_K3 = 0.02
OUT_OF_SYNC_STEPS = 2

MEANINGS = {
    "collapse": "Students solve almost everything while teachers' programs get simpler and less varied "
                "(diversity at equal volume): the curriculum has collapsed to easy, narrow tasks.",
    "degenerate": "Teachers earn their reward without teaching: invalid tasks on purpose, constant outputs, dead "
                  "code or padding that inflates complexity, or the same task proposed again and again.",
    "convergence": "The population's members have become alike (teachers write the same structures, or the "
                   "adapters' weights draw together): a population no more diverse than one agent.",
    "no_signal": "No learning signal: in most advantage groups every rollout earned the same reward (all solved, "
                 "all failed, all invalid), so their advantages are 0 and the update learns nothing from them. "
                 "Tasks too easy or too hard for the students, or a reward that cannot vary.",
    "out_of_sync": "Generator out of sync: the engine that samples the rollouts gives their tokens log-probs that "
                   "differ from the trainer's by more than bf16 numerics do: a stale adapter, another temperature "
                   "or another model. The update is off-policy; find the cause, or set optim.rollout_correction.",
}


@dataclass(frozen=True)
class Flag:
    name: str
    fired: bool | None     # None: not enough steps (or series) to judge
    detail: str

    @property
    def meaning(self) -> str:
        return MEANINGS[self.name]

    def to_dict(self) -> dict:
        return {"name": self.name, "fired": self.fired, "detail": self.detail, "meaning": self.meaning}


def thirds(values: Sequence[float | None]) -> tuple[float, float] | None:
    """Mean of the first and of the last third of the values that are not None (None below 3 of them).

    >>> thirds([1, 2, 3, None, 4, 5, 6])
    (1.5, 5.5)
    """
    v = [float(x) for x in values if x is not None and not math.isnan(x)]
    if len(v) < 3:
        return None
    k = max(1, len(v) // 3)
    return sum(v[:k]) / k, sum(v[-k:]) / k


def _relative(first: float, last: float) -> float:
    return (last - first) / abs(first) if first else (0.0 if last == first else math.copysign(math.inf, last - first))


def collapse(solve: Sequence[float | None], complexity: dict[str, Sequence[float | None]],
             diversity: Sequence[float | None]) -> Flag:
    """Fires when the solve rate's last third is >= COLLAPSE_SOLVE having risen by COLLAPSE_SOLVE_RISE, the
    complexity metrics fell on average by COLLAPSE_COMPLEXITY_DROP and diversity by COLLAPSE_DIVERSITY_DROP."""
    if len(solve) < MIN_STEPS:
        return Flag("collapse", None, f"{len(solve)} steps: at least {MIN_STEPS} needed")
    s, d = thirds(solve), thirds(diversity)
    c = {k: thirds(v) for k, v in complexity.items()}
    c = {k: v for k, v in c.items() if v}
    if s is None or d is None or not c:
        missing = [name for name, x in (("solve rate", s), ("equal-volume diversity", d), ("complexity", c)) if not x]
        return Flag("collapse", None, f"not measured yet: {', '.join(missing)}")
    fall = sum(_relative(*v) for v in c.values()) / len(c)
    fired = (s[1] >= COLLAPSE_SOLVE and s[1] - s[0] >= COLLAPSE_SOLVE_RISE and fall <= -COLLAPSE_COMPLEXITY_DROP
             and _relative(*d) <= -COLLAPSE_DIVERSITY_DROP)
    detail = (f"solve rate {s[0]:.2f} -> {s[1]:.2f}; " + ", ".join(f"{k} {a:.2f} -> {b:.2f}" for k, (a, b) in c.items())
              + f"; diversity at equal volume {d[0]:.1f} -> {d[1]:.1f} (first -> last third)")
    return Flag("collapse", fired, detail)


def degenerate(series: dict[str, Sequence[float | None]]) -> Flag:
    """Fires when the last third's mean of any series named in DEGENERATE reaches its threshold."""
    lengths = [len(v) for v in series.values()]
    if not lengths or max(lengths) < MIN_STEPS:
        return Flag("degenerate", None, f"{max(lengths, default=0)} steps: at least {MIN_STEPS} needed")
    seen, hits = [], []
    for name, threshold in DEGENERATE.items():
        t = thirds(series.get(name, []))
        if t is None:
            continue
        seen.append(f"{name} {t[1]:.2f}")
        if t[1] >= threshold:
            hits.append(f"{name} {t[1]:.2f} >= {threshold}")
    if not seen:
        return Flag("degenerate", None, "nothing measured yet")
    return Flag("degenerate", bool(hits), "; ".join(hits) if hits else "last third: " + ", ".join(seen))


def convergence(task_overlap_series: Sequence[float | None], distance: Sequence[float | None]) -> Flag:
    """Fires when the teachers' task overlap's last third is >= CONVERGED_OVERLAP, or the adapter distance's last
    third fell to CONVERGED_DISTANCE of its first third."""
    o, d = thirds(task_overlap_series), thirds(distance)
    if len(task_overlap_series) < MIN_STEPS or (o is None and d is None):
        return Flag("convergence", None, "not measured yet (one teacher, or too few steps)")
    parts, fired = [], False
    if o is not None:
        parts.append(f"task overlap {o[0]:.2f} -> {o[1]:.2f}")
        fired |= o[1] >= CONVERGED_OVERLAP
    if d is not None:
        parts.append(f"adapter distance {d[0]:.3g} -> {d[1]:.3g}")
        fired |= d[0] > 0 and d[1] <= CONVERGED_DISTANCE * d[0]
    return Flag("convergence", fired, "; ".join(parts) + " (first -> last third)")


def no_signal(share: Sequence[float | None]) -> Flag:
    """Fires when the share of flat groups is above NO_SIGNAL_SHARE at each of the last NO_SIGNAL_STEPS steps
    that trained (a step without rollouts has None and is skipped)."""
    v = [float(x) for x in share if x is not None and not math.isnan(x)]
    if len(v) < NO_SIGNAL_STEPS:
        return Flag("no_signal", None, f"{len(v)} trained steps: at least {NO_SIGNAL_STEPS} needed")
    last = v[-NO_SIGNAL_STEPS:]
    fired = all(x > NO_SIGNAL_SHARE for x in last)
    return Flag("no_signal", fired, "flat groups (all rewards equal) at the last steps: "
                + ", ".join(f"{x:.0%}" for x in last) + f" (fires above {NO_SIGNAL_SHARE:.0%} at each)")


def out_of_sync(k3: Sequence[float | None]) -> Flag:
    """Fires when the mean generator-vs-trainer k3 mismatch of the last OUT_OF_SYNC_STEPS measured steps is above
    OUT_OF_SYNC_K3; None while the generator is the trainer (torch generation: nothing measured)."""
    v = [float(x) for x in k3 if x is not None and not math.isnan(x)]
    if len(v) < OUT_OF_SYNC_STEPS:
        return Flag("out_of_sync", None, "not measured yet (the generator is the trainer, or too few steps)")
    mean = sum(v[-OUT_OF_SYNC_STEPS:]) / OUT_OF_SYNC_STEPS
    return Flag("out_of_sync", mean > OUT_OF_SYNC_K3, f"k3 mismatch {mean:.2g} over the last {OUT_OF_SYNC_STEPS} "
                f"measured steps (fires above {OUT_OF_SYNC_K3:g})")


def task_overlap(structures: dict[str, set]) -> float | None:
    """Mean Jaccard similarity of the teachers' sets of program structures (None below two non-empty teachers).

    >>> round(task_overlap({"T0": {"a", "b"}, "T1": {"b", "c"}, "T2": {"a", "b"}}), 4)
    0.5556
    """
    sets = [s for s in structures.values() if s]
    if len(sets) < 2:
        return None
    pairs = list(itertools.combinations(sets, 2))
    return sum(len(a & b) / len(a | b) for a, b in pairs) / len(pairs)


def _products(state: dict[str, "torch.Tensor"]) -> dict[str, tuple["torch.Tensor", "torch.Tensor"]]:
    """{module prefix: (A (r, in), B (out, r))} of a LoRA state dict."""
    out = {}
    for key, a in state.items():
        if ".lora_A." in key:
            out[key.split(".lora_A.")[0]] = (a.double(), state[key.replace(".lora_A.", ".lora_B.")].double())
    return out


def _trace_of_product(p, q) -> float:
    """tr(P Q) as sum(P * Q^T): r x r tensors, no torch import needed."""
    return float((p * q.T).sum())


def adapter_distance(states: dict[str, dict[str, "torch.Tensor"]]) -> float | None:
    """Mean over pairs of members of ||dW_a - dW_b|| / mean(||dW_a||, ||dW_b||) (Frobenius over every module,
    dW = B A), computed with r x r products only (no d x d matrix), so it is cheap at any model size. None below
    two members or when every adapter is still zero (B starts at zero).

    >>> import torch
    >>> a = {"m.lora_A.weight": torch.eye(2), "m.lora_B.weight": torch.eye(2)}
    >>> b = {"m.lora_A.weight": torch.eye(2), "m.lora_B.weight": -torch.eye(2)}
    >>> adapter_distance({"x": a, "y": b}), adapter_distance({"x": a, "y": a})
    (2.0, 0.0)
    """
    prods = {m: _products(s) for m, s in states.items()}
    values = []
    for x, y in itertools.combinations(sorted(prods), 2):
        nx = ny = cross = 0.0
        for module, (ax, bx) in prods[x].items():
            ay, by = prods[y][module]
            nx += _trace_of_product(bx.T @ bx, ax @ ax.T)
            ny += _trace_of_product(by.T @ by, ay @ ay.T)
            cross += _trace_of_product(bx.T @ by, ay @ ax.T)
        scale = (math.sqrt(max(nx, 0)) + math.sqrt(max(ny, 0))) / 2
        if scale > 0:
            values.append(math.sqrt(max(nx + ny - 2 * cross, 0.0)) / scale)
    return sum(values) / len(values) if values else None
