"""The curriculum's measures against known truth: diversity at equal volume (synthetic generators whose structure
distribution is known), sameness on hand-made pairs, and the monitors on planted runs."""

import numpy as np
import pytest

from populora.training.measures import curriculum, diversity, monitors
from populora.training.measures.curriculum_tracker import RECENT, CurriculumTracker
from populora.training.measures.sameness import SamenessIndex, near_duplicates, task_key
from populora.training.tasks import Task

OPS = ("+", "*", "-", "//", "%")


def program(structure: int, rng: np.random.Generator, length: int = 4) -> str:
    """A program of structure ``structure`` (its digits in base 5 pick the operators), with random names and
    constants: two programs of one structure differ only in what structure_key abstracts away."""
    name = "v" + str(rng.integers(1000))
    expr = name
    for i in range(length):  # nested: a longer program is a deeper one
        expr = f"({expr} {OPS[(structure // 5 ** i) % 5]} {int(rng.integers(1, 9))})"
    return f"def f({name}):\n    return {expr}"


def generator(probabilities: np.ndarray, volume: int, seed: int) -> list[str]:
    """Structure keys of ``volume`` programs from a generator drawing structures with these probabilities."""
    rng = np.random.default_rng(seed)
    return [curriculum.structure_key(program(int(s), rng)) for s in rng.choice(len(probabilities), volume, p=probabilities)]


ZIPF = 1 / np.arange(1, 41) ** 1.1
ZIPF /= ZIPF.sum()  # 40 structures, a few common and a long tail, like a model's proposals


def test_equal_volume_diversity_agrees_at_4x_volume_while_per_100_does_not():
    """Two generators with the same structure distribution, one proposing 4x as many programs: compared at the
    same m, their diversity agrees within its interval (and matches the truth, sum of 1 - (1 - p)^m); distinct per
    100 proposed differs by more than 2x every time."""
    m = 80
    truth = float(np.sum(1 - (1 - ZIPF) ** m))
    covered = 0
    for rep in range(6):
        small, large = generator(ZIPF, m, 2 * rep), generator(ZIPF, 4 * m, 2 * rep + 1)
        assert len(set(small)) > 10  # the structure key sees the planted structures
        result = diversity.equal_volume({"baseline": small, "population": large})
        assert result["m"] == m and result["arms"]["population"]["n"] == 4 * m
        diff, = result["differences"]
        covered += diff["low"] <= 0 <= diff["high"]
        for arm in ("baseline", "population"):
            r = result["arms"][arm]["rarefied"]
            assert r["low"] <= truth <= r["high"], (arm, r, truth)
        old_small = diversity.per_100(len(set(small)), len(small))
        old_large = diversity.per_100(len(set(large)), len(large))
        assert old_small > 2 * old_large, (old_small, old_large)  # the old metric calls the smaller arm more diverse
    assert covered == 6


def test_rarefied_diversity_is_flat_in_volume_for_a_fixed_generator():
    """The accumulated distinct count grows with volume; the rarefied one (m = 20) stays at the truth."""
    m, truth = 20, float(np.sum(1 - (1 - ZIPF) ** 20))
    observed, rarefied = [], []
    for volume in (20, 80, 320, 1280):
        keys = generator(ZIPF, volume, volume)
        observed.append(len(set(keys)))
        r = diversity.rarefy(diversity.counts(keys), m)
        assert r.low <= truth <= r.high, (volume, r, truth)
        rarefied.append(r.value)
    assert observed == sorted(observed) and observed[-1] > 2 * observed[0]
    assert max(rarefied[1:]) - min(rarefied[1:]) < 1.0  # flat (20 of 20 is one draw: its interval is wide)


def test_rarefaction_and_chao1_on_hand_computed_samples():
    # {a, a, b, c}: of the 6 pairs, 5 hold two distinct keys -> 1 + 5/6
    assert diversity.rarefy([2, 1, 1], 2).value == pytest.approx(11 / 6)
    assert diversity.rarefy([2, 1, 1], 1).value == pytest.approx(1.0)
    # f1 = 3, f2 = 1, n = 13: 6 + (12/13) * 3 * 2 / (2 * 2)
    assert diversity.chao1([5, 3, 2, 1, 1, 1]).value == pytest.approx(6 + 12 / 13 * 1.5)
    big = diversity.chao1(diversity.counts(generator(ZIPF, 2000, 7)))
    assert big.low <= 40 <= big.high + 3  # the generator's 40 structures, the estimate near the truth
    assert diversity.accumulation(["x", "y", "x", "z"]) == [1, 2, 2, 3]
    with pytest.raises(ValueError, match="between 1 and the sample size"):
        diversity.rarefy([2, 1], 5)


