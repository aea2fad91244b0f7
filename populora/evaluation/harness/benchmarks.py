"""The ten benchmarks: names, groups, where their files live, and checking those files against SHA256SUMS.

The data dir is never part of the project: ``--data-dir``, else ``$POPULORA_DATA_DIR``, else
``../shared/data/benchmarks`` next to the project root (the layout of this project's CI).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from populora.platform.model.cache import cache_root

PROJECT_ROOT = Path(__file__).resolve().parents[3]
CHECKSUMS = "SHA256SUMS"


class DataError(ValueError):
    """Benchmark data is missing, corrupt or unreadable; the message names the files and how to fix it."""


@dataclass(frozen=True)
class Benchmark:
    name: str
    group: str       # code | math
    file: str        # relative to the data dir
    label: str       # how tables show it


BENCHMARKS = {b.name: b for b in [
    Benchmark("humaneval_plus", "code", "humaneval_plus/HumanEvalPlus-v0.1.10.jsonl", "HumanEval+"),
    Benchmark("mbpp_plus", "code", "mbpp_plus/MbppPlus-v0.2.0.jsonl", "MBPP+"),
    Benchmark("livecodebench", "code", "livecodebench_public/livecodebench_2408_2501_public_tests.json", "LiveCodeBench 2408-2501 (public tests)"),
    Benchmark("aime24", "math", "aime24/test.jsonl", "AIME24"),
    Benchmark("aime25", "math", "aime25/test.jsonl", "AIME25"),
    Benchmark("amc23", "math", "amc23/test.jsonl", "AMC23"),
    Benchmark("math500", "math", "math500/test.jsonl", "MATH-500"),
    Benchmark("minerva_math", "math", "minerva_math/test.jsonl", "Minerva Math"),
    Benchmark("gsm8k", "math", "gsm8k/test.jsonl", "GSM8K"),
    Benchmark("olympiadbench", "math", "olympiadbench/test.jsonl", "OlympiadBench"),
]}
GROUPS = {"code": [n for n, b in BENCHMARKS.items() if b.group == "code"],
          "math": [n for n, b in BENCHMARKS.items() if b.group == "math"],
          "all": list(BENCHMARKS)}


AZR_MATH = ("aime24", "aime25", "amc23", "math500", "minerva_math", "olympiadbench")  # AZR's math avg: no GSM8K
def select(spec: str) -> list[str]:
    """``"code"``, ``"math"``, ``"all"`` or comma-separated names -> benchmark names, in the canonical order.

    >>> select("gsm8k,code")
    ['humaneval_plus', 'mbpp_plus', 'livecodebench', 'gsm8k']
    """
    wanted: set[str] = set()
    for part in (p.strip() for p in spec.split(",") if p.strip()):
        if part in GROUPS:
            wanted.update(GROUPS[part])
        elif part in BENCHMARKS:
            wanted.add(part)
        else:
            raise DataError(f"unknown benchmark {part!r}; valid: {', '.join(BENCHMARKS)} or the groups code, math, all")
    if not wanted:
        raise DataError("no benchmark selected; name some, or use code, math, all")
    return [n for n in BENCHMARKS if n in wanted]


def fetch_cache() -> Path:
    """Where ``populora data fetch`` puts the files by default."""
    return cache_root() / "benchmarks"


def data_dir(explicit: str | Path | None = None) -> Path:
    """``--data-dir``, else ``$POPULORA_DATA_DIR``, else ``../shared/data/benchmarks`` from the project root, else
    (a user's machine, where there is no ../shared) the ``populora data fetch`` cache."""
    if explicit or os.environ.get("POPULORA_DATA_DIR"):
        return Path(explicit or os.environ["POPULORA_DATA_DIR"])
    shared = PROJECT_ROOT.parent / "shared" / "data" / "benchmarks"
    cache = fetch_cache()
    return cache if not shared.is_dir() and (cache / CHECKSUMS).is_file() else shared


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def expected_checksums(root: Path) -> dict[str, str]:
    sums = root / CHECKSUMS
    if not sums.is_file():
        raise DataError(f"{sums} is missing: the data dir must hold the benchmark files and their {CHECKSUMS} "
                        f"(point --data-dir or POPULORA_DATA_DIR at it)")
    out = {}
    for line in sums.read_text().splitlines():
        if line.strip():
            digest, name = line.split(maxsplit=1)
            out[name.strip().removeprefix("./")] = digest
    return out


def verify(root: Path, names: list[str]) -> None:
    """Check the selected benchmarks' files exist and match SHA256SUMS; one error lists every problem."""
    if not root.is_dir():
        expected = ", ".join(BENCHMARKS[n].file for n in names)
        raise DataError(f"benchmark data dir {root} does not exist; it must hold {expected} and {CHECKSUMS} "
                        f"(set --data-dir or POPULORA_DATA_DIR, or download them: populora data fetch)")
    sums = expected_checksums(root)
    problems = []
    for n in names:
        rel = BENCHMARKS[n].file
        path = root / rel
        if not path.is_file():
            problems.append(f"{n}: {path} is missing")
        elif rel not in sums:
            problems.append(f"{n}: {rel} has no line in {root / CHECKSUMS}")
        elif sha256(path) != sums[rel]:
            problems.append(f"{n}: {path} does not match its SHA256 in {CHECKSUMS} (corrupt or a different version)")
    if problems:
        raise DataError("benchmark data problems:\n  " + "\n  ".join(problems))


def read_records(root: Path, name: str, limit: int | None = None) -> list[dict]:
    """The raw records of one benchmark file (JSONL, or a JSON list for LiveCodeBench)."""
    path = root / BENCHMARKS[name].file
    try:
        if path.suffix == ".json":
            records = json.loads(path.read_text())
        else:
            records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except (OSError, json.JSONDecodeError) as err:
        raise DataError(f"cannot read {path}: {err}") from err
    return records[:limit] if limit else records


T = TypeVar("T")
_PER_FILE: dict[tuple[str, str, int, int], object] = {}
_PER_FILE_LOCK = threading.RLock()  # re-entrant: a compute may read another file through it


def per_file_version(path: Path, what: str, compute: Callable[[], T]) -> T:
    """``compute()``, kept for this process per version of the file ``path`` (its resolved path, size and mtime) and
    ``what`` it computes: a file that changes is read again, one that does not is read once. The value is shared: the
    caller never changes it. ``compute`` runs under one lock (a second caller of the same key waits for the first
    rather than computing it again; EvalPlus's loaders also read process-wide settings, see evalplus_suite)."""
    path = path.resolve()
    stat = path.stat()
    key = (what, str(path), stat.st_size, stat.st_mtime_ns)
    with _PER_FILE_LOCK:
        if key not in _PER_FILE:
            _PER_FILE[key] = compute()
        return _PER_FILE[key]  # type: ignore[return-value]


def count_records(root: Path, name: str, limit: int | None = None) -> int:
    """``len(read_records(root, name, limit))`` without decoding every record: a JSONL file's non-blank lines (split
    as ``read_records`` splits them; a JSON list is decoded), kept per file version (``per_file_version``). An
    evaluation asks it for every (target, benchmark) pair's progress and at every write of lm-eval's totals, and the
    evaluation form for its estimate: decoding HumanEval+'s 7.7 MB cost 0.35 s of CPU each time (MBPP+ 0.2 s). A
    line that is not JSON is counted; ``read_records``, which every scorer reads its problems with, refuses the
    file."""
    path = root / BENCHMARKS[name].file

    def count() -> int:
        if path.suffix == ".json":
            return len(read_records(root, name))
        return sum(1 for line in path.read_text().splitlines() if line.strip())

    try:
        n = per_file_version(path, "records", count)
    except OSError as err:
        raise DataError(f"cannot read {path}: {err}") from err
    return min(n, limit) if limit else n
