"""``populora data fetch`` up to the network (downloads served from the local copy, one of them corrupted), the
report table's rows, averages and call-outs, and ``populora bench eval`` (tiny model; the embedded one is slow)."""

import gzip
import json

import pytest

from populora.evaluation.harness import benchmarks as B
from populora.evaluation.harness import fetch
from populora.evaluation import report

ROOT = B.data_dir()
needs_data = pytest.mark.skipif(not (ROOT / B.CHECKSUMS).is_file(), reason=f"no benchmark data at {ROOT}")


@needs_data
def test_pinned_digests_match_the_data_dirs_sha256sums():
    assert set(fetch.sha256sums_text().splitlines()) == set((ROOT / B.CHECKSUMS).read_text().splitlines())
    assert set(fetch.SOURCES) == set(B.BENCHMARKS)
    assert all(u.startswith("https://") for urls, _, _ in fetch.SOURCES.values() for u in urls)


def _local_downloader(corrupt: str | None = None, offline: tuple[str, ...] = ()):
    """Serve each pinned URL from the local copy (gzipped where the source is), as the network would."""
    by_url = {u: n for n, (urls, _, _) in fetch.SOURCES.items() for u in urls}

    def download(url):
        name = by_url[url]
        if name in offline:
            raise OSError("network is unreachable")
        data = (ROOT / B.BENCHMARKS[name].file).read_bytes()
        if name == corrupt:
            data = data.replace(b"a", b"b", 1)
        return gzip.compress(data) if fetch.SOURCES[name][1] else data
    return download


@needs_data
def test_fetch_writes_checked_files_into_the_cache(tmp_path):
    names = ["humaneval_plus", "aime24", "gsm8k"]
    logs = []
    root = fetch.fetch(tmp_path / "cache", names, download=_local_downloader(), log=logs.append)
    B.verify(root, names)
    assert (root / B.CHECKSUMS).is_file() and sum(line.startswith("got") for line in logs) == 3
    fetch.fetch(root, names, download=_local_downloader(offline=tuple(names)), log=logs.append)  # cached: no network
    assert sum(line.startswith("ok") for line in logs) == 3


@needs_data
def test_fetch_refuses_a_corrupt_or_missing_download(tmp_path):
    with pytest.raises(B.DataError, match="gsm8k: .* does not match its SHA256"):
        fetch.fetch(tmp_path, ["aime24", "gsm8k"], download=_local_downloader(corrupt="gsm8k"), log=lambda m: None)
    with pytest.raises(B.DataError, match="amc23: download failed .*unreachable"):
        fetch.fetch(tmp_path, ["amc23"], download=_local_downloader(offline=("amc23",)), log=lambda m: None)


def test_data_fetch_cli_reports_a_network_failure(tmp_path, monkeypatch, capsys):
    from populora.evaluation.cli import data_main

    def no_network(url, timeout_s=60.0):
        raise OSError("no route to host")

    monkeypatch.setattr(fetch, "_download", no_network)
    assert data_main(["fetch", "--cache-dir", str(tmp_path), "--benchmarks", "aime25"]) == 2
    assert "aime25: download failed" in capsys.readouterr().err


def _results(scores: dict[str, dict[str, float]], kinds: dict[str, str]) -> dict:
    return {"results": {t: {b: {"score": v} for b, v in per.items()} for t, per in scores.items()},
            "targets": {t: {"kind": k} for t, k in kinds.items()}}


def test_report_rows_averages_and_call_outs():
    scores = {"T0": {"humaneval_plus": 0.5, "gsm8k": 0.2}, "S0": {"humaneval_plus": 0.3, "gsm8k": 0.1},
              "baseline (B0)": {"humaneval_plus": 0.35, "gsm8k": 0.25}, "base model": {"humaneval_plus": 0.1, "gsm8k": 0.05}}
    kinds = {"T0": "member", "S0": "member", "baseline (B0)": "baseline", "base model": "base"}
    t = report.build(_results(scores, kinds))
    labels = [r[0] for r in t.rows]
    # no samples files: the weakest / best member is chosen on the problems it is scored on, and says so
    assert labels == ["T0", "S0", "population mean", "weakest member (S0, selected on the same problems: biased)", "best member (T0, selected on the same problems: biased)",
                      "baseline (B0)", "base model"]
    mean = report.row_averages(t.rows[2])
    assert t.rows[2][1] == pytest.approx(0.4) and mean["code avg"] == pytest.approx(0.4) and mean["math avg"] == pytest.approx(0.15)
    assert mean["overall"] == pytest.approx(0.275)  # overall = mean of the benchmarks scored
    assert mean["math avg (AZR)"] is None and mean["total (AZR)"] is None  # GSM8K is not in AZR's math avg
    assert t.deltas[0] == ("population mean vs baseline: code avg (= AZR) +5.0 pts, math avg (1 of 7 incl. GSM8K) -10.0 pts, "
                           "overall (mean of 2) -2.5 pts; AZR's definitions: math avg (6) n/a, total n/a")
    assert t.deltas[1].startswith("weakest member vs baseline: code avg (= AZR) -5.0 pts")
    md = report.markdown(t)
    assert "| population mean | 40.0 |" in md and "LiveCodeBench 2408-2501 (public tests)" in md
    assert "selected on the same problems it is scored on: biased" in md and "total (AZR) = (code avg" in md
    csv_header = report.csv_text(t).splitlines()[0]
    assert csv_header.startswith("adapter,HumanEval+,MBPP+,LiveCodeBench 2408-2501 (public tests),AIME24")
    assert csv_header.endswith(",code avg (= AZR),math avg (7 incl. GSM8K),overall (mean of 10),math avg (AZR: 6 no GSM8K),total (AZR),tokens/adapter")


