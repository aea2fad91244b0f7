"""The de-quantised copy of a GGUF file is keyed by the file's content: every venv (and every clone's venvs) holds
its own copy of the embedded model's file, and they share one de-quantised copy."""

import hashlib
import os
import shutil

from populora.platform.model import models
from populora.platform.model.models import ModelSource


def source(path):
    return ModelSource(str(path.parent), path.name)


def test_copies_of_one_gguf_file_share_a_cache_and_a_changed_file_gets_its_own(tmp_path, monkeypatch):
    monkeypatch.setenv("POPULORA_CACHE_DIR", str(tmp_path / "cache"))
    a, b = tmp_path / "venv1" / "m.gguf", tmp_path / "venv2" / "m.gguf"
    a.parent.mkdir()
    b.parent.mkdir()
    a.write_bytes(b"GGUF" + bytes(range(256)) * 64)
    shutil.copy(a, b)                                    # another venv's copy: another path and mtime
    os.utime(b, (1, 1))
    assert models.gguf_cache(source(a)) == models.gguf_cache(source(b))
    assert models.gguf_cache(source(a)).parent == tmp_path / "cache" / "gguf"
    assert models.tokenizer_cache(source(a)) == models.tokenizer_cache(source(b))

    b.write_bytes(b"GGUF" + bytes(range(256)) * 63)      # the file changed (a new mtime): hashed again
    assert models.gguf_cache(source(a)) != models.gguf_cache(source(b))


def test_a_remembered_digest_is_reused_and_a_torn_one_is_not(tmp_path, monkeypatch):
    monkeypatch.setenv("POPULORA_CACHE_DIR", str(tmp_path / "cache"))
    f = tmp_path / "m.gguf"
    f.write_bytes(b"x" * 1000)
    first = models.file_digest(f)
    assert first == hashlib.sha256(b"x" * 1000).hexdigest()
    (memo,) = (tmp_path / "cache" / "digests").iterdir()
    assert memo.read_text() == first
    memo.write_text("0" * 64)                            # what is remembered is what is used (the file is not re-read)
    assert models.file_digest(f) == "0" * 64
    memo.write_text("0" * 10)                            # not a whole digest: hashed again, and remembered right
    assert models.file_digest(f) == first and memo.read_text() == first
