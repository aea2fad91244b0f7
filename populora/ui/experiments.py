"""Experiments across runs on the Runs, Lineage and Compare pages: fork a run from a checkpoint (as a job), the
diff of two runs' or two members' settings, a fork's origin, the run's notes. The science is elsewhere: which
settings a fork may change (``training.fork``), the diff (``platform.settings_diff``), the ancestry record
(``platform.ancestry``); this module only calls and shows them."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import streamlit as st
import yaml

from populora.platform.store import ancestry, family
from populora.platform.jobs import jobs, lease
from populora.platform import config as config_io
from populora.platform.store import runlayout as rl
from populora.platform.config import ConfigError
from populora.platform.store.settings_diff import settings_diff
from populora.platform.store.tracking import Tracker
from populora.training import (checkpoint_config, checkpoint_population, fork_config, fork_name, job_slots, resize_preview,
                               role_sizes)
from populora.ui import common, store

def show_diff(rows: list[tuple], label_a: str, label_b: str) -> None:
    """A small HTML table (its text is the page's, unlike a data grid's canvas), one row per differing setting."""
    st.table(diff_frame(rows, label_a, label_b).set_index("setting"))


def diff_frame(rows: list[tuple], label_a: str, label_b: str) -> pd.DataFrame:
    """The diff rows as a table with the two sides named; values as text (a mixed column reads "None" otherwise).

    >>> diff_frame([("optim.lr", "5e-05", "3e-05")], "parent", "fork").to_dict("records")
    [{'setting': 'optim.lr', 'parent': '5e-05', 'fork': '3e-05'}]
    """
    return pd.DataFrame([(k, str(a), str(b)) for k, a, b in rows], columns=["setting", label_a, label_b])


def fork_origin(tags: dict) -> None:
    """A fork says where it comes from, with links into the parent run."""
    parent, step = tags.get(rl.FORKED_FROM), tags.get(rl.FORK_STEP)
    if not parent:
        return
    resize = tags.get(rl.FORK_RESIZE, "").removeprefix("resized: ")  # "students 2 -> 3 (S3 = gaussian of S0)"
    st.info(f"🍴 Forked from run `{parent}` at its checkpoint of step {step}: its members and their ancestry up to "
            f"step {step} are the parent's" + (f", except those the fork's resize added (born in this fork): {resize}."
                                              if resize else "."))
    cols = st.columns(3)
    with cols[0]:
        common.link("runs", "Parent run", parent, "⬆️")
    with cols[1]:
        common.link("lineage", "Parent's lineage", parent, "🌳")


def fork_points(steps: int, every: int, keep: int) -> str:
    """What a run of this config leaves to fork from, in words: the checkpoints it writes (every ``every`` steps
    and at its last) of which it keeps the newest ``keep`` (``checkpoint.keep``, 2 by default, said nowhere at
    launch: a week-long run left two steps to fork from).

    >>> fork_points(6, 1, 2)
    'A fork can start from 2 of its 6 checkpoints when it ends: steps 5, 6 (checkpoint.keep=2; raise it to fork from earlier steps, each kept checkpoint holds every adapter and the optimizer state)'
    >>> fork_points(4, 2, 5)
    'A fork can start from every one of its 2 checkpoints: steps 2, 4 (checkpoint.keep=5)'
    """
    written = sorted({s for s in range(every, steps + 1, every)} | {steps})
    kept = written[-keep:]
    shown = ", ".join(map(str, kept)) if len(kept) <= 8 else f"{kept[0]} to {kept[-1]} ({len(kept)} steps)"
    if len(kept) == len(written):
        return f"A fork can start from every one of its {len(written)} checkpoints: steps {shown} (checkpoint.keep={keep})"
    return (f"A fork can start from {len(kept)} of its {len(written)} checkpoints when it ends: steps {shown} "
            f"(checkpoint.keep={keep}; raise it to fork from earlier steps, each kept checkpoint holds every adapter "
            "and the optimizer state)")


def fork_form(run_id: str, run_dir: str | None, name: str, step: int | None = None, key: str = "fork") -> None:
    """Fork from a kept checkpoint: its step, the settings to change (one ``key=value`` a line), checked as the
    CLI checks them (frozen settings refused with the reason) and shown as a diff before the job starts."""
    kept = rl.checkpoint_steps(Path(run_dir)) if run_dir else []
    if not kept:
        st.caption("no checkpoint of this run is on this machine's disk: nothing to fork from")
        return
    if (writer := live_writer(run_id)) is not None:  # one writer per run (platform/jobs/lease.py)
        st.caption(f"This run is still training: {writer}. The fork reads a pinned copy of its checkpoint when its "
                   "job starts; the trainer keeps only its newest checkpoints (checkpoint.keep), so a fork that waits "
                   "in the job queue until the step is pruned fails, naming the steps kept.")
    cols = st.columns([1, 3])
    chosen = cols[0].selectbox("checkpoint step", kept, index=kept.index(step) if step in kept else len(kept) - 1,
                               key=f"{key}_step", help="the checkpoints this run keeps (checkpoint.keep)")
    text = cols[1].text_area("settings to change (one key=value a line)", "", key=f"{key}_set", height=80,
                             placeholder="optim.lr=3e-5\nevolution.every=4")
    overrides = [line.strip() for line in text.splitlines() if line.strip()]
    # the fork's run name says it is one (the default the CLI gives it too); editable here, --set name=... there
    title = st.text_input("the fork's run name", fork_name(name, run_id, chosen), key=f"{key}_name_{chosen}").strip()
    overrides += [f"name={json.dumps(title)}"] if title else []
    clicked = st.button("Fork from here", key=f"{key}_go", type="primary",
                        help="populora train --fork as a background job (it waits in the job queue like a launch)")
    try:
        parent = checkpoint_config(Path(run_dir), chosen)
        cfg = fork_config(parent, overrides, chosen, run_id)
    except ConfigError as err:
        # said once there is input or a click: the name override is always there, so testing "overrides" drew a
        # red error before any input (a finished run's last checkpoint, whose steps a fork must raise)
        if clicked or text.strip():
            st.error(str(err))
        else:
            st.caption("Set what the fork changes above (e.g. `steps=` beyond the checkpoint's step, to go on past "
                       "it); it is checked when you press Fork from here.")
        return
    changed = settings_diff(config_io.flatten(parent), config_io.flatten(cfg), ignore=("pair", "name"))
    if changed:
        show_diff(changed, "this run", "the fork")
    before, after = role_sizes(parent), role_sizes(cfg)
    if before != after:
        try:
            population = checkpoint_population(Path(run_dir), chosen)
            # the ids go on from the family's (this run's after the checkpoint, its other forks'), as the fork's will
            population.reserve(family.floor_of(store.client(store.uri()), store.uri(), run_id, include_self=True))
        except ConfigError as err:
            st.error(str(err))
            return
        lines = resize_preview(population, before, after, cfg.evolution.conservative_k, cfg.population.grow)
        st.info("**The fork resizes the population** (recorded in its lineage):\n" + "\n".join(f"- {x}" for x in lines))
    if clicked:
        job = jobs.launch_fork(run_id, chosen, overrides, name=title or f"{name} fork @{chosen}",
                               env={"MLFLOW_TRACKING_URI": store.uri()}, need=job_slots(config_io.dump(cfg)))
        st.success(f"fork job `{job.id}` started: the new run appears in the table when its trainer has loaded "
                   f"the checkpoint")


def live_writer(run_id: str) -> str | None:
    """Words naming the trainer that still writes the run (``lease.held_by``), None when none does."""
    info = store.run_info(store.uri(), run_id)
    if info is None:
        return None
    return lease.held_by(info["tags"].get(rl.STATUS, info["mlflow_status"].lower()), info["tags"])


def runs_diff(uri: str, run_id: str, runs: pd.DataFrame, key: str = "diff") -> None:
    """Only the settings that differ between this run and another (default: the run it was forked from, else
    the newest other run)."""
    others = runs[runs["run_id"] != run_id]
    if others.empty:
        st.caption("no other run to compare with")
        return
    tags = (store.run_info(uri, run_id) or {}).get("tags", {})
    ids = list(others["run_id"])
    parent = tags.get(rl.FORKED_FROM)
    labels = {r.run_id: common.run_label(r) for r in others.itertuples()}
    other = st.selectbox("compare with", ids, index=ids.index(parent) if parent in ids else 0,
                         format_func=labels.get, key=f"{key}_other")
    a = (store.run_info(uri, run_id) or {}).get("params", {})
    b = (store.run_info(uri, other) or {}).get("params", {})
    rows = settings_diff(a, b)
    if not rows:
        st.caption("no setting differs")
        return
    st.caption(f"{len(rows)} setting(s) differ")
    show_diff(rows, f"this run ({run_id[:8]})", f"{labels[other].split(' · ')[0]} ({other[:8]})")


def members_diff(uri: str, run_id: str, member: str, ids: list[str], key: str = "mdiff") -> None:
    """The diff of two members of the run: their own facts (operator, strength, parents, birth step, ...)."""
    others = [i for i in ids if i != member]
    if not others:
        return
    other = st.selectbox("compare with member", others, key=f"{key}_other")
    lineage, population = store.lineage(uri, run_id), store.population(uri, run_id)
    try:
        a, b = (ancestry.member_facts(m, lineage, population) for m in (member, other))
    except KeyError as err:
        st.caption(str(err.args[0]))
        return
    keep = ("role", "generation", "operator", "strength", "born_step", "parents", "replaced", "died_step", "replaced_by")
    flat = [{k: (",".join(f[k]) or "-") if k == "parents" else f[k] for k in keep} for f in (a, b)]
    rows = settings_diff(*flat)
    show_diff(rows, member, other) if rows else st.caption("no difference")


def ancestry_record(uri: str, run_id: str, member: str) -> dict:
    """``ancestry.record`` from the page's own cached reads (lineage, population, each chain run's info and
    members), so offering the download reads nothing the page has not read already (for a fork: its parents')."""
    lineage, population = store.lineage(uri, run_id), store.population(uri, run_id)
    chain = [f["run"] for f in lineage.get("forks") or []] + [run_id]
    settings, run_dirs, scores = {}, {}, {}
    for r in chain:
        info = store.run_info(uri, r) or {}
        settings[r], run_dirs[r] = info.get("params", {}), info.get("tags", {}).get(rl.RUN_DIR)
        for row in store.members(uri, r).to_dict("records"):
            found = ancestry.scores_of({k: v for k, v in row.items() if isinstance(k, str) and isinstance(v, float)
                                        and not pd.isna(v)})
            if found:
                scores.setdefault(r, {})[row["member"]] = found
    return ancestry.record(member, run_id, lineage, population, settings, scores, run_dirs)


def ancestry_download(uri: str, run_id: str, member: str) -> None:
    """The member's whole ancestry record (YAML) as a download, as ``populora runs RUN --ancestry M`` writes it."""
    try:
        data = ancestry_record(uri, run_id, member)
    except KeyError:  # not in lineage.json yet (before the run's first checkpoint)
        return
    st.download_button("Download ancestry record (YAML)", yaml.safe_dump(data, sort_keys=False),
                       file_name=f"{member}-ancestry.yaml", mime="application/x-yaml", key=f"anc_{run_id}_{member}",
                       help=f"every ancestor of {member} up to the base: parents, operator, strength, ratings at "
                            "birth and death, the settings of each run; the CLI: populora runs RUN --ancestry M")


def notes(uri: str, run_id: str, tags: dict) -> None:
    """The run's notes: MLflow's run description (``mlflow.note.content``), editable here."""
    current = tags.get(rl.NOTE, "")
    text = st.text_area("notes (the MLflow run description)", current, key=f"note_{run_id}", height=68)
    if text != current and st.button("Save notes", key=f"note_save_{run_id}"):
        Tracker(uri).set_tags(run_id, {rl.NOTE: text})
        st.cache_data.clear()
        st.toast("notes saved")
