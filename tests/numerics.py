"""Float tolerances derived from the computation, not picked: two orders of summing the same n float terms differ
by at most about n unit roundoffs of the terms' magnitude (the forward-error bound of recursive summation, Higham,
"Accuracy and Stability of Numerical Algorithms", 2nd ed., section 4.2: |s1 - s2| <= 2 * gamma_(n-1) * sum |x_i|,
gamma_k = k*u / (1 - k*u), u = eps / 2). The largest element of the reference stands in for the terms' magnitude.
"""

import torch


def reduction_atol(reference: torch.Tensor, n: int) -> float:
    """The absolute tolerance between two computations of ``reference`` that differ only in the order of a
    reduction of ``n`` terms: eps(dtype) * n * max |reference|.

    >>> reduction_atol(torch.tensor([0.5, -2.0]), 72) == torch.finfo(torch.float32).eps * 72 * 2.0
    True
    """
    return torch.finfo(reference.dtype).eps * n * reference.abs().max().item()


def assert_close_after_reordering(got: torch.Tensor, reference: torch.Tensor, n: int, what: str = "") -> None:
    """``got`` equals ``reference`` up to a reordered reduction of ``n`` terms (see ``reduction_atol``)."""
    atol = reduction_atol(reference, n)
    worst = (got - reference).abs().max().item()
    assert worst <= atol, f"{what}: largest difference {worst:.3g} over the derived tolerance {atol:.3g} (n={n})"