def test_summary_rows_are_over_the_final_population():
    """A member replaced by evolution keeps its row, marked, but the mean / weakest / best are the survivors'."""
    scores = {"T0": {"gsm8k": 0.0}, "T2": {"gsm8k": 0.4}, "S2": {"gsm8k": 0.2}, "baseline (B0)": {"gsm8k": 0.1}}
    results = _results(scores, {"T0": "member", "T2": "member", "S2": "member", "baseline (B0)": "baseline"})
    results["targets"]["T0"]["alive"] = "false"
    results["targets"]["T2"]["alive"] = results["targets"]["S2"]["alive"] = "true"
    t = report.build(results)
    assert [r[0] for r in t.rows] == ["T0 (retired)", "T2", "S2", "population mean", "weakest member (S2, selected on the same problems: biased)",
                                      "best member (T2, selected on the same problems: biased)", "baseline (B0)"]
    assert report.row_averages(t.rows[3])["math avg"] == pytest.approx(0.3)  # math avg of the survivors only
    assert t.deltas[1] == ("weakest member vs baseline: code avg (= AZR) n/a, math avg (1 of 7 incl. GSM8K) +10.0 pts, "
                           "overall (mean of 1) +10.0 pts; AZR's definitions: math avg (6) n/a, total n/a")


def test_report_without_baseline_says_how_to_get_one():
    t = report.build(_results({"T0": {"gsm8k": 0.2}}, {"T0": "member"}))
    assert "--baseline RUN_ID" in t.deltas[0]
    assert json.dumps(report.csv_text(t))  # printable


@needs_data
def test_bench_eval_prints_rates(capsys):
    from populora.evaluation.cli import bench_eval_main

    assert bench_eval_main(["--tiny-random", "--n", "2", "--max-new-tokens", "8", "--json"]) == 0
    figures = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    for key in ("gen_code_samples_per_s", "gen_math_samples_per_s", "score_humaneval_plus_samples_per_s",
                "score_mbpp_plus_samples_per_s", "score_livecodebench_samples_per_s", "score_math_samples_per_s"):
        assert figures[key] > 0, key


@needs_data
def test_bench_eval_targets_times_both_paths_side_by_side(capsys):
    from populora.evaluation.cli import bench_eval_main

    assert bench_eval_main(["--tiny-random", "--targets", "3", "--n", "2", "--max-new-tokens", "4", "--json"]) == 0
    figures = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert figures["targets"] == 3 and figures["problems"] == 2 and figures["identical"] is True
    assert figures["sequential_s"] > 0 and figures["batched_s"] > 0
    assert abs(figures["ratio"] - figures["batched_s"] / figures["sequential_s"]) < 0.01  # both printed rounded
    assert figures["merged_generate_calls"] == 1  # 3 targets x 2 problems: one mixed-adapter batch


@pytest.mark.slow
@needs_data
def test_embedded_model_evaluates_an_adapter(tmp_path, capsys):
    """The real embedded model (SmolLM2-135M-Instruct): one adapter, two GSM8K items and one HumanEval+ item."""
    from populora.evaluation.cli import eval_main
    from populora.platform.backends import LoraSpec, PeftBackend
    from populora.platform.model.models import load_base, resolve_source

    model, tok = load_base(resolve_source("embedded"), device="cpu")
    backend = PeftBackend(model, tok, LoraSpec())
    backend.add_adapter("A", seed=0)
    path = backend.save_adapter("A", tmp_path / "A")
    argv = ["--adapter", str(path), "--benchmarks", "humaneval_plus,gsm8k", "--limit", "2", "--max-new-tokens", "64",
            "--out", str(tmp_path / "eval"), "--device", "cpu"]
    assert eval_main(argv) == 0
    data = json.loads((tmp_path / "eval" / "results.json").read_text())
    assert set(data["results"]) == {"A", "base model"}
    # B = 0 in a fresh adapter: greedy outputs and scores equal the base model's, as a fair harness must give
    assert data["results"]["A"] == {k: {**v, "seconds": data["results"]["A"][k]["seconds"],
                                        "samples_file": data["results"]["A"][k]["samples_file"]}
                                    for k, v in data["results"]["base model"].items()}
    samples = (tmp_path / "eval" / "samples" / "A" / "gsm8k.jsonl").read_text().splitlines()
    assert len(samples) == 2 and all(json.loads(s)["completion"].strip() for s in samples)


