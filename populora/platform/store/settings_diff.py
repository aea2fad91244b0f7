"""Which settings differ between two runs or two members: one pure function, shared by ``populora diff``, the
fork's description and the UI's diff view (Runs, Compare).

Settings are flat ``{dotted key: value}`` mappings (a run's MLflow params are its flattened config); values are
compared as the text MLflow keeps, so a run logged as "1e-05" and one as "1e-05" are equal whatever the YAML.
"""

from __future__ import annotations

from typing import Any

MISSING = "(not set)"  # a key one side does not have (a setting added after the older run was logged)


def settings_diff(a: dict[str, Any], b: dict[str, Any], ignore: tuple[str, ...] = ()) -> list[tuple[str, Any, Any]]:
    """(key, value in a, value in b) of every key whose values differ, sorted by key; a key only one side has
    shows ``MISSING`` on the other. ``ignore``: keys left out (e.g. the run name).

    >>> settings_diff({"optim.lr": "1e-05", "steps": "4"}, {"optim.lr": "3e-05", "steps": "4", "seed": "1"})
    [('optim.lr', '1e-05', '3e-05'), ('seed', '(not set)', '1')]
    >>> settings_diff({"x": 1}, {"x": "1"})
    []
    """
    keys = sorted((set(a) | set(b)) - set(ignore))
    rows = [(k, a.get(k, MISSING), b.get(k, MISSING)) for k in keys]
    return [(k, va, vb) for k, va, vb in rows if _text(va) != _text(vb)]


def _text(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return ",".join(_text(v) for v in value)
    return str(value)


def render(rows: list[tuple[str, Any, Any]], label_a: str, label_b: str) -> str:
    """The diff as aligned text (``populora diff``); one line when nothing differs.

    >>> print(render([("optim.lr", "1e-05", "3e-05")], "run a", "run b"))
    setting   run a  run b
    optim.lr  1e-05  3e-05
    >>> render([], "a", "b")
    'no setting differs between a and b'
    """
    if not rows:
        return f"no setting differs between {label_a} and {label_b}"
    table = [("setting", label_a, label_b)] + [(k, _text(va), _text(vb)) for k, va, vb in rows]
    widths = [max(len(r[i]) for r in table) for i in range(3)]
    return "\n".join(f"{r[0]:{widths[0]}}  {r[1]:{widths[1]}}  {r[2]}".rstrip() for r in table)
