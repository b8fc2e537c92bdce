"""specpilot report: Markdown with run ids, settings, hardware and versions; valid PNG charts; JSON with
every digit; runs chosen by id, task or the newest task."""

from __future__ import annotations

import argparse
import json

import pytest
from PIL import Image

from memory import Store
from tools.bench.compare import CompareInput, compare
from tools.errors import ParameterError
from tools.report.markdown import acceptance_by_position, select_runs, speedup_rows, write_report


def fake_run(method, category=None, base=(2.0, 2.2), times=(1.0, 1.1), drafted=(10, 8, 5), accepted=(8, 5, 2),
             **extra):
    return {"method": method, "target": "tiny", "prompt": f"prompt {category}", "category": category,
            "settings": {"max_new_tokens": 16, "temperature": 0.0}, "new_tokens": 16, "steps": 7,
            "wall_time_s": times[0], "baseline_wall_time_s": base[0], "speedup": base[0] / times[0],
            "times": list(times), "baseline_times": list(base), "tokens_per_s": 16 / times[0],
            "acceptance_rate": sum(accepted) / sum(drafted), "mean_accepted_per_step": 2.0,
            "drafted_by_position": list(drafted), "accepted_by_position": list(accepted),
            "matches_baseline": True, "first_divergence": None, "dtype": "float32", "repeats": len(times),
            "hardware": {"name": "Test CPU (2 cores)", "cpu_cores": 2}, "versions": {"torch": "test"}, **extra}


def store_fake_bench(store) -> tuple[int, list[str]]:
    task_id = store.create_task("bench draft, ngram", "bench", ["q1 draft"])
    ids = []
    for category in ("coding", "writing"):
        for method in ("draft", "ngram"):
            ids.append(store.add_run(fake_run(method, category, task_id=task_id,
                                              peers={"hf_prompt_lookup": {"wall_time_s": 1.5, "times": [1.5, 1.6]}})))
    return task_id, ids


def assert_png(path):
    with Image.open(path) as image:
        image.verify()
    with Image.open(path) as image:
        assert image.format == "PNG" and image.size[0] > 300 and image.size[1] > 200


def test_markdown_report_names_every_run_and_its_charts_are_valid_pngs(tmp_path):
    store = Store()
    task_id, ids = store_fake_bench(store)
    runs, task = select_runs(store, task_id=task_id)
    result = write_report(runs, fmt="md", out=tmp_path / "out", task=task)
    text = open(result["markdown"]).read()
    for run_id in ids:
        assert run_id in text
    for heading in ("## Settings", "## Hardware", "## Versions", "## Runs", "## Charts"):
        assert heading in text
    assert "Test CPU (2 cores)" in text and "torch: test" in text and "max_new_tokens: 16" in text
    assert "| coding | draft | 1 | 2.00x |" in text  # per-category, pooled from the stored times
    assert "Recommended (the fastest lossless method faster than plain decoding): coding draft 2.00x;" in text
    assert "differed by 10% on average and 10% at most (2 prompts)" in text  # the baseline's own noise
    assert set(result["charts"]) == {"speedup", "acceptance", "categories"}
    for path in result["charts"].values():
        assert_png(path)
        assert f"({path.rsplit('/', 1)[-1]})" in text  # linked beside the Markdown


def test_a_comparison_report_recommends_the_fastest_lossless_method_or_plain_decoding(tmp_path):
    store = Store()
    task_id = store.create_task("compare", "compare", [])
    store.add_run(fake_run("draft", task_id=task_id))
    store.add_run(fake_run("ngram", task_id=task_id, times=(0.5, 0.6), matches_baseline=False,
                           first_divergence={"kind": "mismatch", "position": 3}))
    runs, task = select_runs(store, task_id=task_id)
    text = open(write_report(runs, fmt="md", out=tmp_path / "a", task=task)["markdown"]).read()
    assert "for this prompt (the fastest lossless method faster than plain decoding): draft 2.00x." in text
    slow = store.create_task("compare", "compare", [])
    store.add_run(fake_run("draft", task_id=slow, times=(3.0, 3.1)))
    runs, task = select_runs(store, task_id=slow)
    text = open(write_report(runs, fmt="md", out=tmp_path / "b", task=task)["markdown"]).read()
    assert "plain decoding (no method was both faster than plain decoding and lossless here)." in text


def test_chart_data_come_from_the_stored_figures():
    runs = [fake_run("draft", base=(2.0, 3.0), times=(1.0, 2.0)), fake_run("draft", base=(4.0,), times=(1.0,))]
    rows = {r["label"]: r for r in speedup_rows(runs)}
    assert rows["draft"]["speedup"] == (2.0 + 4.0) / (1.0 + 1.0)  # pooled over the runs' median times
    assert rows["draft"]["min"] == 1.5 and rows["draft"]["max"] == 4.0  # per-repeat baseline/method ratios
    points = acceptance_by_position(runs)["draft"]
    assert points == [(1, 16 / 20, 20), (2, 10 / 16, 16), (3, 4 / 10, 10)]


