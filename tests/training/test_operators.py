"""The operator family's defining properties, each against a reference computed another way (torch.linalg.svd of
the dense delta B @ A, exact tensor equality with a parent), on small random LoRA states."""

import pytest
import torch

from populora.training.evolve import operators as O


def _state(seed: int, r: int = 4, out: int = 24, inp: int = 16, modules: int = 3) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {f"m{i}.lora_A.weight": torch.randn(r, inp, generator=g) for i in range(modules)} | {
        f"m{i}.lora_B.weight": torch.randn(out, r, generator=g) for i in range(modules)}


def _deltas(state):
    return {p: O.delta(state, p) for p in O.lora_pairs(state)}


def _same_delta(a, b, atol=1e-4):
    return all(torch.allclose(da, db, atol=atol) for da, db in zip(_deltas(a).values(), _deltas(b).values()))


def _svals(m):
    return torch.linalg.svdvals(m.double())


def _run(name, states, strength=None, seed=0, weights=None):
    return O.apply(name, states, weights, torch.Generator().manual_seed(seed), strength)


def _parents(name):
    return [_state(0)] if O.FAMILY[name].kind == "mutation" else [_state(0), _state(1)] + ([_state(2)] if name == "xes" else [])


@pytest.mark.parametrize("name", list(O.FAMILY))
def test_every_operator_keeps_the_rank_and_is_deterministic(name):
    parents = _parents(name)
    child = _run(name, parents)
    assert {k: v.shape for k, v in child.items()} == {k: v.shape for k, v in parents[0].items()}
    again = _run(name, parents)
    assert all(torch.equal(child[k], again[k]) for k in child)


@pytest.mark.parametrize("name", ["gaussian", "svd_noise", "layer_gaussian", "mask", "neftune", "clone"])
def test_a_mutation_at_zero_strength_gives_the_parent(name):
    parent = _state(0)
    assert _same_delta(_run(name, [parent], strength=0.0), parent)


@pytest.mark.parametrize("name", ["gaussian", "svd_noise", "layer_gaussian", "mask", "neftune"])
def test_a_mutation_at_its_default_strength_changes_the_delta(name):
    parent = _state(0)
    assert not _same_delta(_run(name, [parent]), parent, atol=1e-3)


@pytest.mark.parametrize("name", ["svd_fit", "component_swap", "layerwise", "subspace_split", "extrapolate", "xes"])
def test_crossing_a_member_with_itself_gives_it_back(name):
    a = _state(0)
    assert _same_delta(_run(name, [a, a] + ([a] if name == "xes" else []), weights=None), a)


def test_dare_without_drops_is_the_svd_fit_and_its_drop_keeps_the_delta_on_average():
    a, b = _state(0), _state(1)
    assert _same_delta(_run("dare", [a, b], strength=0.0), O.crossover_svd(a, b, 0.5))
    g = torch.Generator().manual_seed(0)
    dropped = [O.dare_drop(a, 0.3, g) for _ in range(400)]
    zeros = sum(float((d["m0.lora_A.weight"] == 0).float().mean()) for d in dropped) / len(dropped)
    assert abs(zeros - 0.3) < 0.01
    kept = dropped[0]["m0.lora_A.weight"] != 0
    assert torch.allclose(dropped[0]["m0.lora_A.weight"][kept], a["m0.lora_A.weight"][kept] / 0.7)
    mean = torch.stack([O.delta(d, "m0") for d in dropped]).mean(0)
    err = (mean - O.delta(a, "m0")).norm() / O.delta(a, "m0").norm()
    assert err < 0.12  # unbiased, E[B'A'] = BA: one draw is ~0.9 off, the mean of 400 ~0.05


@pytest.mark.parametrize("rho,dropped", [(0.25, 1), (0.5, 2), (0.75, 3)])
def test_masking_zeroes_exactly_rho_of_the_singular_components_and_keeps_the_rest(rho, dropped):
    parent = _state(0)
    child = _run("mask", [parent], strength=rho)
    for p in O.lora_pairs(parent):
        s_parent, s_child = _svals(O.delta(parent, p))[:4], _svals(O.delta(child, p))[:4]
        assert int((s_child < 1e-4 * s_parent[0]).sum()) == dropped
        kept = s_child[s_child > 1e-4 * s_parent[0]]
        # the survivors are parent singular values, untouched
        assert all(torch.isclose(s, s_parent, rtol=1e-4).any() for s in kept)