# ====================================================================== sameness on hand-made pairs
DOUBLE = "def f(a):\n    b = a * 2\n    return b"
RENAMED = "def f(x):\n    y = x * 7\n    return y"           # names and constant only: same structure
ONE_MORE = "def f(a):\n    b = a * 2\n    b = b - 1\n    return b"  # a statement more
ADDED = "def f(a):\n    return a + a"                       # same behaviour, another program
OTHER = ("def f(s):\n    out = []\n    seen = set()\n    for ch in sorted(s):\n        if ch not in seen:\n"
         "            seen.add(ch)\n            out.append(ch.upper())\n    return ''.join(out)")


def test_sameness_at_three_grains():
    assert curriculum.structure_key(DOUBLE) == curriculum.structure_key(RENAMED)
    assert curriculum.structure_key(DOUBLE) != curriculum.structure_key(ONE_MORE)
    assert near_duplicates(DOUBLE, ONE_MORE) is False  # 3 token shingles: a short program changes a lot ...
    long_a = OTHER
    long_b = OTHER.replace("    return", "    out = out[::-1]\n    return")  # one statement more: Jaccard 0.73
    assert near_duplicates(long_a, long_b) and not near_duplicates(long_a, DOUBLE)  # ... a long one a little
    idx = SamenessIndex()
    first = idx.add(DOUBLE, {("3", "6"), ("5", "10")}, ["3", "5"])
    assert first == {"near": False, "semantic": False, "reproposed": False}
    assert idx.add(ADDED, {("3", "6"), ("5", "10")}, ["3", "5"])["semantic"]      # a + a behaves as a * 2
    assert not idx.add("def f(a):\n    return a + 1", {("3", "4")}, ["3"])["semantic"]
    assert not idx.add("def f(a):\n    return a ** 2", {("3", "9"), ("5", "25")}, ["3", "5"])["semantic"]
    assert idx.add(long_a, {("'ab'", "'ab'")}, ["'ab'"])["near"] is False
    assert idx.add(long_b, {("'ba'", "'ab'")}, ["'ba'"])["near"] is True
    again = idx.add("def f(a):\n    b = a * 2  # the same task\n    return b", {("3", "6"), ("5", "10")}, ["3", "5"])
    assert again["reproposed"] and not idx.add(DOUBLE, {("4", "8")}, ["4"])["reproposed"]  # other inputs: a new task
    restored = SamenessIndex.from_dict(idx.to_dict())
    assert restored.add(long_b, set(), ["'x'"])["near"] and restored.reproposed(DOUBLE, ["3", "5"])
    assert task_key(DOUBLE, ["3"]) != task_key(RENAMED, ["3"])


def test_padding_and_constant_output_are_measured():
    padded = "def f(a):\n    junk = 5\n    if False:\n        a = a * 3\n    pass\n    return a + 1\n    a = 0"
    clean = curriculum.program_metrics("def f(a):\n    b = a + 1\n    return b")
    metrics = curriculum.program_metrics(padded)
    assert metrics["dead_code"] == pytest.approx(4 / 6)  # all but the if and the return and clean["dead_code"] == 0.0
    assert metrics["loc"] > clean["loc"]  # padding inflates size without difficulty
    assert curriculum.program_metrics("def f(a):\n    return 3")["ignores_input"] == 1.0 and clean["ignores_input"] == 0.0


# ====================================================================== monitors on planted runs
def _step_tasks(step: int, structures: list[int], rng, teachers=("T0", "T1"), make=program) -> list[Task]:
    tasks = []
    for i, s in enumerate(structures):
        src = make(s, rng)
        scope: dict = {}
        exec(src, scope)  # our own programs: their gold output
        t = Task(f"{step}-{i}", "code_o", src, input="3", output=repr(scope["f"](3)), teacher=teachers[i % len(teachers)],
                 step=step, valid=True)
        t.metrics = curriculum.measure(src, set())
        tasks.append(t)
    return tasks


def simple(structure: int, rng) -> str:
    return program(structure, rng, length=1)


