"""Float tolerances derived from the computation, not guessed (issue 43: an atol of 1e-7 on float32 gradients
failed every time on another CPU of the same kind).

Two evaluation orders of a sum of n floats (another batching, chunking, padding or thread count) differ by at most
2 gamma_(n-1) sum|x_i|, gamma_k = k u / (1 - k u), u = eps / 2 (Higham, Accuracy and Stability of Numerical
Algorithms, 2nd ed., 2002, section 4.2). Here the bound is taken norm-wise, over the whole tensor: the terms'
magnitude is the result's largest element (``scale``), so an element near zero gets the same absolute room as its
neighbours (elementwise relative tolerances are what failed on elements near zero). ``n`` is the length of the
longest reduction chain the values went through (the tests say which)."""

import torch


def gamma(n: int, dtype: torch.dtype) -> float:
    """Higham's gamma_n for ``dtype``: the relative error bound of a sum of n + 1 terms in any order.

    >>> round(gamma(10, torch.float32) / torch.finfo(torch.float32).eps, 3)
    5.0
    """
    u = torch.finfo(dtype).eps / 2
    return n * u / (1 - n * u)


def bound(want: torch.Tensor, n: int, scale: float | None = None) -> float:
    """The largest |got - want| two summation orders of ``n`` terms allow, norm-wise over ``want``."""
    scale = float(want.detach().abs().max()) if scale is None else scale
    return 2 * gamma(max(n - 1, 1), want.dtype) * max(scale, torch.finfo(want.dtype).tiny)


def assert_close(got: torch.Tensor, want: torch.Tensor, n: int, what: str = "", scale: float | None = None) -> None:
    """``got`` equals ``want`` up to summation order over reductions of length ``n`` (shape, dtype and bound)."""
    assert got.shape == want.shape and got.dtype == want.dtype, (what, got.shape, want.shape, got.dtype, want.dtype)
    diff, room = float((got - want).detach().abs().max()) if got.numel() else 0.0, bound(want, n, scale)
    assert diff <= room, f"{what}: max |diff| {diff:.3g} > {room:.3g} (n={n}, scale={scale or float(want.detach().abs().max()):.3g})"
