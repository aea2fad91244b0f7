"""Evolution operators in LoRA weight space: the paper's "family of LoRA weight-space evolution operators (mutations
and crossovers that produce same-rank population members in seconds)". Pure functions: adapter state dicts in, a
child state dict out, every random draw from one CPU ``torch.Generator`` (so the same child on any device).

A state dict maps ``<module>.lora_A.weight`` (r, in) and ``<module>.lora_B.weight`` (out, r) to tensors; the
module's weight delta is B @ A (times alpha / r, the same for parents and child, so ignored here). Children
always keep the parents' rank r. Every operator is registered by name (``MUTATIONS``, ``CROSSOVERS``) with one
strength knob and its default, both listed in ``operator_catalogue.py`` (torch-free, so the training config reads
them without torch; docs/evolution.md says why these values):

- a mutation is ``fn(state, strength, generator)``; strength 0 gives the parent back (its delta B @ A);
- a crossover is ``fn(states, weights, strength, generator)``: ``states[0]`` is the fitter parent, ``weights``
  the parents' shares (summing to 1); crossing a member with itself gives it back where the operator allows.

Numbering as in the unofficial port's table (M1-M5, X1-X5); the SVD fit and the component swap were ours first.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch

from populora.training.evolve import operator_catalogue as catalogue

State = dict[str, torch.Tensor]


@dataclass(frozen=True)
class Operator:
    name: str
    kind: str             # mutation | crossover
    fn: Callable
    strength: float       # the default strength
    knob: str             # what the strength is, in words


def lora_pairs(state: State) -> dict[str, tuple[str, str]]:
    """Module prefix -> (A key, B key)."""
    pairs = {}
    for key in state:
        if ".lora_A." in key:
            prefix = key.split(".lora_A.")[0]
            b_key = key.replace(".lora_A.", ".lora_B.")
            if b_key not in state:
                raise ValueError(f"LoRA state has {key} but no {b_key}")
            pairs[prefix] = (key, b_key)
    return pairs


def delta(state: State, prefix: str) -> torch.Tensor:
    """B @ A of one module (without the alpha / r scale)."""
    ka, kb = lora_pairs(state)[prefix]
    return state[kb].float() @ state[ka].float()


def _noise(shape, generator: torch.Generator, like: torch.Tensor, uniform: bool = False) -> torch.Tensor:
    """Unit-variance noise drawn on the CPU generator, then moved: the same child on any device, no CPU/CUDA mix.
    ``uniform``: U(-sqrt3, sqrt3) from 16-bit draws, four per int64 the generator makes (~4x cheaper than
    torch.rand; the values are on a grid of 2^-16 of the range, far finer than any use here needs)."""
    if not uniform:
        return torch.randn(shape, generator=generator).to(like.device)
    n = math.prod(shape)
    words = torch.randint(-2**63, 2**63 - 1, (-(-n // 4),), generator=generator, dtype=torch.int64)
    u = (words.view(torch.int16)[:n].float() + 0.5) / 32768.0                  # uniform in (-1, 1)
    return (u * math.sqrt(3.0)).reshape(shape).to(like.device)


def _rms(t: torch.Tensor) -> torch.Tensor:
    return t.float().pow(2).mean().sqrt()


# ====================================================================== singular components of one module
def components(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(U (out, r), S (r,), Vh (r, in)) with B @ A = U diag(S) Vh, S descending, without forming B @ A: QR of both
    thin factors and the SVD of an r x r core, O((in + out) r^2)."""
    return _fit([b.float()], [a.float()], [1.0], a.shape[0])


def _fit(bs: list[torch.Tensor], as_: list[torch.Tensor], weights: list[float], r: int):
    """Top-r singular components of sum_i w_i B_i @ A_i (rank <= n r), via the thin factors L = [w_i B_i] (out, n r)
    and R = [A_i] (n r, in): an orthonormal basis of each from its n r x n r Gram matrix (``_basis``), then the
    SVD of the small core. The Gram route is ~15x faster than a Householder QR of a tall matrix on a CPU (BLAS-3
    instead of BLAS-2). Fewer than r components (tiny modules) are padded with zeros."""
    left = torch.cat([w * bb for w, bb in zip(weights, bs)], dim=1)      # (out, n r)
    right = torch.cat(as_, dim=0)                                        # (n r, in)
    w_left, c_left = _basis(left.T @ left)                               # left = (left @ w_left) @ c_left
    w_right, c_right = _basis(right @ right.T)                           # right^T likewise
    u, s, vh = torch.linalg.svd(c_left @ c_right.T)                      # (n r)^2 core, float64
    k = min(r, s.shape[0])
    u_top = left @ (w_left @ u[:, :k]).to(left.dtype)                    # (out, k)
    vh_top = (vh[:k] @ w_right.T).to(right.dtype) @ right                # (k, in)
    s_top = s[:k].to(left.dtype)
    if k < r:  # pad with zero components so the child keeps rank r's shapes
        u_top = torch.cat([u_top, torch.zeros(u_top.shape[0], r - k, device=u_top.device)], dim=1)
        s_top = torch.cat([s_top, torch.zeros(r - k, device=s_top.device)])
        vh_top = torch.cat([vh_top, torch.zeros(r - k, vh_top.shape[1], device=vh_top.device)], dim=0)
    return u_top, s_top, vh_top


