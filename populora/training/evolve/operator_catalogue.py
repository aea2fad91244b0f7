"""The evolution operators by name: kind, default strength and what the strength is (docs/evolution.md says why
these values). Torch-free, so the training config validates ``evolution.operators`` without loading torch; the
functions themselves are in ``operators.py``, which builds its ``MUTATIONS`` / ``CROSSOVERS`` / ``FAMILY`` from
these entries. Numbering as in the unofficial port's table (M1-M5, X1-X5)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Entry:
    name: str
    kind: str             # mutation | crossover
    strength: float       # the default strength
    knob: str             # what the strength is, in words


MUTATIONS: dict[str, Entry] = {e.name: e for e in (
    Entry("gaussian", "mutation", 0.05, "noise std / each tensor's RMS (M4)"),
    Entry("svd_noise", "mutation", 0.06, "log-normal std of singular values and rotation angle (M1)"),
    Entry("layer_gaussian", "mutation", 0.10, "noise std / RMS on half the modules (M2)"),
    Entry("mask", "mutation", 0.0625, "fraction rho of singular components zeroed (M3)"),
    Entry("neftune", "mutation", 0.09, "uniform noise std / RMS on A only (M5)"),
    Entry("clone", "mutation", 0.0, "none: a copy"),
)}
CROSSOVERS: dict[str, Entry] = {e.name: e for e in (
    Entry("svd_fit", "crossover", 0.0, "none: weights from fitness"),
    Entry("component_swap", "crossover", 0.0, "none: weights from fitness"),
    Entry("dare", "crossover", 0.1, "drop probability p (X1)"),
    Entry("layerwise", "crossover", 0.0, "none: weights from fitness (X2)"),
    Entry("subspace_split", "crossover", 0.0, "none: k = round(w * r) (X3)"),
    Entry("extrapolate", "crossover", 0.5, "eta in [1, 1 + strength] (X4)"),
    Entry("xes", "crossover", 0.0, "none: softmax of z-scored fitnesses (X5)"),
)}
FAMILY: dict[str, Entry] = MUTATIONS | CROSSOVERS
