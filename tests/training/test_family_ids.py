"""Member ids are unique within a run family (``platform.family``), over random fork chains: forks of forks, at
any kept step, growing and shrinking either role, the parent and every fork evolving after the fork. Pure and
cheap: the real id counters (``Population``), the real resize (``resize.shrink`` / ``resize.grow`` on a backend
that only counts adapters), the real lineage and ancestry; evolution gives out ids as ``evolution._make_child``
does (``population.new_id``), and each run raises its counters to the family's before it gives out ids and
publishes its own after, as the trainer does (``Trainer.fork`` / ``resume`` / ``step``, ``RunLog.family_floor``)."""

import copy
import tempfile
from pathlib import Path

import numpy as np
from hypothesis import given, settings, strategies as st

from populora.platform.store import ancestry, family
from populora.training.evolve import resize
from populora.training.config import TrainConfig
from populora.training.evolve.lineage import Lineage, LineageEvent
from populora.training.member import STUDENT, TEACHER, Member, Population


class CountingBackend:
    """What ``resize.grow(init)`` asks of a backend: adapters added, optimizers made."""

    def __init__(self):
        self.adapters = []

    def add_adapter(self, member_id, seed=None):
        self.adapters.append(member_id)

    def init_optimizer(self, member_id, optim):
        pass


class Run:
    def __init__(self, run_id, population, lineage, step):
        self.id, self.population, self.lineage, self.step = run_id, population, lineage, step
        self.snaps = {}
        self.published = {}

    def snapshot(self):  # a checkpoint: what a fork of this step starts from
        self.snaps[self.step] = (copy.deepcopy(self.population.to_dict()), copy.deepcopy(self.lineage.to_dict()))

    def publish(self):  # RunLog.publish_ids / write_state
        self.published = family.decode(family.encode(self.population.next_index))


def root_run(truth):
    pop, lin = Population(), Lineage()
    for role in (TEACHER, TEACHER, STUDENT, STUDENT):
        m = pop.add(Member(pop.new_id(role), role, 4))
        lin.record(LineageEvent(m.id, [], "init", 0, 0, role))
        truth[m.id] = "r0"
    run = Run("r0", pop, lin, 0)
    run.snapshot()
    run.publish()
    return run


def others(runs, run):
    return family.floor(r.published for r in runs if r is not run)


def evolve_step(runs, run, rng, truth):
    """One step of ``run`` with evolution: the weakest member of each role replaced by a child of the strongest."""
    run.step += 1
    for m in run.population.alive():
        m.mu = float(rng.normal(25, 3))
    run.population.reserve(others(runs, run))
    for role in (TEACHER, STUDENT):
        members = sorted(run.population.alive(role), key=lambda m: m.mu)
        if len(members) < 2:
            continue
        dead, parent = members[0], members[-1]
        child = run.population.add(Member(run.population.new_id(role), role, 4, parent.generation + 1, [parent.id],
                                          "gaussian", run.step, parent.mu, parent.sigma))
        dead.alive = False
        run.lineage.record(LineageEvent(child.id, [parent.id], "gaussian", run.step, child.generation, role, dead.id))
        assert child.id not in truth, f"{child.id} given out twice"
        truth[child.id] = run.id
    run.publish()
    run.snapshot()


def fork(runs, parent, at, teachers, students, grow, truth, tmp: Path):
    pop_d, lin_d = copy.deepcopy(parent.snaps[at])
    run = Run(f"r{len(runs)}", Population.from_dict(pop_d), Lineage.from_dict(lin_d), at)
    cfg = TrainConfig(seed=len(runs), population={"teachers": teachers, "students": students, "grow": grow})
    sizes = {TEACHER: teachers, STUDENT: students}
    ckpt = tmp / run.id / "ckpt"
    for m in run.population.alive():
        (ckpt / "adapters" / m.id).mkdir(parents=True, exist_ok=True)
    resize.shrink(run.population, run.lineage, sizes, cfg.evolution.conservative_k, at, ckpt, tmp / run.id / "archive")
    run.population.reserve(others(runs + [run], run))  # Trainer.fork: the family's numbering first
    added = resize.grow(run.population, CountingBackend(), run.lineage, cfg, at, np.random.default_rng(0), None, run.id)
    for a in added:
        assert a["member"] not in truth, f"{a['member']} given out twice"
        truth[a["member"]] = run.id
    run.lineage.forked(parent.id, at)
    runs.append(run)
    run.publish()
    run.snapshot()
    return run


OPS = st.lists(st.tuples(st.sampled_from(["step", "fork"]), st.integers(0, 50), st.integers(0, 50),
                         st.integers(1, 4), st.integers(1, 4)), min_size=1, max_size=14)


@settings(max_examples=200, deadline=None, derandomize=True, database=None)  # the same 200 chains every run
@given(OPS, st.integers(0, 2**16))
def test_no_id_names_two_members_in_a_family_of_forks(ops, seed):
    rng, truth, runs = np.random.default_rng(seed), {}, []
    with tempfile.TemporaryDirectory() as tmp:
        runs.append(root_run(truth))
        for kind, which, at, teachers, students in ops:
            run = runs[which % len(runs)]
            if kind == "step":
                evolve_step(runs, run, rng, truth)
            else:
                steps = sorted(run.snaps)
                fork(runs, run, steps[at % len(steps)], teachers, students, "init", truth, Path(tmp))
    # every run's lineage (its own members and its parents' up to the fork): one identity per id in the family,
    # and each member placed in the run that gave it out (ancestry's run, the Lineage page's boxes)
    identity = {}
    for run in runs:
        lin = run.lineage.to_dict()
        members = run.population.to_dict()["members"]
        for e in lin["events"]:
            where = ancestry.born_in(e["child"], lin, run.id)
            assert where == truth[e["child"]], (run.id, e["child"], where, truth[e["child"]], lin["forks"])
            identity.setdefault(e["child"], set()).add((where, e["step"], tuple(e["parents"])))
        for m in run.population.alive():
            record = ancestry.record(m.id, run.id, lin, members, {})
            assert [a["run"] for a in record["ancestors"]] == [truth[a["member"]] for a in record["ancestors"]]
        assert family.used(run.population.next_index, [m["id"] for m in members]) == dict(sorted(run.population.next_index.items()))
    assert all(len(v) == 1 for v in identity.values()), {k: v for k, v in identity.items() if len(v) > 1}


def test_a_grown_member_of_a_fork_goes_on_from_the_familys_numbering():
    """The issue's case: the parent trained on past its step 3 and gave out S3 there; its fork at step 3 growing
    the students by one gives the new student S4 (not S3), born in the fork at step 3."""
    truth, tmp = {}, tempfile.TemporaryDirectory()
    runs = [root_run(truth)]
    rng = np.random.default_rng(1)
    for _ in range(4):
        evolve_step(runs, runs[0], rng, truth)
    parent_ids = set(runs[0].population.members)
    child = fork(runs, runs[0], 1, 2, 3, "init", truth, Path(tmp.name))
    (new,) = set(child.population.members) - set(Population.from_dict(runs[0].snaps[1][0]).members)
    assert new not in parent_ids and new == f"S{runs[0].population.next_index['S']}"
    assert ancestry.born_in(new, child.lineage.to_dict(), child.id) == child.id
    tmp.cleanup()