def test_report_shows_per_adapter_compute_beside_each_row():
    scores = {"T0": {"gsm8k": 0.2}, "S0": {"gsm8k": 0.1}, "baseline (B0)": {"gsm8k": 0.25}, "base model": {"gsm8k": 0.05}}
    results = _results(scores, {"T0": "member", "S0": "member", "baseline (B0)": "baseline", "base model": "base"})
    results["targets"]["T0"].update(compute_tokens=100.0, run_compute_tokens_per_adapter=220.0)
    results["targets"]["S0"].update(compute_tokens=340.0, run_compute_tokens_per_adapter=220.0)
    results["targets"]["baseline (B0)"].update(compute_tokens=200.0)
    t = report.build(results)
    by_label = dict(zip([r[0] for r in t.rows], t.compute))
    assert by_label == {"T0": 100.0, "S0": 340.0, "population mean": 220.0, "weakest member (S0, selected on the same problems: biased)": 340.0,
                        "best member (T0, selected on the same problems: biased)": 100.0, "baseline (B0)": 200.0, "base model": None}
    assert t.deltas[-1] == ("compute per adapter: not compute-matched: the baseline spent 0.91x the population's "
                           "per-adapter compute (200 vs 220 generated + trained tokens)")
    mean_line = next(line for line in report.markdown(t).splitlines() if line.startswith("| population mean |"))
    assert mean_line.endswith("| 15.0 | 220 |")  # overall (GSM8K and HumanEval+), no AZR math: no AZR columns; tokens/adapter
    assert report.csv_text(t).splitlines()[0].endswith(",overall (mean of 10),math avg (AZR: 6 no GSM8K),total (AZR),tokens/adapter")
    tokens = next(x for x in report.text(t).splitlines() if x.startswith("tokens/adapter"))
    assert tokens.split() == ["tokens/adapter", "100", "340", "220", "340", "100", "200", "-"]  # T0 S0 mean weakest best baseline base


def _with_samples(tmp_path, verdicts: dict[str, list[int]], kinds: dict[str, str], limit=None) -> dict:
    """A results.json whose targets answered gsm8k problems with the given verdicts (samples files on disk)."""
    results = {}
    for label, oks in verdicts.items():
        path = tmp_path / f"{label.replace(' ', '_')}.jsonl"
        path.write_text("".join(json.dumps({"task_id": f"gsm8k/{i}", "correct": bool(ok)}) + "\n" for i, ok in enumerate(oks)))
        results[label] = {"gsm8k": {"score": sum(oks) / len(oks), "n": len(oks), "samples_file": str(path)}}
    return {"results": results, "targets": {t: {"kind": k} for t, k in kinds.items()}, "config": {"limit": limit}}


def test_weakest_and_best_rows_are_cross_fitted_from_the_samples_files(tmp_path):
    # half A = problems 0, 2; half B = 1, 3. S0 is weakest on A (0 of 2), S1 on B (0 of 2); each is scored on the
    # other half, where it solved 1 of 2: 50%, not the 25% both score on all four (what the same-problems pick reads)
    verdicts = {"S0": [0, 1, 0, 0], "S1": [0, 0, 1, 0], "S2": [1, 1, 1, 1], "baseline (B0)": [1, 0, 0, 0]}
    kinds = {"S0": "member", "S1": "member", "S2": "member", "baseline (B0)": "baseline"}
    results = _with_samples(tmp_path, verdicts, kinds, limit=4)
    results["targets"]["S0"]["compute_tokens"], results["targets"]["S1"]["compute_tokens"] = 100.0, 300.0
    t = report.build(results)
    rows = {r[0]: r for r in t.rows}
    weakest = "weakest member (cross-fit: S0 chosen on half A, S1 chosen on half B)"
    gsm8k = t.header.index("GSM8K")
    assert rows[weakest][gsm8k] == pytest.approx(0.5)
    assert rows["best member (S2, cross-fit)"][gsm8k] == pytest.approx(1.0)
    assert dict(zip([r[0] for r in t.rows], t.compute))[weakest] == pytest.approx(200.0)  # the two members' mean
    md = report.markdown(t)
    assert "Weakest / best member: cross-fit." in md and "biased" not in md.split("Weakest / best member")[0]
    assert md.startswith("Scored: GSM8K, 4 problems (--limit 4: the first 4 of each benchmark, not comparable with "
                         "full-benchmark scores).")
    assert report.text(t).startswith("GSM8K, 4 problems (--limit 4")


def test_targets_on_different_n_are_flagged_and_missing_samples_fall_back(tmp_path):
    results = _with_samples(tmp_path, {"S0": [0, 1], "S1": [1, 1, 0], "baseline (B0)": [1, 0]},
                            {"S0": "member", "S1": "member", "baseline (B0)": "baseline"})
    t = report.build(results)  # members on different problems: no cross-fit possible, the biased pick says so
    assert "weakest member (S0, selected on the same problems: biased)" in [r[0] for r in t.rows]
    assert "n per benchmark differs between targets (not comparable): GSM8K 2 / 3" in t.notes
    assert not any(n.startswith("--limit") for n in t.notes)
