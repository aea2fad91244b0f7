"""``populora runs RUN_ID``: one training run in the terminal, as the UI's run page shows it: every member
(role, origin, MLflow status, rating now and at its peak, compute), then what a reader checks first: member runs
left RUNNING, the highest rating each role reached, and how many children crossover and mutation made."""

from __future__ import annotations

from populora.platform import progress
from populora.platform.store import runlayout as rl

MU = rl.RATING_PREFIX + "mu"
SIGMA = rl.RATING_PREFIX + "sigma"


def member_lines(client, run_id: str) -> list[dict]:
    """One dict per member run, in member order: its identity, status, rating now / peak and compute."""
    rows = []
    for child in rl.member_runs(client, run_id):
        row = rl.member_row(child)
        history = client.get_metric_history(child.info.run_id, MU)
        peak = max(history, key=lambda m: m.value, default=None)
        row.update(status=child.info.status, peak_mu=peak.value if peak else None, peak_step=peak.step if peak else None)
        rows.append(row)
    return sorted(rows, key=lambda r: rl.member_order(r["member"]))


def summary(rows: list[dict]) -> list[str]:
    """The lines under the table: member runs still RUNNING, each role's peak rating, evolution's children.

    >>> rows = [{"member": "T0", "role": "teacher", "status": "FINISHED", "peak_mu": 26.5, "peak_step": 2, "operator": "init"},
    ...         {"member": "S2", "role": "student", "status": "RUNNING", "peak_mu": 24.0, "peak_step": 3, "operator": "svd_fit",
    ...          "parents": ["S0", "S1"]}]
    >>> print("\\n".join(summary(rows)))
    member runs still RUNNING: S2
    peak teacher rating: mu 26.50 (T0, step 2)
    peak student rating: mu 24.00 (S2, step 3)
    children: 1 crossover, 0 mutation
    """
    running = [r["member"] for r in rows if r["status"] == "RUNNING"]
    out = [f"member runs still RUNNING: {', '.join(running) if running else 'none'}"]
    for role in ("teacher", "student", "both"):
        rated = [r for r in rows if r["role"] == role and r.get("peak_mu") is not None]
        if rated:
            top = max(rated, key=lambda r: r["peak_mu"])
            out.append(f"peak {role} rating: mu {top['peak_mu']:.2f} ({top['member']}, step {top['peak_step']})")
    parents = [len(r.get("parents") or []) for r in rows if r["operator"] != "init"]  # a crossover has 2+ parents
    out.append(f"children: {sum(n >= 2 for n in parents)} crossover, {sum(n == 1 for n in parents)} mutation")
    return out


def render(client, run_id: str) -> str:
    run = client.get_run(run_id)
    rows = member_lines(client, run_id)
    gen = rl.COMPUTE_CUMULATIVE["generated_tokens"]
    status = run.info.status + (" (crashed: its heartbeat stopped; populora runs says more)"
                                if rl.status(run) == rl.CRASHED else "")
    head = (f"run {run_id}: {run.info.run_name}, {run.data.tags.get(rl.KIND, '?')}, {status}, "
            f"{steps_line(rl.status(run), run.data.tags)}")
    origins = [r["operator"] + (f" of {'+'.join(r['parents'])}" if r["parents"] else "") for r in rows]
    w = max([len("origin"), *map(len, origins)])  # whole: an operator and its parents (component_swap of S1+S2)
    table = [f"{'member':7} {'role':8} {'gen':>3} {'origin':{w}} {'status':9} {'alive':5} {'mu':>6} {'sigma':>6} "
             f"{'peak mu':>8} {'gen. tokens':>11}"]
    for r, origin in zip(rows, origins):
        mu, sigma = r.get(MU), r.get(SIGMA)
        table.append(f"{r['member']:7} {r['role']:8} {r['generation']:>3} {origin:{w}} {r['status']:9} "
                     f"{'yes' if r['alive'] else 'no':5} {_num(mu):>6} {_num(sigma):>6} {_num(r['peak_mu']):>8} "
                     f"{_num(r.get(gen), 0):>11}")
    return "\n".join([head, *origin_lines(run_id, run.data.tags), *table, *summary(rows)])


def steps_line(status: str, tags: dict) -> str:
    """The run's steps as the Runs page says them (``platform.progress``, one source): a run that ended early, the
    step its trainer finished and the checkpoint a resume goes on from; a budget-ended run, done.

    >>> steps_line("finished", {rl.PROGRESS: "5/56", rl.BUDGET: "spent 1e6 of 1e6"}), steps_line("running", {rl.PROGRESS: "2/6"})
    ('progress 5 (compute budget reached; at most 56)', 'progress 2/6')
    >>> steps_line("stopped", {rl.PROGRESS: "4/6"})
    'stopped after step 4/6'
    """
    step, steps = rl.parse_progress(tags.get(rl.PROGRESS, ""))
    if status in ("stopped", "failed", "crashed"):
        run_dir = tags.get(rl.RUN_DIR)
        where = progress.stopped_where(progress.steps_done(progress.read(run_dir)), step, steps)
        if where:
            return f"{status} {where}"
    if step is None and steps is None:
        return f"progress {tags.get(rl.PROGRESS, '?') or '?'}"
    return "progress " + progress.steps_shown(step, steps, status, tags.get(rl.BUDGET, ""))[0]


def origin_lines(run_id: str, tags: dict) -> list[str]:
    """Where a fork comes from, and the checkpoints on disk a new fork can start from.

    >>> origin_lines("r2", {rl.FORKED_FROM: "r1", rl.FORK_STEP: "3"})
    ['forked from run r1 at step 3']
    """
    out = [f"forked from run {tags[rl.FORKED_FROM]} at step {tags.get(rl.FORK_STEP, '?')}"] if tags.get(rl.FORKED_FROM) else []
    kept = rl.checkpoint_steps(rl.run_dir_of(tags))
    if kept:
        out.append(f"checkpoints on disk: steps {', '.join(map(str, kept))} "
                   f"(fork one: populora train --fork {run_id} --step N --set key=value)")
    return out


def _num(value, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"
