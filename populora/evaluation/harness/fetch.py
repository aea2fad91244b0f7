"""``populora data verify|fetch``: check the benchmark files, or download them from their public homes.

Each file is pinned to a commit of its public source (the table in the data README) and to its SHA256 (the
same digests as the data dir's SHA256SUMS, shipped here so a user's machine needs nothing else). ``fetch``
downloads into a cache dir (default ``~/.cache/populora/benchmarks``, which ``populora eval`` then finds on its
own), writes SHA256SUMS there and refuses to keep a file whose digest differs.
"""

from __future__ import annotations

import argparse
import gzip
import os
import sys
import urllib.request
from pathlib import Path

from populora.evaluation.harness import benchmarks

RAW = "https://raw.githubusercontent.com"
AZR = f"{RAW}/LeapLabTHU/Absolute-Zero-Reasoner/a82124e514e27692aa9860c5ee21dbf9d81e3bc5/evaluation"
# name -> (urls tried in order, gzipped?, sha256 of the unpacked file)
SOURCES: dict[str, tuple[tuple[str, ...], bool, str]] = {
    "humaneval_plus": ((f"{RAW}/evalplus/humanevalplus_release/200defce9e3429d28ca215b6dd061c0f7f31c18b/HumanEvalPlus.jsonl.gz",
                        "https://github.com/evalplus/humanevalplus_release/releases/download/v0.1.10/HumanEvalPlus.jsonl.gz"),
                       True, "42526ec0e7d5f3ee0b06d6ced98f8c8bae3d76519151bfb3d36f79010645bd7f"),
    "mbpp_plus": ((f"{AZR}/code_eval/data/MbppPlus.jsonl",), False,
                  "b54e762755248ca411b523c917fa9f93c07b5ff2966bf60b3917b853926a3dad"),
    "livecodebench": ((f"{RAW}/winnieyangwannan/rllm/5255304e87b07e6e81e7c61d9dac3e4f160ec6a9/rllm/data/test/code/livecodebench.json",),
                      False, "b94212d8c882d7ff99ebde702d0a3319e5c94440faed6ae8984cd850f29a6cd6"),
    "aime24": ((f"{AZR}/math_eval/eval/data/aime24/test.jsonl",), False, "af2b8bd2aa911b6333ad0df32f3ca05c7ae8ed10f1731f4372c8ae26990bf7ac"),
    "aime25": ((f"{AZR}/math_eval/eval/data/aime25/test.jsonl",), False, "20c1ca392758d96bd1e28af15d9f30df5660257927cacc9eac7301c29f677d1a"),
    "amc23": ((f"{AZR}/math_eval/eval/data/amc23/test.jsonl",), False, "43707e1ca784602d8479de24ee8ce36609dbebc46dd152b0b12a46611aa898a4"),
    "math500": ((f"{AZR}/math_eval/eval/data/math500/test.jsonl",), False, "35dc41080a3680858b27fa7e0533d2d547825316fc5dafe5d316f4ccc5a06132"),
    "minerva_math": ((f"{AZR}/math_eval/eval/data/minerva_math/test.jsonl",), False, "0e656b430d3a0a1dab6aa853f453ba3805e28e2cabe4fc72486a897cc09d8ba2"),
    "gsm8k": ((f"{RAW}/openai/grade-school-math/3101c7d5072418e28b9008a6636bde82a006892c/grade_school_math/data/test.jsonl",),
              False, "3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14"),
    "olympiadbench": ((f"{AZR}/math_eval/eval/data/olympiadbench/test.jsonl",), False, "bb8c1e38a16ea9eacb77530315a674d883f267fbff79183effc53681b4fcc416"),
}


def sha256sums_text() -> str:
    """SHA256SUMS in ``sha256sum -c`` format, the same lines as the shared data dir's."""
    return "".join(f"{SOURCES[n][2]}  ./{benchmarks.BENCHMARKS[n].file}\n" for n in benchmarks.BENCHMARKS)


def _download(url: str, timeout_s: float = 60.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout_s) as resp:  # noqa: S310 - fixed https URLs above
        return resp.read()


def fetch(cache_dir: Path, names: list[str], download=None, log=print) -> Path:
    """Download ``names`` into ``cache_dir`` (skipping files already there with the right digest); verify all.
    ``download(url) -> bytes`` defaults to an HTTPS GET (tests serve local files instead)."""
    download = download or _download
    cache_dir.mkdir(parents=True, exist_ok=True)
    (cache_dir / benchmarks.CHECKSUMS).write_text(sha256sums_text())
    problems = []
    for n in names:
        urls, gz, digest = SOURCES[n]
        path = cache_dir / benchmarks.BENCHMARKS[n].file
        if path.is_file() and benchmarks.sha256(path) == digest:
            log(f"ok   {n:15} already in {path}")
            continue
        errors = []
        for url in urls:
            try:
                data = download(url)
                data = gzip.decompress(data) if gz else data
                break
            except Exception as err:  # noqa: BLE001 - try the next mirror, report all at the end
                errors.append(f"{url}: {err}")
        else:
            problems.append(f"{n}: download failed ({'; '.join(errors)})")
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.part")
        tmp.write_bytes(data)
        os.replace(tmp, path)
        log(f"got  {n:15} {len(data) / 1e6:.1f} MB -> {path}")
    if problems:
        raise benchmarks.DataError("could not fetch:\n  " + "\n  ".join(problems))
    benchmarks.verify(cache_dir, names)  # a file that does not match its pinned SHA256 is an error, never used
    return cache_dir


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="populora data", description="benchmark data: verify the data dir, or fetch it")
    sub = p.add_subparsers(dest="command", required=True)
    v = sub.add_parser("verify", help="check the benchmark files against SHA256SUMS")
    v.add_argument("--data-dir", help="default: $POPULORA_DATA_DIR, else ../shared/data/benchmarks, else the fetch cache")
    f = sub.add_parser("fetch", help="download the benchmark files from their public sources and check them")
    f.add_argument("--cache-dir", help=f"default: {benchmarks.fetch_cache()}")
    for s in (v, f):
        s.add_argument("--benchmarks", default="all", help="names, or the groups code, math, all")
    args = p.parse_args(argv)
    try:
        names = benchmarks.select(args.benchmarks)
        if args.command == "fetch":
            root = fetch(Path(args.cache_dir) if args.cache_dir else benchmarks.fetch_cache(), names)
        else:
            root = benchmarks.data_dir(args.data_dir)
            benchmarks.verify(root, names)
    except benchmarks.DataError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for n in names:
        print(f"ok  {benchmarks.BENCHMARKS[n].label:30} {root / benchmarks.BENCHMARKS[n].file}")
    return 0