def test_the_subspace_split_keeps_k_components_of_one_parent_and_r_minus_k_of_the_other():
    a, b = _state(0), _state(1)
    child = O.crossover_split(a, b, 3)
    for p in O.lora_pairs(a):
        ua, sa, vha = torch.linalg.svd(O.delta(a, p).double())
        ub, sb, vhb = torch.linalg.svd(O.delta(b, p).double())
        expected = (ua[:, :3] * sa[:3]) @ vha[:3] + (ub[:, 3:4] * sb[3:4]) @ vhb[3:4]
        assert torch.allclose(O.delta(child, p).double(), expected, atol=1e-3)


def test_layerwise_takes_each_module_whole_from_one_parent():
    a, b = _state(0, modules=12), _state(1, modules=12)
    child = _run("layerwise", [a, b])
    sources = []
    for p, (ka, kb) in O.lora_pairs(a).items():
        from_a = torch.equal(child[ka], a[ka]) and torch.equal(child[kb], a[kb])
        from_b = torch.equal(child[ka], b[ka]) and torch.equal(child[kb], b[kb])
        assert from_a != from_b
        sources.append(from_a)
    assert 0 < sum(sources) < len(sources)


def test_layer_gaussian_changes_half_the_modules_and_leaves_the_others():
    parent = _state(0, modules=8)
    child = _run("layer_gaussian", [parent])
    changed = [not torch.equal(child[ka], parent[ka]) for ka, _ in O.lora_pairs(parent).values()]
    assert sum(changed) == 4


def test_neftune_moves_only_the_down_factor_a_by_uniform_noise():
    parent = _state(0, r=64, inp=256)
    child = _run("neftune", [parent], strength=0.1)
    for ka, kb in O.lora_pairs(parent).values():
        assert torch.equal(child[kb], parent[kb])
        noise = (child[ka] - parent[ka]) / (0.1 * parent[ka].pow(2).mean().sqrt())
        assert noise.abs().max() <= 3 ** 0.5 + 1e-4 and abs(float(noise.std()) - 1) < 0.05  # U(-sqrt3, sqrt3)


def test_svd_noise_changes_the_singular_values_log_normally():
    parent = _state(0, r=8, out=64, inp=48)
    child = _run("svd_noise", [parent], strength=0.1)
    for p in O.lora_pairs(parent):
        ratio = _svals(O.delta(child, p))[:8] / _svals(O.delta(parent, p))[:8]
        assert (ratio.log().abs() < 0.5).all() and not torch.allclose(ratio, torch.ones_like(ratio), atol=1e-3)


def test_extrapolation_goes_past_the_fitter_parent():
    a, b = _state(0), _state(1)
    assert _same_delta(_run("extrapolate", [a, b], strength=0.0), a)  # eta = 1: the fitter parent
    child = _run("extrapolate", [a, b], strength=0.5)
    for p in O.lora_pairs(a):
        da, db = O.delta(a, p), O.delta(b, p)
        target = O.delta(child, p)
        eta = float(((target - db) * (da - db)).sum() / (da - db).pow(2).sum())  # projection on the a-b line
        assert 1.0 < eta <= 1.5 + 0.1


def test_xes_weights_follow_the_z_scored_fitness():
    a, b, c = _state(0), _state(1), _state(2)
    w = O.fitness_shares([30.0, 25.0, 20.0])
    assert w[0] > w[1] > w[2] and abs(sum(w) - 1) < 1e-9
    child = O.apply("xes", [a, b, c], w, torch.Generator())
    for p in O.lora_pairs(a):
        dense = sum(wi * O.delta(s, p) for wi, s in zip(w, (a, b, c))).double()
        u, s, vh = torch.linalg.svd(dense)
        assert torch.allclose(O.delta(child, p).double(), (u[:, :4] * s[:4]) @ vh[:4], atol=1e-3)
