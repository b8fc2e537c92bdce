"""Results as data (tools.report.results): result files are written with their provenance, docs/results.md
and the README's results block are generated from benchmarks/results/*.json, and the committed copies are
not stale."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tools.errors import ParameterError
from tools.report import results

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
REGENERATE = "regenerate it: specpilot report --results benchmarks/results --out docs/results.md"

CPUINFO = """processor\t: 0
model name\t: AMD EPYC 9B14
flags\t\t: fpu sse2 avx2 fma avx512f avx512_bf16 avx512_vnni
"""


# ---------------------------------------------------------------------------- the committed pages
def test_the_committed_results_page_is_current():
    page = ROOT / "docs" / "results.md"
    assert page.is_file(), REGENERATE
    assert results.render_results(RESULTS, relative_to=ROOT / "docs") == page.read_text(encoding="utf-8"), \
        f"docs/results.md is stale: {REGENERATE}"


def test_the_readme_results_block_is_current():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert readme.count(results.README_BEGIN) == 1 and readme.count(results.README_END) == 1
    assert results.render_readme_block(RESULTS, relative_to=ROOT) in readme, f"README.md's results block is stale: {REGENERATE}"


def test_every_result_file_a_page_links_exists():
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for link in re.findall(r"\]\(([^)\s]+\.json)\)", page.read_text(encoding="utf-8")):
            assert (page.parent / link).resolve().is_file(), f"{page.name} links {link}, which does not exist"


def test_every_result_file_has_a_section():
    page = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    for path in RESULTS.glob("*.json"):
        assert f"(../benchmarks/results/{path.name})" in page


# ---------------------------------------------------------------------------- writing
def _suite_summary(speedup: float, tokens_per_step: float) -> dict:
    stats = {"prompts": 2, "speedup": speedup, "mean_accepted_per_step": tokens_per_step, "identical": 2, "compared": 2,
             "run_ids": ["r1", "r2"]}
    return {"categories": {"coding": {"draft": stats}, "qa": {"draft": {**stats, "prompts": 1}}},
            "overall": {"draft": stats}, "peers": {"overall": {}},
            "recommended": {"overall": {"method": "draft", "speedup": speedup}},
            "baseline_drift": {"prompts": 2, "mean": 0.05, "max": 0.1}}


def _save_suite(folder: Path, name: str, cpu: str, speedup: float, **kwargs) -> Path:
    hardware = {"name": f"{cpu} (2 cores, 2 threads, AVX2)", "cpu": cpu, "cpu_cores": 2, "isa": ["avx2"]}
    rows = [{"category": "coding", "question_id": 1, "method": "draft", "speedup": speedup, "tokens_per_step": 3.0,
             "matches_baseline": True}]
    return results.save_result(name, "suite", rows, _suite_summary(speedup, 3.0), hardware=hardware, dtype="float32",
                               threads=2, command=["specpilot", "bench", "--limit", "1"], folder=folder, **kwargs)


def test_save_result_writes_what_was_measured_and_where(tmp_path):
    path = _save_suite(tmp_path, "cpu-avx2_1", "AMD EPYC", 1.5, extra={"note": "x"})
    assert path == tmp_path / "cpu-avx2_1.json"
    data = json.loads(path.read_text())
    assert list(data) == ["name", "kind", "command", "commit", "date", "hardware", "dtype", "threads", "rows", "summary",
                          "extra"]
    assert (data["name"], data["kind"], data["command"], data["dtype"], data["threads"]) == (
        "cpu-avx2_1", "suite", "specpilot bench --limit 1", "float32", 2)
    assert data["commit"] is None or re.fullmatch(r"[0-9a-f]{40}", data["commit"])
    assert data["date"].endswith("+00:00")
    assert data["hardware"] == {"name": "AMD EPYC (2 cores, 2 threads, AVX2)", "cpu": "AMD EPYC", "cpu_cores": 2,
                                "isa": ["avx2"]}
    assert data["rows"][0]["speedup"] == 1.5 and data["extra"] == {"note": "x"}


def test_the_command_defaults_to_this_process_as_specpilot(tmp_path, monkeypatch):
    monkeypatch.setattr("sys.argv", ["/some/where/specpilot", "bench", "--prompts", "my prompts.jsonl"])
    path = results.save_result("x", "suite", [], {}, hardware={"name": "cpu"}, dtype=None, threads=None, folder=tmp_path)
    assert json.loads(path.read_text())["command"] == "specpilot bench --prompts 'my prompts.jsonl'"


@pytest.mark.parametrize("name", ["", "a b", "../up", "x.json", "a/b", "naïve"])
def test_a_name_that_is_not_a_plain_word_is_refused(tmp_path, name):
    with pytest.raises(ParameterError):
        results.save_result(name, "suite", [], {}, hardware={}, dtype=None, threads=None, folder=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_the_same_name_replaces_and_nothing_else_is_overwritten(tmp_path):
    _save_suite(tmp_path, "cpu", "AMD EPYC", 1.2)
    other = _save_suite(tmp_path, "other", "AMD EPYC", 1.1)
    _save_suite(tmp_path, "cpu", "AMD EPYC", 1.4)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cpu.json", "other.json"]
    assert json.loads((tmp_path / "cpu.json").read_text())["rows"][0]["speedup"] == 1.4
    assert json.loads(other.read_text())["rows"][0]["speedup"] == 1.1
    with pytest.raises(ParameterError, match="not 'vllm_sweep'"):
        results.save_result("cpu", "vllm_sweep", [], {}, hardware={}, dtype=None, threads=None, folder=tmp_path)
    with pytest.raises(ParameterError, match="only in case"):
        _save_suite(tmp_path, "CPU", "AMD EPYC", 1.0)
    assert json.loads((tmp_path / "cpu.json").read_text())["kind"] == "suite"


def test_the_isa_flags_come_from_cpuinfo():
    assert results.cpu_isa_flags(CPUINFO) == ["avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16"]
    assert results.cpu_isa_flags("processor : 0\n") == []
    assert results.widest_isa(results.cpu_isa_flags(CPUINFO)) == "AVX512-BF16"
    hw = results.result_hardware({"gpu": "NVIDIA H100", "cpu": "Xeon", "cpu_cores": 16, "isa": []})
    assert hw["name"] == "NVIDIA H100" and hw["gpu"] == "NVIDIA H100"
    assert isinstance(results.result_hardware({})["isa"], list)


def test_a_bench_result_is_saved_as_a_suite_with_its_rows(tmp_path):
    records = [{"run_id": "a1", "method": "draft", "category": "coding", "question_id": 7, "prompt_set": "eval.jsonl",
                "speedup": 1.8, "mean_accepted_per_step": 3.1, "matches_baseline": False,
                "first_divergence": {"kind": "near_tie", "position": 40},
                "peers": {"hf_assisted": {"speedup": 1.1, "wall_time_s": 2.0, "matches_baseline": True}}},
               {"run_id": "a2", "method": "ngram", "category": "coding", "question_id": 7, "prompt_set": "eval.jsonl",
                "speedup": 1.2, "peers": {"hf_assisted": {"speedup": 1.1, "wall_time_s": 2.0}}}]
    bench = {"task_id": 3, "prompt_set": "eval.jsonl", "prompts": 1, "methods": ["draft", "ngram"],
             "run_ids": ["a1", "a2"], "summary": _suite_summary(1.8, 3.1), "hardware": {"name": "Xeon (2 cores)"},
             "dtype": "bfloat16", "settings": {"threads": 2}, "params": {}, "versions": {}, "not_run": {}}
    path = results.save_bench_result("bench-x", bench, records, folder=tmp_path, command=["specpilot", "bench"])
    data = json.loads(path.read_text())
    assert data["kind"] == "suite" and data["dtype"] == "bfloat16" and data["threads"] == 2
    assert [(r["method"], r.get("peer", False)) for r in data["rows"]] == [
        ("draft", False), ("hf_assisted", True), ("ngram", False)]
    assert data["rows"][0]["divergence"] == "near_tie" and data["rows"][0]["run_id"] == "a1"
    assert "run_ids" not in json.dumps(data["summary"]) and data["extra"]["task_ids"] == [3]


# ---------------------------------------------------------------------------- rendering
def _sweep(folder: Path) -> Path:
    rows = [{"method": m, "k": k, "concurrency": c, "throughput_tok_s": t, "tpot_p50_ms": p, "itl_p99_ms": 30.0,
             "ttft_p50_ms": 50.0, "ttft_p99_ms": 90.0, "speedup": s, "acceptance_length": a, "matches_baseline": True}
            for m, k, c, t, p, s, a in [("baseline", None, 1, 60.0, 16.0, 1.0, None),
                                        ("baseline", None, 8, 400.0, 19.0, 1.0, None),
                                        ("ngram", 4, 1, 90.0, 11.0, 1.5, 2.1), ("ngram", 4, 8, 420.0, 18.0, 1.05, 2.0)]]
    return results.save_result("gpu-sweep", "vllm_sweep", rows, {"best_k": {"1": 4, "8": 4}},
                               hardware={"gpu": "NVIDIA H100 80GB HBM3", "cpu": "Xeon", "cpu_cores": 16, "isa": []},
                               dtype="bfloat16", threads=None, command=["python", "benchmarks/scripts/gpu_vllm.py"],
                               folder=folder)


def test_the_page_has_a_section_per_file_naming_machine_and_dtype(tmp_path):
    folder = tmp_path / "benchmarks" / "results"
    _save_suite(folder, "epyc", "AMD EPYC", 1.5)
    _save_suite(folder, "xeon", "Intel Xeon", 2.1)
    _sweep(folder)
    (folder / "old_probe.json").write_text('{"command": "python benchmarks/x.py", "machine": "2-core CPU", "k": 1}')
    (folder / "old_rows.json").write_text('{"a": 1}\n{"a": 2}\n')
    page = results.render_results(folder)
    assert page == results.render_results(folder), "the same files give the same page"
    for name in ("epyc", "xeon", "gpu-sweep", "old_probe", "old_rows"):
        assert f"[{name}.json](../benchmarks/results/{name}.json)" in page
    assert "## epyc (suite, AMD EPYC (2 cores, 2 threads, AVX2), float32)" in page
    assert "## gpu-sweep (vLLM sweep, NVIDIA H100 80GB HBM3, bfloat16)" in page
    assert "| ngram | 4 | 8 | 420.00 | 18.00 | 30.00 | 50.00 | 90.00 | 1.05x | 2.000 | identical |" in page
    assert "![throughput against TPOT p50" in page and "(results-gpu-sweep.png)" in page
    assert "- best_k: " in page
    assert "- machine: 2-core CPU" in page and "- 2 rows; their keys: `a`" in page
    # one table over several machines has the machine column on every row, each row linking its file
    latest = page.split("## Latest result per machine", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in latest.splitlines() if line.startswith("| ") and not line.startswith("| machine")]
    assert rows and all(re.match(r"\| (AMD EPYC|Intel Xeon|NVIDIA H100)", r) for r in rows)
    assert all(re.search(r"\[[\w-]+\]\(\.\./benchmarks/results/[\w-]+\.json\) \|$", r) for r in rows)


def test_the_readme_block_takes_the_newest_result_per_machine(tmp_path):
    folder = tmp_path / "benchmarks" / "results"
    _save_suite(folder, "epyc-old", "AMD EPYC", 1.1)
    newer = json.loads(_save_suite(folder, "epyc-new", "AMD EPYC", 1.6).read_text())
    old = json.loads((folder / "epyc-old.json").read_text())
    old["date"], newer["date"] = "2026-01-01T00:00:00+00:00", "2026-06-01T00:00:00+00:00"
    (folder / "epyc-old.json").write_text(json.dumps(old))
    (folder / "epyc-new.json").write_text(json.dumps(newer))
    _save_suite(folder, "xeon", "Intel Xeon", 2.0)
    block = results.render_readme_block(folder, relative_to=tmp_path)
    assert block.startswith(results.README_BEGIN) and block.endswith(results.README_END)
    assert "[epyc-new](benchmarks/results/epyc-new.json)" in block and "epyc-old" not in block
    assert "| AMD EPYC (2 cores, 2 threads, AVX2) | float32 | draft | 1.60x | 3.00 | 2 prompts, total time |" in block
    assert "| Intel Xeon (2 cores, 2 threads, AVX2) | float32 | draft | 2.00x |" in block
    empty = results.render_readme_block(tmp_path / "nothing", relative_to=tmp_path)
    assert "No suite result is stored yet" in empty and "--save-result NAME" in empty
    _save_suite(folder, "epyc-self", "AMD EPYC", 1.2, extra={"settings": {"draft": "qwen2.5-coder-1.5b-instruct"}})
    block = results.render_readme_block(folder, relative_to=tmp_path)  # another draft: another experiment, kept
    assert "[epyc-new]" in block and "2 prompts, total time, draft qwen2.5-coder-1.5b-instruct | [epyc-self]" in block


def test_the_report_command_writes_the_page_the_chart_and_the_readme_block(tmp_path):
    from agent.cli.main import main

    folder = tmp_path / "benchmarks" / "results"
    _sweep(folder)
    _save_suite(folder, "epyc", "AMD EPYC", 1.5)
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\nbefore\n{results.README_BEGIN}\nold\n{results.README_END}\nafter\n")
    out = tmp_path / "docs" / "results.md"
    assert main(["report", "--results", str(folder), "--out", str(out)]) == 0
    assert out.read_text() == results.render_results(folder, relative_to=out.parent)
    assert (out.parent / "results-gpu-sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = readme.read_text()
    assert text.startswith("# x\n\nbefore\n") and text.endswith("\nafter\n") and "old" not in text
    assert results.render_readme_block(folder, relative_to=tmp_path) in text


def test_a_readme_without_the_block_is_refused():
    with pytest.raises(ParameterError, match="no results block"):
        results.fill_readme("# nothing here\n", "block")


def test_the_fit_and_eval_halves_are_two_results_and_no_machine_folder_is_stored(tmp_path):
    folder = tmp_path / "benchmarks" / "results"
    root = results.checkout_root()
    assert root is not None
    for name, half, speedup in (("fit", "spec_bench_fit", 2.0), ("eval", "spec_bench_eval", 1.8)):
        bench = {"task_id": 1, "prompt_set": str(root / "prompts" / f"{half}.jsonl"), "prompts": 2,
                 "methods": ["draft"], "run_ids": [], "summary": _suite_summary(speedup, 3.0),
                 "hardware": {"name": "Xeon (2 cores)", "cpu": "Xeon"}, "dtype": "bfloat16", "settings": {},
                 "params": {}, "versions": {}, "not_run": {}}
        path = results.save_bench_result(name, bench, [], folder=folder, command=["specpilot", "bench"])
        assert json.loads(path.read_text())["extra"]["prompt_set"] == f"prompts/{half}.jsonl"
    block = results.render_readme_block(folder, relative_to=tmp_path)
    assert "2 prompts of spec_bench_fit, total time | [fit]" in block
    assert "2 prompts of spec_bench_eval, total time | [eval]" in block
    assert results.portable_path("/elsewhere/my_prompts.jsonl") == "my_prompts.jsonl"


# ---------------------------------------------------------------------------- what the page may replace
def _results_tree(tmp_path: Path) -> tuple[Path, Path]:
    """A folder of results (a sweep and a suite) and where its page would go."""
    folder = tmp_path / "proj" / "mydata" / "results"
    _sweep(folder)
    _save_suite(folder, "epyc", "AMD EPYC", 1.5)
    return folder, tmp_path / "proj" / "docs" / "results.md"


def test_without_out_only_this_checkouts_results_get_the_default_page(tmp_path, monkeypatch, capsys):
    from agent.cli import eval as cli_eval
    from agent.cli.main import main

    folder, page = _results_tree(tmp_path)
    page.parent.mkdir(parents=True)
    page.write_text("MY OWN NOTES\n")
    assert main(["report", "--results", str(folder)]) == 2
    assert "--out PAGE.md" in capsys.readouterr().err and page.read_text() == "MY OWN NOTES\n"
    asked = []
    monkeypatch.setattr(cli_eval, "write_results_docs", lambda *a: asked.append(a) or {"charts": [], "results": []})
    assert main(["report", "--results", str(RESULTS)]) == 0  # nothing written: the arguments are checked
    assert asked == [(RESULTS, ROOT / "docs" / "results.md", ROOT / "README.md")]


def test_a_page_is_replaced_only_when_it_was_generated(tmp_path):
    folder, page = _results_tree(tmp_path)
    page.parent.mkdir(parents=True)
    page.write_text("MY OWN NOTES\n")
    with pytest.raises(ParameterError, match="was not generated by specpilot"):
        results.write_results_docs(folder, page)
    assert sorted(p.name for p in page.parent.iterdir()) == ["results.md"] and page.read_text() == "MY OWN NOTES\n"
    page.unlink()
    first = results.write_results_docs(folder, page)
    assert results.GENERATED_MARK in page.read_text()
    assert results.write_results_docs(folder, page) == first  # a generated page and its chart are regenerated
    assert page.read_text() == results.render_results(folder, relative_to=page.parent)


def test_a_chart_the_page_does_not_link_is_never_replaced(tmp_path):
    folder, page = _results_tree(tmp_path)
    chart = page.parent / "results-gpu-sweep.png"
    chart.parent.mkdir(parents=True)
    chart.write_text("precious")
    with pytest.raises(ParameterError, match="results-gpu-sweep.png exists already"):
        results.write_results_docs(folder, page)
    assert chart.read_text() == "precious" and not page.exists()


def test_an_empty_or_bad_results_folder_is_refused_before_anything_is_written(tmp_path):
    folder, page = _results_tree(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ParameterError, match="holds no result files"):
        results.write_results_docs(empty, page)
    (folder / "a.json").write_text("{bad")
    with pytest.raises(ParameterError, match=f"result file {folder / 'a.json'} is not valid JSON"):
        results.write_results_docs(folder, page)
    (folder / "a.json").write_bytes(b'{"x": "\xff"}')
    with pytest.raises(ParameterError, match=f"result file {folder / 'a.json'} cannot be read: it is not UTF-8"):
        results.write_results_docs(folder, page)
    assert not page.parent.exists()


def test_the_readme_is_checked_before_anything_is_written(tmp_path):
    folder, page = _results_tree(tmp_path)
    readme = tmp_path / "R.md"
    for content, error in ((None, "cannot read the README .*No such file"), (b"# \xff\n", "not UTF-8"),
                           (b"# no block\n", "R.md: the README has no results block")):
        if content is not None:
            readme.write_bytes(content)
        with pytest.raises(ParameterError, match=error):
            results.write_results_docs(folder, page, readme)
        assert not page.parent.exists()


def test_a_bad_out_is_one_clear_sentence(tmp_path, capsys):
    from agent.cli.main import main

    folder, _ = _results_tree(tmp_path)
    afile = tmp_path / "afile"
    afile.write_text("x")
    with pytest.raises(ParameterError, match=f"{afile} is a file, not a folder"):
        results.write_results_docs(folder, afile / "results.md")
    with pytest.raises(ParameterError, match=f"{tmp_path} is a folder"):
        results.write_results_docs(folder, tmp_path)
    assert main(["report", "--results", str(folder), "--out", ""]) == 2
    assert "error: --out is empty" in capsys.readouterr().err and afile.read_text() == "x"
