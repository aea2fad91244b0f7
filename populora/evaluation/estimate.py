"""What an evaluation will generate, before it runs: the Compare/Runs evaluation form shows it beside its button.

Rows are generations (items x samples per target), tokens the most new tokens they may take (the protocol's
budget per benchmark, or ``generation.max_new_tokens``); time comes from the pace of an earlier evaluation on this
machine (generated rows per second over a whole job), which the caller measures and passes in: the model, device
and batching of that job differ, so it is a rough figure and said to be one.
"""

from __future__ import annotations

from pathlib import Path

from populora.evaluation.harness import benchmarks, protocol


def items(root: Path, name: str, limit: int | None) -> int | None:
    """Items of benchmark ``name`` the evaluation takes (its first ``limit``); None if its file is missing or
    unreadable."""
    try:
        return benchmarks.count_records(root, name, limit)
    except benchmarks.DataError:
        return None


def size(spec: str, limit: int | None, n_targets: int, model, protocol_name: str | None = None,
         max_new_tokens: int | None = None, samples: int = 1, root: Path | None = None) -> dict:
    """{"rows", "tokens", "missing"}: generations and the most new tokens of ``n_targets`` targets on the benchmarks
    ``spec`` names (``benchmarks.select``), and the benchmarks whose data is missing (not counted).
    ``model`` needs ``base`` and ``tiny_random`` (the protocol's default depends on them)."""
    root = root or benchmarks.data_dir()
    proto = protocol.resolve(protocol_name, model, max_new_tokens=max_new_tokens)
    rows = tokens = 0
    missing = []
    for name in benchmarks.select(spec):
        n = items(root, name, limit)
        if n is None:
            missing.append(name)
            continue
        rows += n * samples * n_targets
        tokens += n * samples * n_targets * proto.budget(name)
    return {"rows": rows, "tokens": tokens, "missing": missing, "protocol": proto.name}


def pace(rows: list[dict]) -> float | None:
    """Generated rows per second of one evaluation job, from its ``progress`` rows (``items``, ``started``,
    ``updated``): all rows over the wall time from its first pair's start to its last update (batched pairs run
    at the same time, so per-pair times would overcount). None without a measured row.

    >>> pace([{"items": 10, "started": 100.0, "updated": 110.0}, {"items": 10, "started": 100.0, "updated": 110.0}])
    2.0
    """
    timed = [r for r in rows if r.get("items") and r.get("started") and r.get("updated")]
    if not timed:
        return None
    wall = max(r["updated"] for r in timed) - min(r["started"] for r in timed)
    return sum(r["items"] for r in timed) / wall if wall > 0 else None
