"""Evolution operators in LoRA weight space, on real PEFT adapters of a tiny model, and lineage."""

import pytest
import torch

from populora.training import operators
from populora.training.lineage import Lineage, LineageEvent


def _state(seed: int, r: int = 4, out: int = 24, inp: int = 16) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {f"m{i}.lora_A.weight": torch.randn(r, inp, generator=g) for i in range(2)} | {
        f"m{i}.lora_B.weight": torch.randn(out, r, generator=g) for i in range(2)}


def test_mutation_moves_each_tensor_by_the_intended_relative_scale():
    state = _state(0)
    state["m0.lora_B.weight"] *= 100  # very different tensor scales
    child = operators.mutate(state, 0.05, torch.Generator().manual_seed(1))
    for key, t in state.items():
        rel = (child[key] - t).pow(2).mean().sqrt() / t.pow(2).mean().sqrt()
        assert 0.03 < float(rel) < 0.07, (key, float(rel))
        assert child[key].shape == t.shape


def test_mutation_of_a_zero_tensor_stays_zero():
    state = {"m.lora_A.weight": torch.randn(4, 8), "m.lora_B.weight": torch.zeros(8, 4)}
    child = operators.mutate(state, 0.1, torch.Generator().manual_seed(0))
    assert torch.equal(child["m.lora_B.weight"], state["m.lora_B.weight"])


@pytest.mark.parametrize("method", ["svd", "swap"])
def test_crossover_with_itself_is_itself(method):
    a = _state(0)
    child = operators.crossover_svd(a, a, 0.5) if method == "svd" else operators.crossover_swap(a, a, torch.Generator().manual_seed(0))
    for prefix in ("m0", "m1"):
        assert torch.allclose(operators.delta(child, prefix), operators.delta(a, prefix), atol=1e-4)
        assert child[f"{prefix}.lora_A.weight"].shape == a[f"{prefix}.lora_A.weight"].shape  # same rank


def test_svd_crossover_is_the_best_rank_r_fit_of_the_weighted_delta():
    a, b = _state(0), _state(1)
    child = operators.crossover_svd(a, b, 0.3)
    target = 0.3 * operators.delta(a, "m0") + 0.7 * operators.delta(b, "m0")
    u, s, vh = torch.linalg.svd(target)
    best = (u[:, :4] * s[:4]) @ vh[:4]
    assert torch.allclose(operators.delta(child, "m0"), best, atol=1e-3)
    assert child["m0.lora_A.weight"].shape == (4, 16) and child["m0.lora_B.weight"].shape == (24, 4)


def test_swap_crossover_takes_whole_components_from_the_parents():
    a, b = _state(0), _state(1)
    child = operators.crossover_swap(a, b, torch.Generator().manual_seed(3))
    for i in range(4):
        row = child["m0.lora_A.weight"][i]
        col = child["m0.lora_B.weight"][:, i]
        from_a = torch.equal(row, a["m0.lora_A.weight"][i]) and torch.equal(col, a["m0.lora_B.weight"][:, i])
        from_b = torch.equal(row, b["m0.lora_A.weight"][i]) and torch.equal(col, b["m0.lora_B.weight"][:, i])
        assert from_a or from_b


def test_children_are_loadable_peft_adapters(tiny_backend, tmp_path):
    backend = tiny_backend
    for name in ("p0", "p1"):
        backend.add_adapter(name)
        with torch.no_grad():
            for p in backend.parameters(name):
                p.normal_()
    child = operators.crossover_svd(backend.adapter_state("p0"), backend.adapter_state("p1"))
    backend.add_adapter("child")
    backend.set_adapter_state("child", child)
    saved = backend.save_adapter("child", tmp_path / "child")
    from peft import PeftConfig
    assert PeftConfig.from_pretrained(str(saved)).r == backend.lora.rank
    backend.add_adapter("reloaded", from_dir=saved)
    for key, t in backend.adapter_state("reloaded").items():
        assert torch.equal(t, backend.adapter_state("child")[key])


def test_lineage_keeps_both_crossover_parents():
    lin = Lineage()
    for m in ("T0", "T1", "T2"):
        lin.record(LineageEvent(m, [], "init", 0, 0, "teacher"))
    lin.record(LineageEvent("T3", ["T0", "T1"], "crossover", 2, 1, "teacher", replaced="T2"))
    lin.record(LineageEvent("T4", ["T3"], "mutation", 4, 2, "teacher", replaced="T1"))
    assert lin.parents("T3") == ["T0", "T1"]
    assert lin.children("T0") == ["T3"]
    assert lin.ancestors("T4") == {"T3", "T0", "T1"}
    data = lin.to_dict()
    assert {"parent": "T1", "child": "T3", "operator": "crossover", "step": 2} in data["edges"]
    assert Lineage.from_dict(data).to_dict() == data
