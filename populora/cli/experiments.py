"""``populora diff`` and ``populora runs RUN --ancestry MEMBER``: what differs between two runs or members, and a
member's whole ancestry as one record. No torch: they read the MLflow store (``populora.platform.store.ancestry``,
``populora.platform.store.settings_diff``; the UI shows the same)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import yaml

from populora.platform.store import ancestry, runlayout as rl
from populora.platform.store.settings_diff import render, settings_diff
from populora.platform.store.tracking import client, tracking_uri

# a record reads a few small JSON artifacts: no progress bar per download on the terminal
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")


def split_target(text: str, default_run: str | None = None) -> tuple[str, str | None]:
    """``RUN`` -> (RUN, None); ``RUN/S2`` -> (RUN, "S2"); ``/S2`` -> (default_run, "S2").

    >>> split_target("abc/S2"), split_target("abc"), split_target("/T1", "abc")
    (('abc', 'S2'), ('abc', None), ('abc', 'T1'))
    """
    run, _, member = text.partition("/")
    return (run or default_run or ""), (member or None)


def member_settings(cl, store: str, run_id: str, member: str | None) -> dict[str, str]:
    """What ``diff`` compares: the run's settings (its params, the flattened config); for a member also its own
    facts (``member.role``, ``.operator``, ``.strength``, ``.parents``, ``.born_step``, ``.generation``, ``.born_in``:
    the run of the fork chain it was born in)."""
    params = dict(cl.get_run(run_id).data.params)
    if member is None:
        return params
    lineage = rl.lineage_of(ancestry.artifact_or_none(store, run_id, rl.LINEAGE))
    population = rl.population_of(ancestry.artifact_or_none(store, run_id, rl.POPULATION_FILE))
    facts = ancestry.member_facts(member, lineage, population)
    own = {k: facts[k] for k in ("role", "generation", "operator", "strength", "born_step")}
    own["parents"] = ",".join(facts["parents"]) or "-"
    own["born_in"] = ancestry.born_in(member, lineage, run_id)  # a fork's member: the fork, or a parent run
    return params | {f"member.{k}": v for k, v in own.items()}


def _read(store: str, read):
    """(``read()``, None), or (None, the error line) where a run id or member is not in the store."""
    from mlflow.exceptions import MlflowException  # mlflow is loaded only when the store is read

    try:
        return read(), None
    except MlflowException as err:
        return None, f"error: {err.message[:160]} in {store}; list runs with: populora runs"
    except KeyError as err:
        return None, f"error: {err.args[0]}"


def diff(args) -> int:
    (run_a, member_a), store = split_target(args.a), tracking_uri()
    run_b, member_b = split_target(args.b, run_a)
    if (member_a is None) != (member_b is None):
        print("error: compare two runs (RUN_A RUN_B) or two members (RUN_A/M RUN_B/M), not a run with a member",
              file=sys.stderr)
        return 2
    cl = client()
    both, error = _read(store, lambda: (member_settings(cl, store, run_a, member_a),
                                        member_settings(cl, store, run_b, member_b)))
    if error:
        print(error, file=sys.stderr)
        return 2
    rows = settings_diff(*both)
    if args.json:
        print(json.dumps([{"setting": k, "a": va, "b": vb} for k, va, vb in rows]))
    else:
        print(render(rows, args.a, args.b if not args.b.startswith("/") else f"{run_a}{args.b}"))
    return 0


def ancestry_record(args) -> int:
    """``populora runs RUN --ancestry MEMBER [--json] [--out FILE]`` (YAML unless --json; ``--format json``, the
    older spelling, still works)."""
    if not args.run_id:
        print("error: --ancestry MEMBER needs the run: populora runs RUN_ID --ancestry MEMBER", file=sys.stderr)
        return 2
    store = tracking_uri()
    data, error = _read(store, lambda: ancestry.read(client(), store, args.run_id, args.ancestry))
    if error:
        print(error, file=sys.stderr)
        return 2
    text = dumps(data, "json" if getattr(args, "json", False) else args.format)
    if args.out:
        Path(args.out).write_text(text)
        print(f"ancestry of {args.ancestry} ({len(data['ancestors'])} members, {len(data['runs'])} run(s)) written to {args.out}")
    else:
        print(text, end="")
    return 0


def dumps(data: dict, fmt: str) -> str:
    """The record as JSON or YAML text (ends with a newline)."""
    return json.dumps(data, indent=2) + "\n" if fmt == "json" else yaml.safe_dump(data, sort_keys=False)