def test_a_planted_collapse_is_flagged_and_a_healthy_run_is_not():
    """Collapse: from 40 structures of 4 operations and a solve rate of 0.4 to 2 structures of 1 operation solved
    every time. Healthy: the same 40 structures and a solve rate near 0.5 throughout."""
    steps, per_step = 30, 8
    collapsing = CurriculumTracker()

    def collapse_plan(s, rng):
        late = s > steps // 2
        structures = list(rng.integers(0, 2 if late else 40, per_step))
        return structures, (1.0 if late else 0.4), (simple if late else program)

    tags = {}
    rng = np.random.default_rng(0)
    for s in range(1, steps + 1):
        structures, solve, make = collapse_plan(s, rng)
        tasks = _step_tasks(s, structures, rng, make=make)
        metrics = {"student/solve_rate": solve,
                   **{f"curriculum/{k}": float(np.mean([t.metrics[k] for t in tasks])) for k in ("ast_depth", "cyclomatic")}}
        out, by_teacher, new = collapsing.observe(s, tasks, metrics)
        tags.update(new)
    assert out["monitor/collapse"] == 1.0 and "collapse" in collapsing.fired
    assert tags["populora.monitor.collapse"].startswith(f"fired at step {collapsing.fired['collapse']}:")
    assert out["sameness/exact_rate"] == 1.0 and set(by_teacher) == {"T0", "T1"}
    assert out["curriculum/programs"] == steps * per_step and out["curriculum/rarefied_structures"] < 20

    healthy = CurriculumTracker()
    rng = np.random.default_rng(1)
    for s in range(1, steps + 1):
        tasks = _step_tasks(s, list(rng.integers(0, 40, per_step)), rng)
        metrics = {"student/solve_rate": 0.5 + 0.05 * rng.standard_normal(),
                   **{f"curriculum/{k}": float(np.mean([t.metrics[k] for t in tasks])) for k in ("ast_depth", "cyclomatic")}}
        out, _, new = healthy.observe(s, tasks, metrics)
        assert not new
    assert out["monitor/collapse"] == 0.0 and out["monitor/degenerate"] == 0.0 and not healthy.fired
    assert out["curriculum/recent_rarefied_structures"] > 10
    # a checkpointed tracker goes on where it stopped
    restored = CurriculumTracker.from_dict(healthy.to_dict())
    assert restored.keys == healthy.keys and restored.series == healthy.series and len(healthy.keys) > RECENT


def test_degenerate_teaching_and_convergence_are_flagged():
    tracker = CurriculumTracker()
    rng = np.random.default_rng(2)
    for s in range(1, 13):  # both teachers write the same constant task again and again
        tasks = _step_tasks(s, [0] * 6, rng, make=lambda _, r: "def f(a):\n    junk = 1\n    pass\n    return 7")
        tasks = [Task(**{**t.to_dict(), "program": "def f(a):\n    junk = 1\n    pass\n    return 7"}) for t in tasks]
        for t in tasks:
            t.metrics = curriculum.measure(t.program, set())
        out, _, tags = tracker.observe(s, tasks, {"student/solve_rate": 0.5})
    assert out["monitor/degenerate"] == 1.0 and out["degenerate/constant_output_rate"] == 1.0
    assert out["sameness/reproposed_rate"] == 1.0 and out["degenerate/dead_code"] == pytest.approx(2 / 3)
    assert out["monitor/convergence"] == 1.0 and out["population/task_overlap"] == 1.0
    flag = monitors.degenerate({"invalid_rate": [0.1] * 9, "constant_output_rate": [0.0] * 9})
    assert flag.fired is False and "constant outputs" in flag.meaning


def test_adapter_distance_is_the_distance_of_the_weight_updates():
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(0)
    a1, b1, a2, b2 = (torch.randn(4, 6, generator=g), torch.randn(5, 4, generator=g),
                      torch.randn(4, 6, generator=g), torch.randn(5, 4, generator=g))
    states = {"x": {"m.lora_A.weight": a1, "m.lora_B.weight": b1}, "y": {"m.lora_A.weight": a2, "m.lora_B.weight": b2}}
    dx, dy = b1 @ a1, b2 @ a2
    truth = float(torch.linalg.norm(dx - dy) / ((torch.linalg.norm(dx) + torch.linalg.norm(dy)) / 2))
    assert monitors.adapter_distance(states) == pytest.approx(truth, rel=1e-6)
    zero = {"m.lora_A.weight": a1, "m.lora_B.weight": torch.zeros(5, 4)}
    assert monitors.adapter_distance({"x": zero, "y": zero}) is None  # fresh adapters: nothing to compare
    flag = monitors.convergence([0.1] * 9, [1.0, None, 1.0, None, 0.5, None, 0.2, None, 0.1])
    assert flag.fired and "adapter distance" in flag.detail
