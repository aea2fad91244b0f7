"""``populora runs`` and ``populora jobs``: what the MLflow store and the machine's job queue hold (the UI's Runs
and Jobs pages read the same). No torch; MLflow is imported only when the store is read."""

from __future__ import annotations

import json
import sys

from populora.cli import experiments
from populora.evaluation import compute as compute_figure
from populora.platform.jobs import heartbeat, jobs, lease, lost_runs, queue, state
from populora.platform import progress
from populora.platform.store import runlayout
from populora.platform.store.run_detail import member_lines, render
from populora.platform.store.tracking import Tracker, client, tracking_uri


def runs(args) -> int:
    if args.ancestry:
        return experiments.ancestry_record(args)
    if args.reap:
        return reap()
    if args.run_id:
        from mlflow.exceptions import MlflowException  # mlflow is loaded only when the store is read

        try:
            print(json.dumps({"run_id": args.run_id, "members": member_lines(client(), args.run_id)}, default=str)
                  if args.json else render(client(), args.run_id))
        except MlflowException as err:
            print(f"error: no run {args.run_id!r} in {tracking_uri()} ({err.message[:100]}); list them with: populora runs",
                  file=sys.stderr)
            return 2
        return 0
    rows = runlayout.list_runs(client(), args.limit)  # the UI's Runs page reads the same rows
    if args.json:  # the rows as they are read (tags, metrics, compute), one JSON list
        print(json.dumps(rows, default=str))
        return 0
    if not rows:
        print(f"no PopuLoRA runs in {tracking_uri()} (start one with: populora train --config configs/smoke.yaml)")
        return 0
    by_id = {r["run_id"]: r for r in rows}
    current = current_jobs(rows)
    for r in rows:  # the run's state with its current job folded in (platform/jobs/state.py), as the UI shows it
        r["status"] = state.of_run(r["status"], current.get(r["run_id"]))
    print(f"{'run id':34} {'name':28} {'kind':10} {'status':9} {'progress':10} {'solve':>6} {'valid':>6} "
          f"{'vs baseline':>17}  monitors fired")
    for r in rows:
        solve, valid = r["solve_rate"], r["validity_rate"]
        print(f"{r['run_id']:34} {runlayout.short_name(r['name'] or '', 28):28} {r['kind']:10} {r['status']:9} {steps_cell(r):10} "
              f"{'' if solve is None else f'{solve:.0%}':>6} {'' if valid is None else f'{valid:.0%}':>6} "
              f"{compute_cell(r, by_id.get(r['baseline_run'])):>17}  {r['monitors']}")
    lines = [f"  {r['run_id'][:12]} vs {r['baseline_run'][:12]}: {f['words']}" for r in rows
             for f in [compute_figure.figure(r["compute_metrics"], by_id[r["baseline_run"]]["compute_metrics"],
                                             note=compute_figure.matched_note(by_id[r["baseline_run"]].get("tags")),
                                             models=(r.get("settings") or {}, by_id[r["baseline_run"]].get("settings") or {}))
                       if r["baseline_run"] in by_id else None] if f]
    if lines:
        print("compute (realised per-adapter spend, the runs' ledgers):\n" + "\n".join(lines))
    crashed_hint(rows)
    return 0


def current_jobs(rows: list[dict]) -> dict:
    """{run id: its newest job from this jobs dir} for the listed runs, where that job is still what drives the run
    (its job tag names it, or it is active: a resume waiting in the queue)."""
    newest = {}
    for job in sorted(jobs.list_jobs(), key=lambda j: j.created):
        if job.run_id:
            newest[job.run_id] = job
    out = {}
    for r in rows:
        job = newest.get(r["run_id"])
        if job is not None and (r["tags"].get(runlayout.JOB_ID) in (None, job.id) or job.status in queue.ACTIVE):
            out[r["run_id"]] = job
    return out


def crashed_hint(rows: list[dict]) -> None:
    """Under the table: each crashed run (running in the store, its heartbeat stopped), how long it has been
    silent and the two ways on."""
    for r in rows:
        if r["status"] == runlayout.SILENT:  # alive here, not beating: never resumed beside (lease.py)
            print(f"silent: run {r['run_id']}: {lease.refusal('running', r['tags']) or 'its trainer is alive but silent'}")
        if r["status"] == runlayout.CRASHED:
            silent = heartbeat.silence(r["tags"]) or 0.0
            print(f"crashed: run {r['run_id']} says running but its trainer sent no heartbeat for "
                  f"{heartbeat.describe_silence(silent)} (limit {heartbeat.limit_s():.0f} s); "
                  f"{lost_runs.resume_line(r['run_id'])}, or mark it failed with `populora runs --reap`")


