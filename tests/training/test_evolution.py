"""Evolution operators in LoRA weight space, on real PEFT adapters of a tiny model, and lineage."""

import pytest
import torch

from populora.platform.backends import AdamConfig
from populora.training.evolve import operators
from populora.training.evolve.lineage import Lineage, LineageEvent


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


# ---------------------------------------------------------------------- evolve on a real (tiny) PEFT backend
def _evolve_setup(backend, ratings: dict[str, tuple[float, float]], **evolution):
    """A population with the given (mu, sigma) per member, each with a random non-zero adapter and an AdamW that
    has taken one step (so it holds moments a child must not inherit)."""
    import numpy as np

    from populora.training.config import TrainConfig
    from populora.training.member import STUDENT, TEACHER, Member, Population

    pop, lineage = Population(), Lineage()
    for i, (mid, (mu, sigma)) in enumerate(ratings.items()):
        role = TEACHER if mid[0] == "T" else STUDENT
        assert pop.add(Member(pop.new_id(role), role, backend.lora.rank, mu=mu, sigma=sigma)).id == mid
        backend.add_adapter(mid)
        torch.manual_seed(i)
        with torch.no_grad():
            for p in backend.parameters(mid):
                p.normal_()
        backend.init_optimizer(mid, AdamConfig(lr=1e-3))
        sum(p.square().sum() for p in backend.parameters(mid)).backward()
        backend.optimizers[mid].step()
        lineage.record(LineageEvent(mid, [], "init", 0, 0, role))
    cfg = TrainConfig.model_validate({"evolution": {"every": 1, **evolution}})
    return pop, lineage, cfg, np.random.default_rng(0), torch.Generator().manual_seed(0)


def test_evolve_replaces_the_lowest_mu_minus_k_sigma_and_resets_its_optimizer(tiny_backend, tmp_path):
    from populora.training.evolve.evolution import evolve

    # k = 2: T1 has the highest mu but the least certain one (35 - 16 = 19 < 26 - 4 = 22 < 30 - 2 = 28)
    ratings = {"T0": (30.0, 1.0), "T1": (35.0, 8.0), "T2": (26.0, 2.0)}
    pop, lineage, cfg, rng, gen = _evolve_setup(tiny_backend, ratings, conservative_k=2.0, replace_fraction=0.3,
                                                crossover_prob=0.0, sigma_widen=1.5)
    (dead, child), = evolve(pop, tiny_backend, lineage, cfg, 1, rng, gen, tmp_path)
    assert dead.id == "T1" and not dead.alive and (tmp_path / "T1" / "adapter_config.json").is_file()
    assert "T1" not in tiny_backend.adapters and child.id in tiny_backend.adapters
    parent = pop[child.parents[0]]
    assert operators.FAMILY[child.operator].kind == "mutation" and parent.id in ("T0", "T2")
    assert (child.mu, child.sigma) == (parent.mu, parent.sigma * 1.5)  # inherited, sigma widened
    assert tiny_backend.optimizer_state(parent.id)["state"]            # the parent has Adam moments
    assert tiny_backend.optimizer_state(child.id)["state"] == {}       # the child starts without them


def test_a_role_of_two_can_make_a_crossover_weighted_by_fitness(tiny_backend, tmp_path):
    """With two members per role the elite is one member: the crossover partner is the member being replaced,
    and the child leans to the fitter parent in its weights and its inherited mu."""
    from populora.training import rating
    from populora.training.evolve.evolution import evolve

    ratings = {"T0": (32.0, 2.0), "T1": (22.0, 2.0), "S0": (20.0, 3.0), "S1": (26.0, 3.0)}
    pop, lineage, cfg, rng, gen = _evolve_setup(tiny_backend, ratings, replace_fraction=0.5, crossover_prob=1.0,
                                                crossover="svd", conservative_k=3.0)
    states = {m: tiny_backend.adapter_state(m) for m in ratings}
    replaced = evolve(pop, tiny_backend, lineage, cfg, 2, rng, gen, tmp_path)
    assert [(d.id, c.operator) for d, c in replaced] == [("T1", "svd_fit"), ("S0", "svd_fit")]
    for dead, child in replaced:
        strong = "T0" if dead.id == "T1" else "S1"
        assert child.parents == [strong, dead.id]
        w = rating.fitness_weight(pop[strong], dead, 3.0)
        assert w > 0.5
        event = next(e for e in lineage.to_dict()["events"] if e["child"] == child.id)
        assert event["details"]["weight"] == pytest.approx(w)
        assert child.mu == pytest.approx(w * pop[strong].mu + (1 - w) * dead.mu)
        assert pop[strong].mu > child.mu > dead.mu
        prefix = next(iter(operators.lora_pairs(states[strong])))
        expected = operators.delta(operators.crossover_svd(states[strong], states[dead.id], w), prefix)
        assert torch.allclose(operators.delta(tiny_backend.adapter_state(child.id), prefix), expected, atol=1e-4)


def test_swap_crossover_takes_more_components_from_the_heavier_parent():
    a, b = _state(0, r=64), _state(1, r=64)
    child = operators.crossover_swap(a, b, torch.Generator().manual_seed(0), weight=0.9)
    from_a = sum(torch.equal(child["m0.lora_A.weight"][i], a["m0.lora_A.weight"][i]) for i in range(64))
    assert from_a > 48
