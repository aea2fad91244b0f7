"""``populora figures``: the paper's figure set of a run (and its baseline) or of a sweep (each arm's mean over
seeds with a band), as PNG, SVG and PDF with CSV/JSON numbers and captions (``training.paper_figures``)."""

from __future__ import annotations

from pathlib import Path

from populora.platform.store.tracking import client as tracking_client
from populora.training.measures.paper_figures import FiguresError, figure_set

BAD_INPUT = (FiguresError,)


def figures(args) -> int:
    out = Path(args.out or (f"figures/{args.sweep}" if args.sweep else f"figures/{args.run}"))
    formats = tuple(f.strip() for f in args.formats.split(",") if f.strip())
    paths = figure_set(tracking_client(args.uri), out, run_id=args.run, sweep_id=args.sweep, baseline=args.baseline,
                       formats=formats, x=args.x)
    pngs = [p for p in paths if p.suffix == ".csv"]
    print(f"{len(pngs)} figures ({', '.join(formats)}, csv) in {out}; captions and equal-volume table: {out / 'captions.md'}")
    return 0


COMMANDS = {"figures": figures}
