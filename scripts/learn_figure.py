"""Draw ``populora bench learn --model embedded``'s learning curve from its ``learn.json``: each role's mean reward
per step (left) and the held-out panel's solve rate, base model vs trained students, with 95% intervals (right).

    .venv/bin/python scripts/learn_figure.py runs/learn-embedded/learn.json docs/figures/learn-embedded.png
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)
import numpy as np  # noqa: E402


def draw(data: dict, path: Path) -> None:
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8), gridspec_kw={"width_ratios": [2, 1]})
    for role, colour in (("student", "tab:blue"), ("teacher", "tab:orange")):
        curve = np.asarray(data[role]["curve"], dtype=float)
        steps = np.arange(1, len(curve) + 1)
        seen = np.isfinite(curve)  # a step without that role's rollouts (no valid task to answer) is left out
        left.plot(steps[seen], curve[seen], "o", ms=4, color=colour, alpha=0.7,
                  label=f"{role} reward ({int((~seen).sum())} step(s) without rollouts)")
        w = data["window"]
        if len(curve) >= w:  # the running mean over the window the start and end are read over
            with np.errstate(all="ignore"):
                run = np.array([np.nanmean(curve[i:i + w]) if seen[i:i + w].any() else np.nan
                                for i in range(len(curve) - w + 1)])
            left.plot(steps[w - 1:], run, "-", lw=2, color=colour, label=f"{role}, mean of the last {w} steps")
    left.set_xlabel("training step")
    left.set_ylabel("mean reward of the step's rollouts")
    left.axhline(0, color="grey", lw=0.5)
    left.legend(fontsize=7, loc="best")
    s = data["settings"]
    left.set_title(f"{data['preset']}: lr {s['lr']:g}, T {s['temperature']:g}, {s['rollouts']} rollouts, "
                   f"{s['tasks_per_teacher']} tasks/teacher", fontsize=9)
    rates = data["solve_rate"]
    labels = ["base", f"trained\n(step {data['steps']})"]
    values = [rates["base"]["value"], rates["trained"]["value"]]
    lows = [v - rates[a]["ci95"][0] for v, a in zip(values, ("base", "trained"))]
    highs = [rates[a]["ci95"][1] - v for v, a in zip(values, ("base", "trained"))]
    right.bar([0, 1], values, yerr=[lows, highs], capsize=6, color=["grey", "tab:blue"], alpha=0.8)
    right.set_xticks([0, 1], labels)
    right.set_ylabel("held-out panel solve rate (95% interval)")
    d, ab = rates["difference"], data["ability"]["trained"]
    right.set_title(f"{data['tasks']} tasks: difference {d['value']:+.3f} [{d['ci95'][0]:+.3f}, {d['ci95'][1]:+.3f}]\n"
                    f"ability {ab['value']:+.2f} [{ab['ci95'][0]:+.2f}, {ab['ci95'][1]:+.2f}] (base 0)", fontsize=9)
    right.set_ylim(0, max(0.05, min(1.0, max(v + h for v, h in zip(values, highs)) * 1.2)))
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("learn_json", type=Path, help="bench learn --model embedded's learn.json (in its --out)")
    p.add_argument("png", type=Path, help="where the figure goes")
    args = p.parse_args(argv)
    draw(json.loads(args.learn_json.read_text()), args.png)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
