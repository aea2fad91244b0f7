"""Make a random model say a stop token at a known place: swap two rows of its (untied) LM head.

With rows ``t`` and ``stop`` swapped, the logits of the two tokens trade places and nothing else changes, so greedy
decoding follows the unswapped model's path token for token until the first place that path chose ``t`` (or
``stop``), and there says ``stop``. Picking ``t`` as the path's first new token at or after position ``k`` gives the
exact place a correct engine must stop: the known truth of the stopping tests (torch and vLLM alike)."""

import torch


def stop_place(path: list[int], stop: int, k: int = 2) -> tuple[int, int]:
    """(the token to swap with ``stop``, the index where greedy decoding then says ``stop``): the first token of
    ``path`` at or after ``k`` that did not occur before it (``path`` must not hold ``stop`` before that place).

    >>> stop_place([5, 6, 5, 7, 8], stop=9)
    (7, 3)
    """
    for i in range(k, len(path)):
        if path[i] not in path[:i]:
            assert stop not in path[:i], "the unswapped path already stops"
            return path[i], i
    raise AssertionError(f"no new token after position {k} in {path}")


@torch.no_grad()
def swap_head_rows(model, a: int, b: int) -> None:
    head = model.get_output_embeddings().weight
    assert head.data_ptr() != model.get_input_embeddings().weight.data_ptr(), "a tied head would move the embedding too"
    head[[a, b]] = head[[b, a]]
