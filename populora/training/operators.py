"""Evolution operators in LoRA weight space. Pure functions: adapter state dicts in, a child state dict out.

A state dict maps ``<module>.lora_A.weight`` (r, in) and ``<module>.lora_B.weight`` (out, r) to tensors; the
module's weight delta is B @ A (times alpha / r, the same for parents and child, so ignored here). Children
always keep the parents' rank r.
"""

from __future__ import annotations

import torch

State = dict[str, torch.Tensor]


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


def mutate(state: State, scale: float, generator: torch.Generator) -> State:
    """Add Gaussian noise to every tensor, with std = ``scale`` * the tensor's RMS (so each moves by the same
    relative amount whatever its size). A tensor that is all zero (a fresh B) stays zero.
    """
    child = {}
    for key, t in state.items():
        rms = t.float().pow(2).mean().sqrt()
        # drawn from the CPU generator, then moved: the same child on any device, and no CPU/CUDA mix
        noise = torch.randn(t.shape, generator=generator, dtype=torch.float32).to(t.device)
        child[key] = (t.float() + scale * rms * noise).to(t.dtype)
    return child


def crossover_swap(a: State, b: State, generator: torch.Generator, weight: float = 0.5) -> State:
    """Rank-component swap: each of the r components (row i of A with column i of B) of every module comes
    whole from one parent, from ``a`` with probability ``weight``. Crossing a member with itself returns it unchanged.
    """
    child = {}
    for prefix, (ka, kb) in lora_pairs(a).items():
        r = a[ka].shape[0]
        take_b = (torch.rand(r, generator=generator) < 1.0 - weight).to(a[ka].device)  # (r,), drawn on the CPU generator
        child[ka] = torch.where(take_b[:, None], b[ka], a[ka])
        child[kb] = torch.where(take_b[None, :], b[kb], a[kb])
    return child


def crossover_svd(a: State, b: State, weight: float = 0.5) -> State:
    """Best rank-r approximation (Eckart-Young) of the weighted delta w*Ba@Aa + (1-w)*Bb@Ab, per module.

    The sum has rank <= 2r and is factored as [w*Ba, (1-w)*Bb] @ [Aa; Ab], so we QR both thin factors and take
    the SVD of a 2r x 2r core: O((in + out) r^2) instead of an SVD of the full (out, in) matrix. The child's
    delta splits its singular values evenly between B and A. Crossing a member with itself reproduces its delta.
    """
    child = {}
    for prefix, (ka, kb) in lora_pairs(a).items():
        r = a[ka].shape[0]
        left = torch.cat([weight * a[kb].float(), (1 - weight) * b[kb].float()], dim=1)  # (out, 2r)
        right = torch.cat([a[ka].float(), b[ka].float()], dim=0)                      # (2r, in)
        q_left, r_left = torch.linalg.qr(left)                                       # (out, 2r), (2r, 2r)
        q_right, r_right = torch.linalg.qr(right.T)                                  # (in, 2r), (2r, 2r)
        u, s, vh = torch.linalg.svd(r_left @ r_right.T)                               # 2r x 2r core
        root = s[:r].sqrt()
        child[kb] = (q_left @ u[:, :r] * root).to(a[kb].dtype)                        # (out, r)
        child[ka] = (root[:, None] * (vh[:r] @ q_right.T)).to(a[ka].dtype)            # (r, in)
    return child


def delta(state: State, prefix: str) -> torch.Tensor:
    """B @ A of one module (without the alpha / r scale)."""
    ka, kb = lora_pairs(state)[prefix]
    return state[kb].float() @ state[ka].float()