def reap() -> int:
    """``populora runs --reap``: end FAILED the runs shown crashed whose trainer is not alive here."""
    found = lost_runs.reap(Tracker())
    if not found:
        print(f"no crashed run in {tracking_uri()} (heartbeat limit {heartbeat.limit_s():.0f} s)")
    for r in found:
        print(f"{r.run_id} {r.name}: silent {heartbeat.describe_silence(r.silent_s)}: {r.why}")
    return 0


def steps_cell(row: dict) -> str:
    """A run's steps as the Runs page says them (``progress.steps_shown``): a budget-ended run "5 (budget)", not 5/56.

    >>> steps_cell({"step": 5, "steps": 56, "status": "finished", "tags": {runlayout.BUDGET: "spent"}, "progress": "5/56"})
    '5 (budget)'
    >>> steps_cell({"step": None, "steps": None, "status": "running", "tags": {}, "progress": ""})
    '?'
    """
    if row.get("step") is None and row.get("steps") is None:
        return row.get("progress") or "?"
    budget = (row.get("tags") or {}).get(runlayout.BUDGET, "")
    return progress.steps_shown(row.get("step"), row.get("steps"), row["status"], budget, short=True)[0]


def compute_cell(row: dict, baseline: dict | None) -> str:
    """A population's column: its baseline's realised per-adapter spend over its own, "matched" within 5%
    (evaluation/compute.py); empty without a linked baseline listed or a ledger.

    >>> p = {"compute_metrics": {"compute/per_adapter/generated_tokens": 100.0, "compute/per_adapter/trained_tokens": 100.0}}
    >>> b = {"compute_metrics": {"compute/per_adapter/generated_tokens": 150.0, "compute/per_adapter/trained_tokens": 146.0}}
    >>> compute_cell(p, b), compute_cell(p, p), compute_cell(p, None)
    ('1.48x not matched', '1.00x matched', '')
    """
    f = (compute_figure.figure(row["compute_metrics"], baseline["compute_metrics"],
                               models=(row.get("settings") or {}, baseline.get("settings") or {})) if baseline else None)
    if f is not None and f["words"].startswith("not comparable"):
        return "other base model"
    return "" if f is None else f"{f['ratio']:.2f}x {'matched' if f['matched'] else 'not matched'}"


def jobs_(args) -> int:
    """The machine's one job queue (the UI reads the same one): what holds a slot, what waits and in which place,
    then the recent jobs of the jobs dir that have ended."""
    if args.stop:
        found = {e.job.id: e.job for e in queue.snapshot()} | {j.id: j for j in jobs.list_jobs()}
        if args.stop not in found:
            print(f"error: no job {args.stop!r} in the queue ({queue.queue_dir()}) or the jobs dir ({jobs.jobs_dir()}); "
                  f"list them with: populora jobs", file=sys.stderr)
            return 2
        print(f"{args.stop}: {jobs.stop(found[args.stop])}")
        return 0
    rows = queue.snapshot()
    print(f"queue {queue.queue_dir()}: {queue.max_parallel()} slot(s), {sum(e.position is None for e in rows)} running, "
          f"{sum(e.position is not None for e in rows)} waiting")
    line = "{:8} {:5} {:9} {:24} {}"
    print(line.format("place", "kind", "status", "job id", "name"))
    for e in rows:
        shown = state.job_state(e.status, state.stop_sent(e.job))  # stopping, between Stop and the end
        print(line.format(f"#{e.position}" if e.position else "slot", e.job.kind, shown, e.job.id, e.job.name))
        now = progress.read(e.job.dir) if e.status == "running" else None
        if now is not None:  # a trainer's phase inside its step, and the ETA from its measured phase times
            print(line.format("", "", "", "", progress.line(now)))
    queued = {e.job.id for e in rows}
    ended = [j for j in jobs.list_jobs()[: args.limit] if j.id not in queued]
    if ended:
        print(f"\nrecent jobs in {jobs.jobs_dir()}:")
        for j in ended:
            print(line.format("", j.kind, state.of_job(j), j.id, j.name))
    return 0


COMMANDS = {"runs": runs, "jobs": jobs_, "diff": experiments.diff}  # parsed by ``populora.cli.build_parser``: fn(args)
BAD_INPUT = ()  # they print their own errors
