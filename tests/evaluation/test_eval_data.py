"""Benchmark data and math grading (the start of the evaluation module, issue 5): the data dir is checked against
SHA256SUMS, and math-verify grades every benchmark's own reference answers correct and wrong answers wrong."""

import os
import shutil

import pytest
from conftest import cli_in_process

from populora.evaluation.harness import benchmarks as B
from populora.evaluation import estimate
from populora.evaluation.harness import math_grading as G

ROOT = B.data_dir()
pytestmark = pytest.mark.skipif(not (ROOT / B.CHECKSUMS).is_file(), reason=f"no benchmark data at {ROOT}")


def test_shared_data_matches_its_checksums():
    B.verify(ROOT, B.select("all"))


def test_a_corrupted_copy_is_named(tmp_path):
    copy = tmp_path / "bench"
    shutil.copytree(ROOT, copy)
    path = copy / B.BENCHMARKS["gsm8k"].file
    path.write_text(path.read_text().replace("Janet", "Jonet", 1))
    (copy / B.BENCHMARKS["aime24"].file).unlink()
    with pytest.raises(B.DataError) as err:
        B.verify(copy, B.select("math"))
    text = str(err.value)
    assert "gsm8k" in text and "does not match" in text and "aime24" in text and "missing" in text
    B.verify(copy, ["math500"])  # the intact ones still pass


def test_record_counts_equal_the_records_read(tmp_path):
    """``count_records`` (progress and lm-eval totals) against ``read_records`` on every benchmark file, then on a
    copy whose JSONL gets blank lines and loses records: the count follows the file, not what it counted before."""
    for name in B.BENCHMARKS:
        assert B.count_records(ROOT, name) == len(B.read_records(ROOT, name)), name
        assert B.count_records(ROOT, name, 3) == len(B.read_records(ROOT, name, 3)) == 3, name
    copy = tmp_path / "bench"
    path = copy / B.BENCHMARKS["gsm8k"].file
    path.parent.mkdir(parents=True)
    lines = (ROOT / B.BENCHMARKS["gsm8k"].file).read_text().splitlines()
    path.write_text("\n".join(lines[:5]) + "\n\n  \n")
    assert B.count_records(copy, "gsm8k") == len(B.read_records(copy, "gsm8k")) == 5
    path.write_text("\n".join(lines[:2]) + "\n\n" + lines[2] + "\n")  # rewritten: another size
    assert B.count_records(copy, "gsm8k") == len(B.read_records(copy, "gsm8k")) == 3
    assert B.count_records(copy, "gsm8k", 10) == 3
    with pytest.raises(B.DataError, match="aime24"):
        B.count_records(copy, "aime24")
    # the evaluation form's estimate counts through it: a missing or unreadable file is None, not an error
    assert (estimate.items(copy, "gsm8k", None), estimate.items(copy, "gsm8k", 2)) == (3, 2)
    assert estimate.items(copy, "aime24", None) is None
    lcb = copy / B.BENCHMARKS["livecodebench"].file
    lcb.parent.mkdir(parents=True)
    lcb.write_text('[{"a": 1}, ')  # a JSON list cut short
    assert estimate.items(copy, "livecodebench", None) is None
    lcb.write_text('[{"a": 1}, {"a": 2}]')
    assert estimate.items(copy, "livecodebench", None) == 2


def test_a_file_is_read_once_per_version(tmp_path):
    """``per_file_version``: one computation per file version and purpose, whatever path names the file; a file
    rewritten with the same size (only its mtime differs) is read again."""
    path = tmp_path / "data.jsonl"
    path.write_text("one\n")
    reads = []

    def read():
        reads.append(path.read_text())
        return reads[-1]

    assert B.per_file_version(path, "text", read) == "one\n"
    assert B.per_file_version(tmp_path / "." / "data.jsonl", "text", read) == "one\n"
    assert len(reads) == 1
    path.write_text("two\n")
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))  # a coarse clock may not have moved
    assert B.per_file_version(path, "text", read) == "two\n"
    assert B.per_file_version(path, "other purpose", read) == "two\n"
    assert len(reads) == 3
    with pytest.raises(FileNotFoundError):
        B.per_file_version(tmp_path / "missing", "text", read)


def test_missing_dir_and_checksums_say_what_is_expected(tmp_path):
    with pytest.raises(B.DataError, match="HumanEvalPlus-v0.1.10.jsonl.*SHA256SUMS"):
        B.verify(tmp_path / "nope", ["humaneval_plus"])
    with pytest.raises(B.DataError, match="SHA256SUMS is missing"):
        B.verify(tmp_path, ["gsm8k"])


def test_unknown_benchmark_lists_valid_names():
    with pytest.raises(B.DataError, match="valid: humaneval_plus.*olympiadbench"):
        B.select("gsm8k,hellaswag")
    assert B.select("math") == ["aime24", "aime25", "amc23", "math500", "minerva_math", "gsm8k", "olympiadbench"]


@pytest.mark.parametrize("name", B.GROUPS["math"])
def test_reference_answers_grade_correct_and_wrong_ones_wrong(name):
    records = B.read_records(ROOT, name, limit=120)  # a slice keeps CI fast
    golds = [G.gold_answer(name, r) for r in records]
    right = sum(G.grade(f"Reasoning...\nThe answer is \\boxed{{{g}}}.", g) for g in golds)
    assert right / len(golds) >= 0.99, name
    wrong = sum(G.grade("The answer is \\boxed{7919}", g) for g in golds if "7919" not in g)
    assert wrong == 0, name


def test_outputs_without_an_answer_score_zero_and_never_raise():
    assert G.grade("I do not know.", "18") is False
    assert G.grade("", "\\frac{1}{2}") is False
    assert G.grade("\\boxed{\\frac{1}{2", "\\frac{1}{2}") is False  # unbalanced
    assert G.grade("so she makes $18 a day", "18") is True       # last number
    assert G.grade("The answer is 0.5", "\\frac{1}{2}") is True


def test_cli_data_verify(tmp_path, capsys):
    code = cli_in_process("data", "verify", "--benchmarks", "math")
    assert code == 0 and capsys.readouterr().out.count("ok ") == 7
    code = cli_in_process("data", "verify", "--data-dir", str(tmp_path))
    assert code == 2 and "SHA256SUMS" in capsys.readouterr().err