def test_json_report_keeps_every_digit_and_png_only_writes_charts(tmp_path):
    store = Store()
    task_id, ids = store_fake_bench(store)
    runs, task = select_runs(store, run_ids=ids[:2])
    assert task["id"] == task_id
    result = write_report(runs, fmt="json", out=tmp_path / "r.json", task=task)
    data = json.loads(open(result["json"]).read())
    assert [r["run_id"] for r in data["runs"]] == ids[:2]
    assert data["runs"][0]["speedup"] == store.get_run(ids[0])["speedup"]
    charts = write_report(runs, fmt="png", out=tmp_path / "charts")
    assert "markdown" not in charts and charts["charts"]
    for path in charts["charts"].values():
        assert_png(path)
    with pytest.raises(ParameterError, match="format"):
        write_report(runs, fmt="pdf")
    with pytest.raises(ParameterError, match="one way"):
        select_runs(store, run_ids=ids[:1], task_id=task_id)


def test_last_reports_the_newest_task_in_the_order_it_was_asked(tiny_model_dir, capsys):
    from agent.cli.eval import add_eval_commands

    with pytest.raises(ParameterError, match="no stored runs"):
        select_runs(Store(), last=True)
    result = compare(CompareInput(prompt="def x", methods=["ngram", "baseline", "draft"], target=str(tiny_model_dir),
                                  draft=str(tiny_model_dir), max_new_tokens=6, chat=False, dtype="float32"))
    runs, task = select_runs(Store(), last=True)
    assert task["id"] == result["task_id"] and [r["method"] for r in runs] == ["ngram", "baseline", "draft"]

    parser = argparse.ArgumentParser()
    add_eval_commands(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["report", "--json"])
    assert args.func(args) == 0
    written = json.loads(capsys.readouterr().out)
    assert sorted(written["run_ids"]) == sorted(result["run_ids"])
    assert "/reports/" in written["markdown"]  # default: the user's own specpilot folder
    text = open(written["markdown"]).read()
    assert all(run_id in text for run_id in result["run_ids"]) and "## Hardware" in text
    for path in written["charts"].values():
        assert_png(path)


def test_reports_never_share_a_name_nor_write_through_a_planted_file(tmp_path):
    store = Store()
    task_id, _ = store_fake_bench(store)
    runs, task = select_runs(store, task_id=task_id)
    first = write_report(runs, fmt="json", out=tmp_path, task=task)
    second = write_report(runs, fmt="json", out=tmp_path, task=task)  # the same second: two files
    assert first["json"] != second["json"]
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    (tmp_path / "planted.md").symlink_to(victim)
    with pytest.raises(ParameterError, match="exists already"):
        write_report(runs, fmt="md", out=tmp_path / "planted.md", task=task)
    assert victim.read_text() == "keep me"


@pytest.mark.parametrize("fmt, planted", [("md", "mine-speedup.png"), ("md", "mine-serving.png"),
                                          ("png", "mine-acceptance.png"), ("md", "mine.md")])
def test_a_report_replaces_no_file_charts_included_and_writes_nothing_on_a_clash(tmp_path, fmt, planted):
    store = Store()
    task_id, _ = store_fake_bench(store)
    runs, task = select_runs(store, task_id=task_id)
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / planted).write_text("precious")
    with pytest.raises(ParameterError, match=f"{planted} exists already; a report never replaces a file"):
        write_report(runs, fmt=fmt, out=folder / f"mine.{fmt}", task=task)
    assert [p.name for p in folder.iterdir()] == [planted] and (folder / planted).read_text() == "precious"


def test_a_chart_is_never_written_through_a_symlink(tmp_path):
    store = Store()
    task_id, _ = store_fake_bench(store)
    runs, task = select_runs(store, task_id=task_id)
    victim = tmp_path / "victim.png"
    victim.write_text("keep me")
    (tmp_path / "r-acceptance.png").symlink_to(victim)
    with pytest.raises(ParameterError, match="exists already"):
        write_report(runs, fmt="png", out=tmp_path / "r.png", task=task)
    assert victim.read_text() == "keep me" and not (tmp_path / "r-speedup.png").exists()


def test_a_failed_write_leaves_no_half_report(tmp_path, monkeypatch):
    from tools.report import markdown

    store = Store()
    task_id, _ = store_fake_bench(store)
    runs, task = select_runs(store, task_id=task_id)
    real = markdown.write_new

    def full_disk(path, data):
        if path.suffix == ".md":
            raise ParameterError(f"cannot write {path}: No space left on device")
        real(path, data)

    monkeypatch.setattr(markdown, "write_new", full_disk)
    with pytest.raises(ParameterError, match="No space left"):
        write_report(runs, fmt="md", out=tmp_path / "out" / "r.md", task=task)
    assert list((tmp_path / "out").iterdir()) == []


def test_a_bad_out_is_one_clear_sentence(tmp_path, capsys):
    from agent.cli.main import main

    store = Store()
    task_id, _ = store_fake_bench(store)
    runs, task = select_runs(store, task_id=task_id)
    afile = tmp_path / "afile"
    afile.write_text("x")
    with pytest.raises(ParameterError, match=f"{afile} is a file, not a folder"):
        write_report(runs, fmt="md", out=afile / "r.md", task=task)
    with pytest.raises(ParameterError, match="cannot create the folder"):
        write_report(runs, fmt="md", out=afile / "sub" / "r.md", task=task)
    with pytest.raises(ParameterError, match="--out is empty"):
        write_report(runs, fmt="md", out="", task=task)
    assert afile.read_text() == "x" and sorted(p.name for p in tmp_path.iterdir()) == ["afile", "specpilot-home"]
    assert main(["report", "--out", ""]) == 2
    assert "error: --out is empty" in capsys.readouterr().err
