"""Per-operator evolution statistics on a training run's parent: metric names (``evolution/<operator>/<stat>``,
written by training at each evolution) and the table that ``populora report --run`` and the Lineage page show.

Stats, each cumulative over the run up to that step:
  children       children the operator made
  judged         of them, those that have faced an evolution since their birth
  survival       share of the judged that survived their first evolution
  rating_change  mean over its children (alive 1+ steps) of the child's mu change minus its first parent's over
                 the same steps (the child's life, to now or its replacement)
  kl             mean functional distance parent -> child at birth (mean KL of next-token distributions, probe)
  seconds        mean time the operator took to make a child
"""

from __future__ import annotations

import math

PREFIX = "evolution/"
STATS = ("children", "judged", "survival", "rating_change", "kl", "seconds")


def key(operator: str, stat: str) -> str:
    """The metric name of one operator's statistic.

    >>> key("gaussian", "kl")
    'evolution/gaussian/kl'
    """
    return f"{PREFIX}{operator}/{stat}"


def rows(metrics: dict[str, float]) -> list[dict]:
    """One row per operator found in a run's (latest) metrics, most children first.

    >>> rows({"evolution/mask/children": 2, "evolution/mask/kl": 0.01, "evolution/replaced": 2, "rating/games": 3})
    [{'operator': 'mask', 'children': 2, 'judged': None, 'survival': None, 'rating_change': None, 'kl': 0.01, 'seconds': None}]
    """
    found: dict[str, dict] = {}
    for k, v in metrics.items():
        parts = k.split("/")
        if len(parts) == 3 and parts[0] + "/" == PREFIX and parts[2] in STATS:
            found.setdefault(parts[1], {"operator": parts[1], **{s: None for s in STATS}})[parts[2]] = v
    for r in found.values():
        for s in ("children", "judged"):
            r[s] = None if r[s] is None else int(r[s])
    return sorted(found.values(), key=lambda r: (-(r["children"] or 0), r["operator"]))


def _fmt(value, spec: str) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


def text(table: list[dict]) -> str:
    """The table as aligned text (the terminal and the markdown report)."""
    head = f"{'operator':16} {'children':>8} {'judged':>6} {'survival':>8} {'rating change':>13} {'KL':>9} {'seconds':>8}"
    lines = [head]
    for r in table:
        lines.append(f"{r['operator']:16} {_fmt(r['children'], 'd'):>8} {_fmt(r['judged'], 'd'):>6} "
                     f"{_fmt(r['survival'], '.2f'):>8} {_fmt(r['rating_change'], '+.2f'):>13} "
                     f"{_fmt(r['kl'], '.2e'):>9} {_fmt(r['seconds'], '.3f'):>8}")
    return "\n".join(lines)


def section(client, run_id: str) -> str:
    """The per-operator table of a training run's parent (its latest metrics) under a heading, or "" when the run
    logged none (no evolution yet, or a run from before per-operator statistics)."""
    table = rows(client.get_run(run_id).data.metrics)
    if not table:
        return ""
    return ("evolution operators (children made; judged = faced an evolution since birth; survival of its first; "
            "rating change vs its parent's over its life; KL parent -> child on the probe prompts):\n" + text(table) + "\n")
