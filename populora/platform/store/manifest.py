"""A directory's manifest: every file's size and CRC-32, written last, so a reader can tell a complete, intact
directory (a checkpoint) from one a full disk, a crash or a bad copy truncated or changed.

CRC-32 (zlib, standard library) because the threat is damage, not an adversary: it catches every truncation (the
size is checked first) and any burst error of up to 32 bits, and misses a random change with probability 2^-32.
It runs at ~3.4 GB/s on this machine's CPU (sha256 1.7 GB/s, blake2b 0.9 GB/s), and the manifest is computed
while the files are still in the page cache, in the same pass that fsyncs them: a paper-scale checkpoint of
~8 GB costs ~2.5 s against a 517 s step. Verifying reads every file once more (from disk, at resume only).
"""

from __future__ import annotations

import json
import os
import zlib
from pathlib import Path

NAME = "manifest.json"
FORMAT = "populora-manifest/1"
CHUNK = 1 << 20


def file_crc(path: Path, fsync: bool = False) -> tuple[int, str]:
    """(bytes, CRC-32 as 8 hex digits) of one file, read in 1 MiB chunks; ``fsync``: on disk before returning."""
    crc, size = 0, 0
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK):
            crc, size = zlib.crc32(chunk, crc), size + len(chunk)
        if fsync:
            os.fsync(fh.fileno())
    return size, f"{crc:08x}"


def write(directory: Path, fsync: bool = True) -> dict:
    """Checksum every file under ``directory`` (fsyncing each, then the manifest) and write ``manifest.json``
    there, last. Returns the manifest."""
    files = {}
    for f in sorted(p for p in directory.rglob("*") if p.is_file() and p.name != NAME):
        size, crc = file_crc(f, fsync=fsync)
        files[f.relative_to(directory).as_posix()] = {"bytes": size, "crc32": crc}
    manifest = {"format": FORMAT, "checksum": "crc32", "total_bytes": sum(v["bytes"] for v in files.values()), "files": files}
    with open(directory / NAME, "w") as fh:
        fh.write(json.dumps(manifest, indent=0))
        if fsync:
            fh.flush()
            os.fsync(fh.fileno())
    return manifest


def read(directory: Path) -> dict | None:
    """The manifest of ``directory``; None if it has none; ValueError if it is unreadable."""
    path = directory / NAME
    if not path.is_file():
        return None
    try:
        manifest = json.loads(path.read_text())
        if manifest.get("format") != FORMAT or not isinstance(manifest.get("files"), dict):
            raise ValueError(f"not a {FORMAT} manifest")
    except (ValueError, UnicodeDecodeError) as err:
        raise ValueError(f"its {NAME} is unreadable ({err})") from None
    return manifest


def check(directory: Path, manifest: dict) -> str | None:
    """What is wrong with ``directory`` against its manifest (the first file that is missing, of another size,
    or of another checksum), None if every file matches."""
    for rel, want in manifest["files"].items():
        f = directory / rel
        if not f.is_file():
            return f"{rel} is missing"
        size = f.stat().st_size
        if size != want["bytes"]:
            return f"{rel} is {size} bytes, its manifest says {want['bytes']}"
        _, crc = file_crc(f)
        if crc != want["crc32"]:
            return f"{rel} does not match its checksum (CRC-32 {crc}, its manifest says {want['crc32']})"
    return None