def _basis(gram: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(W, C), both (k, k) float64, from the Gram matrix x^T x of a thin x (n, k): x @ W is orthonormal on x's
    range and x = (x @ W) @ C. The Gram is float32 (its rounding is ~1e-7 of its largest eigenvalue), so
    directions below 1e-6 of it (a factor's singular values under 1e-3 of its largest: a zero B, a repeated
    parent) get W = 0; what they carry is under 1e-3 of the factor, far below any operator's own change."""
    lam, v = torch.linalg.eigh(gram.double())                            # ascending
    root = lam.clamp(min=0).sqrt()
    keep = lam > lam.max().clamp(min=1e-300) * 1e-6
    inv = torch.where(keep, 1.0 / root.clamp(min=1e-300), torch.zeros_like(root))
    return v * inv[None, :], root[:, None] * v.T


def _factors(u, s, vh, like_a: torch.Tensor, like_b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(A, B) of U diag(S) Vh, the singular values split evenly (sqrt on each side), in the parents' dtypes."""
    root = s.clamp(min=0).sqrt()
    return (root[:, None] * vh).to(like_a.dtype), (u * root).to(like_b.dtype)


def _per_module(states: list[State], make) -> State:
    """Apply ``make(prefix, [(A, B) of each parent]) -> (A, B)`` to every module."""
    child = {}
    for prefix, (ka, kb) in lora_pairs(states[0]).items():
        child[ka], child[kb] = make(prefix, [(s[ka], s[kb]) for s in states])
    return child


def _fit_module(pairs, weights, r):
    u, s, vh = _fit([b.float() for _, b in pairs], [a.float() for a, _ in pairs], weights, r)
    return _factors(u, s, vh, pairs[0][0], pairs[0][1])


# ====================================================================== mutations
def mutate(state: State, scale: float, generator: torch.Generator) -> State:
    """M4 full Gaussian: noise on every tensor, std = ``scale`` * the tensor's RMS (each moves by the same relative
    amount whatever its size). A tensor that is all zero (a fresh B) stays zero."""
    return {k: (t.float() + scale * _rms(t) * _noise(t.shape, generator, t)).to(t.dtype) for k, t in state.items()}


def mutate_layers(state: State, scale: float, generator: torch.Generator, fraction: float = 0.5) -> State:
    """M2 layer-selective Gaussian: ``mutate``'s noise on ``fraction`` of the modules (drawn at random, at least
    one), the others unchanged."""
    pairs = list(lora_pairs(state).items())
    n = max(1, round(fraction * len(pairs)))
    chosen = {pairs[i][0] for i in torch.randperm(len(pairs), generator=generator)[:n].tolist()}
    child = dict(state)
    for prefix in chosen:
        ka, kb = dict(pairs)[prefix]
        child.update(mutate({ka: state[ka], kb: state[kb]}, scale, generator))
    return child


def mutate_svd(state: State, scale: float, generator: torch.Generator) -> State:
    """M1 SVD-structured: per module, log-normal noise on the singular values of B @ A (S * exp(scale * N)) and a
    small rotation of its singular vectors (U + scale * N / sqrt(out), re-orthonormalised; the same for V)."""
    def make(prefix, pairs):
        (a, b), = pairs
        u, s, vh = components(a, b)
        s = s * torch.exp(scale * _noise(s.shape, generator, s))
        u, v = _rotate(u, scale, generator), _rotate(vh.T, scale, generator)
        return _factors(u, s, v.T, a, b)
    return _per_module([state], make)


def _rotate(q: torch.Tensor, scale: float, generator: torch.Generator) -> torch.Tensor:
    """Orthonormal columns q (n, r) turned by a small random rotation: each column moves by ~``scale`` (radians)
    in a random direction (unit-variance uniform noise: as isotropic in effect as Gaussian at these sizes, cheaper),
    then the nearest orthonormal columns (polar factor, from the r x r Gram matrix: no tall QR), so scale 0
    returns q itself."""
    if scale == 0:
        return q
    moved = q + scale * _noise(q.shape, generator, q, uniform=True) / math.sqrt(q.shape[0])
    lam, v = torch.linalg.eigh((moved.T @ moved).double())
    inv_sqrt = (v * lam.clamp(min=1e-12).rsqrt()[None, :]) @ v.T                  # (M^T M)^(-1/2)
    return moved @ inv_sqrt.to(moved.dtype)


def mask_components(state: State, rho: float, generator: torch.Generator) -> State:
    """M3 component masking: per module, zero round(rho * r) of the r singular components of B @ A (at least one
    when rho > 0), drawn at random; the rest are kept exactly."""
    def make(prefix, pairs):
        (a, b), = pairs
        r = a.shape[0]
        n = 0 if rho <= 0 else min(r, max(1, round(rho * r)))
        u, s, vh = components(a, b)
        drop = torch.randperm(r, generator=generator)[:n].to(s.device)
        return _factors(u, s.index_fill(0, drop, 0.0), vh, a, b)
    return _per_module([state], make)


def mutate_down(state: State, scale: float, generator: torch.Generator) -> State:
    """M5 NEFTune-style: uniform noise (unit variance, times ``scale`` * the tensor's RMS) on the down factor A
    only, as NEFTune perturbs the input side; B, the up factor, is unchanged."""
    return {k: (t.float() + scale * _rms(t) * _noise(t.shape, generator, t, uniform=True)).to(t.dtype)
            if ".lora_A." in k else t for k, t in state.items()}


def clone(state: State, strength: float = 0.0, generator: torch.Generator | None = None) -> State:
    """A copy of the parent: PBT's exploit without explore, the control the other operators are measured against."""
    return {k: t.clone() for k, t in state.items()}


# ====================================================================== crossovers
def crossover_svd(a: State, b: State, weight: float = 0.5) -> State:
    """Best rank-r approximation (Eckart-Young) of the weighted delta w*Ba@Aa + (1-w)*Bb@Ab, per module.

    The sum has rank <= 2r and is factored as [w*Ba, (1-w)*Bb] @ [Aa; Ab], so we QR both thin factors and take
    the SVD of a 2r x 2r core: O((in + out) r^2) instead of an SVD of the full (out, in) matrix. The child's
    delta splits its singular values evenly between B and A. Crossing a member with itself reproduces its delta.
    """
    return _per_module([a, b], lambda p, pairs: _fit_module(pairs, [weight, 1 - weight], pairs[0][0].shape[0]))


def crossover_swap(a: State, b: State, generator: torch.Generator, weight: float = 0.5) -> State:
    """Rank-component swap: each of the r components (row i of A with column i of B) of every module comes
    whole from one parent, from ``a`` with probability ``weight``. Crossing a member with itself returns it unchanged.
    """
    def make(prefix, pairs):
        (aa, ab), (ba, bb) = pairs
        take_b = (torch.rand(aa.shape[0], generator=generator) < 1.0 - weight).to(aa.device)  # (r,)
        return torch.where(take_b[:, None], ba, aa), torch.where(take_b[None, :], bb, ab)
    return _per_module([a, b], make)


def crossover_layers(a: State, b: State, generator: torch.Generator, weight: float = 0.5) -> State:
    """X2 layer-wise: every module (its A and B together) comes whole from one parent, from ``a`` with
    probability ``weight``. Crossing a member with itself returns it unchanged."""
    def make(prefix, pairs):
        return pairs[0] if float(torch.rand(1, generator=generator)) < weight else pairs[1]
    return _per_module([a, b], make)


def crossover_split(a: State, b: State, k: int) -> State:
    """X3 SVD-subspace split: per module, singular components 1..k of ``a``'s delta and components k+1..r of
    ``b``'s, so the child's delta is their sum (rank r). Crossing a member with itself returns its delta."""
    def make(prefix, pairs):
        (aa, ab), (ba, bb) = pairs
        ua, sa, vha = components(aa, ab)
        ub, sb, vhb = components(ba, bb)
        u = torch.cat([ua[:, :k], ub[:, k:]], dim=1)
        return _factors(u, torch.cat([sa[:k], sb[k:]]), torch.cat([vha[:k], vhb[k:]]), aa, ab)
    return _per_module([a, b], make)


def dare_drop(state: State, p: float, generator: torch.Generator) -> State:
    """DARE's drop-and-rescale on the factors: each entry of A and of B is zeroed with probability ``p`` and the
    survivors scaled by 1 / (1 - p). The masks are independent, so E[B' A'] = B A: the delta is kept on average."""
    if p <= 0:
        return state
    return {k: torch.where(_keep_mask(t.shape, p, generator).to(t.device), t * (1.0 / (1 - p)), 0.0).to(t.dtype)
            for k, t in state.items()}


def _keep_mask(shape, p: float, generator: torch.Generator) -> torch.Tensor:
    """Bernoulli(1 - p) keep mask, p rounded to a multiple of 1/65536: four 16-bit draws per int64 from the
    generator, 4x fewer draws than torch.rand (half DARE's time at 7B shapes), compared in place as int16."""
    n = math.prod(shape)
    words = torch.randint(-2**63, 2**63 - 1, (-(-n // 4),), generator=generator, dtype=torch.int64)
    return (words.view(torch.int16)[:n] >= round(p * 65536) - 32768).reshape(shape)


# ---------------------------------------------------------------- the registry's common signatures
def _m_gaussian(state, strength, generator):
    return mutate(state, strength, generator)


def _x_svd(states, weights, strength, generator):
    return crossover_svd(states[0], states[1], weights[0])


def _x_swap(states, weights, strength, generator):
    return crossover_swap(states[0], states[1], generator, weights[0])


def _x_layers(states, weights, strength, generator):
    return crossover_layers(states[0], states[1], generator, weights[0])


def _x_split(states, weights, strength, generator):
    """k = the fitter parent's share of the r components (at least 1, at most r - 1)."""
    r = _rank(states[0])
    return crossover_split(states[0], states[1], min(r - 1, max(1, round(weights[0] * r))) if r > 1 else r)


def _x_dare(states, weights, strength, generator):
    """X1 DARE: drop-and-rescale each parent's factors (``dare_drop``, p = strength), then the weighted SVD merge."""
    dropped = [dare_drop(s, strength, generator) for s in states[:2]]
    return crossover_svd(dropped[0], dropped[1], weights[0])


def _x_extrapolate(states, weights, strength, generator):
    """X4 extrapolative: past the fitter parent a, away from b: eta * a + (1 - eta) * b with eta uniform in
    [1, 1 + strength] ([1, 1.5] at the default), fitted to rank r. eta = 1 gives a back."""
    eta = 1.0 + strength * float(torch.rand(1, generator=generator))
    return crossover_svd(states[0], states[1], eta)


def _x_xes(states, weights, strength, generator):
    """X5 fitness-weighted (XES): the rank-r fit of sum_i w_i B_i A_i over several parents, ``weights`` from their
    z-scored fitnesses (``fitness_shares``)."""
    r = _rank(states[0])
    return _per_module(states, lambda p, pairs: _fit_module(pairs, list(weights), r))


def _rank(state: State) -> int:
    ka, _ = next(iter(lora_pairs(state).values()))
    return state[ka].shape[0]


def fitness_shares(fitness: list[float], temperature: float = 1.0) -> list[float]:
    """XES's parent weights: softmax of the z-scored fitnesses (equal when all are equal).

    >>> [round(w, 3) for w in fitness_shares([30.0, 20.0])]
    [0.881, 0.119]
    >>> fitness_shares([5.0, 5.0, 5.0])
    [0.3333333333333333, 0.3333333333333333, 0.3333333333333333]
    """
    f = torch.tensor(fitness, dtype=torch.float64)
    std = f.std(unbiased=False)
    z = (f - f.mean()) / std if std > 0 else torch.zeros_like(f)
    return torch.softmax(z / temperature, 0).tolist()


# each operator's function, by its name in the catalogue (operator_catalogue.py: kind, default strength, knob)
FUNCTIONS: dict[str, Callable] = {
    "gaussian": _m_gaussian, "svd_noise": mutate_svd, "layer_gaussian": mutate_layers, "mask": mask_components,
    "neftune": mutate_down, "clone": clone,
    "svd_fit": _x_svd, "component_swap": _x_swap, "dare": _x_dare, "layerwise": _x_layers, "subspace_split": _x_split,
    "extrapolate": _x_extrapolate, "xes": _x_xes,
}
MUTATIONS: dict[str, Operator] = {n: Operator(n, c.kind, FUNCTIONS[n], c.strength, c.knob) for n, c in catalogue.MUTATIONS.items()}
CROSSOVERS: dict[str, Operator] = {n: Operator(n, c.kind, FUNCTIONS[n], c.strength, c.knob) for n, c in catalogue.CROSSOVERS.items()}
FAMILY: dict[str, Operator] = MUTATIONS | CROSSOVERS


def apply(name: str, states: list[State], weights: list[float] | None, generator: torch.Generator,
          strength: float | None = None) -> State:
    """Run the operator ``name`` at ``strength`` (None: its default) on the parents ``states``."""
    op = FAMILY[name]
    s = op.strength if strength is None else strength
    if op.kind == "mutation":
        return op.fn(states[0], s, generator)
    return op.fn(states, weights or [1.0 / len(states)] * len(states), s, generator)
