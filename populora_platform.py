"""The ``populora`` command's entry point, outside the ``populora`` package: it checks that ``import populora`` is
ours before anything else runs.

PopuLoRA's distribution on PyPI is ``populora-platform`` (``pip install populora-platform``); its import package and
its command are ``populora``. PyPI's ``populora`` is another project (an unofficial port of the paper's operators)
whose import package is also ``populora``: where both are installed, one shadows the other, or one's files
overwrite the other's in the same ``site-packages/populora/``. Without this check the command would fail deep in an
import (``No module named 'populora.cli'``, or the port's own dependencies missing); with it, one line says what
was found and how to fix it. Standard library only, so ``populora --help`` stays fast.
"""

from __future__ import annotations

import sys

DISTRIBUTION = "populora-platform"
OTHER = "populora"  # PyPI's unofficial port: same import name


def problem() -> str | None:
    """What is wrong with ``import populora`` here (None: it is this distribution's package)."""
    try:
        import populora
    except Exception as err:  # the port's __init__ (over ours, or shadowing it) needs einops, torch, ...
        why = f"importing it failed: {type(err).__name__}: {err}"
    else:
        if getattr(populora, "__distribution__", None) == DISTRIBUTION:
            return None
        why = f"it found another package ({getattr(populora, '__file__', None) or 'no __init__.py'})"
    return (f"`import populora` is not {DISTRIBUTION}'s package: {why}. PyPI's `{OTHER}` (another project, an "
            f"unofficial port of the PopuLoRA operators) uses the same import name{other_version()}. Fix: "
            f"`pip uninstall {OTHER} {DISTRIBUTION}`, then `pip install {DISTRIBUTION}` (or keep them in separate "
            "venvs), and check that no other `populora` is on PYTHONPATH")


def other_version() -> str:
    """`` and is installed here (0.4.5)`` when PyPI's ``populora`` distribution is installed, else ``""``."""
    from importlib import metadata

    try:
        return f" and is installed here ({metadata.version(OTHER)})"
    except metadata.PackageNotFoundError:
        return ""


def main() -> None:
    """The ``populora`` script: the check, then ``populora.cli.entry``."""
    message = problem()
    if message:
        print(f"error: {message}", file=sys.stderr)
        sys.exit(2)
    from populora.cli import entry

    entry()


if __name__ == "__main__":
    main()
