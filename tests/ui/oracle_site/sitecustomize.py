"""Tests only: puts the oracle backend (tests/evaluation/oracle_backend.py) under ``populora eval`` in every Python
process started with ``POPULORA_TEST_ORACLE`` set, so an evaluation launched from the web UI (a background job)
scores known answers. The browser test puts this folder on PYTHONPATH of the UI server it starts; the jobs the UI
launches inherit it.

``POPULORA_TEST_ORACLE``: ``<adapter>=<mode>,...`` with the adapter dir's name (a member id: T0, S1, B0) or
``base`` for the bare base model; a mode is the oracle's (reference, rewritten, wrong, truncated), or
``<mode>@<benchmark>``: that mode on one benchmark, wrong on the others. Unlisted adapters answer wrong.
``POPULORA_TEST_ORACLE_BENCHMARKS``: the benchmarks the oracle must know, comma-separated.
"""

import os

try:  # the suite's own start-up file, which this one shadows (tests/subprocess_site)
    import scratch_sqlite
except ImportError:
    pass
else:
    scratch_sqlite.install()

if os.environ.get("POPULORA_TEST_ORACLE"):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "evaluation"))
    import oracle_backend

    from populora.evaluation.harness import benchmarks
    from populora.evaluation import evaluate

    MODES = dict(pair.split("=", 1) for pair in os.environ["POPULORA_TEST_ORACLE"].split(","))

    class ByMember(oracle_backend.OracleBackend):
        """The oracle with its answer mode chosen by member id (the adapter dir's name) and benchmark."""

        def add_adapter(self, name, from_dir=None, **_):
            self.modes[name] = MODES.get(Path(from_dir).name, "wrong")

        def answer(self, prompt, mode):
            if "@" in mode:
                mode, only = mode.split("@", 1)
                mode = mode if self.find(prompt)[0] == only else "wrong"
            return super().answer(prompt, mode)

    def oracle_factory(model, device, kind="multilora", lora=None):
        names = os.environ["POPULORA_TEST_ORACLE_BENCHMARKS"].split(",")
        return lambda: ByMember(benchmarks.data_dir(), names, base_mode=MODES.get("base", "wrong"))

    evaluate.backend_factory = oracle_factory
