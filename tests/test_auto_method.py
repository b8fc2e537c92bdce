"""auto: a method picked per prompt from the fit half's measured figures (tools.bench.auto), in run and bench."""

from __future__ import annotations

import json

import pytest

from memory import Store
from prompts.spec_bench import EVAL_PATH, FIT_PATH, read_jsonl
from tools.bench import auto
from tools.bench.inputs import RunInput
from tools.bench.run import run_method
from tools.bench.suite import BenchInput, bench

CODE = "def merge(a, b):\n    out = []\n    while a and b:\n        out.append(a.pop(0) if a[0] < b[0] else b.pop(0))\n"
STORY = "Write a short story about a lighthouse keeper who finds a letter in a bottle on a stormy night."
REPEATS = ("Summarize: the meeting moved to Monday. The meeting moved to Monday because the room was taken. "
           "The room was taken because the meeting moved.")


def test_the_features_read_repetition_symbols_and_length():
    code, story, repeats = (auto.prompt_features(t) for t in (CODE, STORY, REPEATS))
    assert repeats["copy"] > story["copy"] and code["symbols"] > 2 * story["symbols"]
    assert auto.prompt_features(STORY * 3)["length"] > story["length"]
    assert auto.prompt_features("")["copy"] == 0.0


def fit(qid, text, **speedups):
    return auto.FitPrompt(qid, "x", auto.prompt_features(text), speedups, text)


def test_each_method_is_predicted_from_the_fit_prompts_most_like_the_prompt():
    fits = [fit(1, CODE, draft=2.0, eagle=1.2), fit(2, CODE.replace("merge", "join"), draft=1.9, eagle=1.1),
            fit(3, STORY, draft=1.1, eagle=1.8), fit(4, STORY.replace("lighthouse", "harbour"), draft=1.2, eagle=1.7)]
    code, _ = auto.predict(auto.prompt_features(CODE.replace("merge", "fuse")), fits)
    story, _ = auto.predict(auto.prompt_features(STORY.replace("keeper", "cook")), fits)
    assert max(code, key=code.get) == "draft" and max(story, key=story.get) == "eagle"
    only, _ = auto.predict(auto.prompt_features(STORY), fits, allowed=["draft"])
    assert list(only) == ["draft"]


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_the_shipped_table_holds_fit_prompts_only_and_names_its_machine(dtype):
    table = auto.shipped_table(dtype)
    assert table["hardware"] and table["dtype"] == dtype and table["kernel_width"] > 0
    fit_texts = {row["prompt"] for row in read_jsonl(FIT_PATH)}
    eval_texts = {row["prompt"] for row in read_jsonl(EVAL_PATH)}
    shipped = {p["prompt"] for p in table["prompts"]}
    assert shipped <= fit_texts and not shipped & eval_texts


def test_a_dtype_without_a_table_of_its_own_reads_the_bfloat16_one():
    assert auto.shipped_table("float16") == auto.shipped_table("bfloat16") == auto.shipped_table()


def test_the_float32_table_answers_a_float32_run_on_a_machine_without_fit_runs():
    match = auto.Match("a CPU never benched (2 cores, AVX2)", "float32", "qwen2.5-coder-1.5b-instruct")
    fits, source = auto.fit_prompts(None, match)
    assert "float32" in source and fits
    picked = auto.choose(STORY)  # no store: the shipped table answers, and says so
    assert picked is not None and "shipped fit-half table" in picked.reason()
    assert picked.method in picked.predicted and picked.reason().startswith(f"auto picked {picked.method}")


def test_a_fit_prompt_is_never_its_own_evidence():
    text = json.loads(FIT_PATH.read_text().splitlines()[0])["prompt"]
    picked = auto.choose(text)
    assert all(f"q{json.loads(FIT_PATH.read_text().splitlines()[0])['question_id']}" not in n for n in picked.nearest)


FIT_PROMPTS = [{"question_id": i, "category": "coding" if i % 2 else "writing",
                "prompt": (CODE if i % 2 else STORY).replace("a", "a" * (1 + i % 3))} for i in range(1, 7)]
EVAL_PROMPTS = [{"question_id": 11, "category": "coding", "prompt": CODE.replace("out", "res")},
                {"question_id": 12, "category": "writing", "prompt": STORY.replace("night", "day")}]


def write(path, rows):
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def tiny(model_dir, prompts, methods, **more):
    return BenchInput(prompts=str(prompts), methods=methods, target=str(model_dir), draft=str(model_dir),
                      max_new_tokens=6, chat=False, dtype="float32", **more)


def test_bench_auto_reads_this_machines_fit_runs_and_reports_its_own_row(tiny_model_dir, tmp_path):
    store = Store()
    fit_file = write(tmp_path / auto.FIT_SET, FIT_PROMPTS)  # the fit half's name: its runs are fit figures
    bench(tiny(tiny_model_dir, fit_file, ["draft", "ngram"]), store=store)
    match = auto.matching(tiny(tiny_model_dir, fit_file, ["draft"]))
    fits, source = auto.fit_prompts(store, match)
    assert len(fits) == 6 and "measured on this machine" in source
    other = auto.Match(match.hardware, match.dtype, match.target, match.backend, "another-draft")
    assert all("draft" not in p.speedups for p in auto.stored_prompts(store, other))  # another draft's figures
    result = bench(tiny(tiny_model_dir, write(tmp_path / "eval.jsonl", EVAL_PROMPTS), ["auto", "draft", "ngram"]),
                   store=store)
    assert result["methods"] == ["draft", "ngram", "auto"]
    assert result["summary"]["overall"]["auto"]["prompts"] == 2 and len(result["auto"]) == 2
    runs = {r["run_id"]: r for r in store.list_runs(limit=100)}
    for entry in result["auto"]:  # auto's row is the run of the method it picked on that prompt
        assert runs[entry["run_id"]]["method"] == entry["picked"] and "measured on this machine" in entry["reason"]
    assert len(result["run_ids"]) == len(set(result["run_ids"])) == 4


def test_bench_auto_alone_measures_the_methods_it_picks_among(tiny_model_dir, tmp_path):
    store = Store()
    bench(tiny(tiny_model_dir, write(tmp_path / auto.FIT_SET, FIT_PROMPTS), ["draft", "ngram"]), store=store)
    result = bench(tiny(tiny_model_dir, write(tmp_path / "eval.jsonl", EVAL_PROMPTS), ["auto"]), store=store)
    assert set(result["methods"]) == {"draft", "ngram", "auto"}


def test_run_auto_runs_the_picked_method_and_says_why(tiny_model_dir, tmp_path):
    store = Store()
    bench(tiny(tiny_model_dir, write(tmp_path / auto.FIT_SET, FIT_PROMPTS), ["draft", "ngram"]), store=store)
    record = run_method(RunInput(method="auto", prompt=STORY, target=str(tiny_model_dir), draft=str(tiny_model_dir),
                                 max_new_tokens=6, chat=False, dtype="float32"), store=store)
    assert record["method"] in ("draft", "ngram") and record["sizing"]["method"].startswith(f"auto picked {record['method']}")
    assert store.get_run(record["run_id"])["sizing"]["method"] == record["sizing"]["method"]


def test_run_auto_keeps_the_given_parameters_the_picked_method_has(tiny_model_dir, tmp_path):
    store = Store()
    bench(tiny(tiny_model_dir, write(tmp_path / auto.FIT_SET, FIT_PROMPTS), ["draft", "ngram"]), store=store)
    record = run_method(RunInput(method="auto", prompt=CODE, target=str(tiny_model_dir), draft=str(tiny_model_dir),
                                 max_new_tokens=6, chat=False, dtype="float32",
                                 params={"k": 3, "max_ngram_size": 2, "window": 4}), store=store)
    assert "window" not in record["params"]  # lookahead's: not the picked method's
    own = {"draft": ("k", 3), "ngram": ("max_ngram_size", 2)}[record["method"]]
    assert record["params"][own[0]] == own[1]


def test_the_command_line_gives_auto_every_method_option_it_was_given():
    from agent.cli.main import build_parser
    from agent.cli.options import method_params

    args = build_parser().parse_args(["run", "--method", "auto", "--k", "3", "--window", "4", "--prompt", "x"])
    assert method_params(args) == {"k": 3, "window": 4}


def test_run_auto_without_fit_figures_for_any_method_says_what_to_do(tiny_model_dir, monkeypatch):
    monkeypatch.setattr(auto, "shipped_table", lambda dtype=None: {})
    with pytest.raises(Exception) as err:
        run_method(RunInput(method="auto", prompt=STORY, target=str(tiny_model_dir), max_new_tokens=4, chat=False,
                            dtype="float32"), store=Store())
    assert "bench --prompts fit" in str(getattr(err.value, "hint", "")) + str(err.value)


def test_self_q4_drafts_with_the_targets_own_gguf_copy():
    from tools.bench.inputs import SELF_DRAFT, CompareInput

    run = RunInput(method="draft", prompt="x", draft=SELF_DRAFT)
    assert run.draft == run.target and run.params == {"draft_quant": "gguf"}
    given = RunInput(method="draft", prompt="x", draft=SELF_DRAFT, params={"draft_quant": "int8"})
    assert given.params == {"draft_quant": "int8"}  # a given quantisation stays
    compared = CompareInput(prompt="x", methods=["draft", "ngram"], draft=SELF_DRAFT, params={"draft": {"k": 4}})
    assert compared.params == {"draft": {"k": 4, "draft_quant": "gguf"}}
    assert BenchInput(methods=["ngram"], draft=SELF_DRAFT).params == {}


def test_bench_auto_on_the_command_line_takes_method_options_for_the_methods_it_picks_among(capsys, tmp_path,
                                                                                          tiny_model_dir):
    from agent.cli.main import main

    prompts = write(tmp_path / "set.jsonl", EVAL_PROMPTS[:1])
    code = main(["bench", "--prompts", str(prompts), "--methods", "auto", "ngram", "--max-ngram-size", "2",
                 "--target", str(tiny_model_dir), "--dtype", "float32", "--raw", "--max-new-tokens", "4", "--json"])
    result = json.loads(capsys.readouterr().out)
    assert code == 0 and result["methods"] == ["ngram", "auto"]  # the shipped table answers: ngram, the one listed
    assert Store().get_run(result["run_ids"][0])["params"]["max_ngram_size"] == 2


def test_self_q4_follows_a_saved_target():
    from tools.agent_tools.run_tool import with_saved_params
    from tools.bench.compare import with_saved_settings
    from tools.bench.inputs import SELF_DRAFT, CompareInput

    run = with_saved_params(RunInput(method="draft", prompt="x", draft=SELF_DRAFT), {"target": "smollm2-135m-instruct"})
    assert run.target == run.draft == "smollm2-135m-instruct" and run.params == {"draft_quant": "gguf"}
    store = Store()
    store.save_params("draft", {"target": "smollm2-135m-instruct"})
    compared = with_saved_settings(CompareInput(prompt="x", methods=["draft"], draft=SELF_DRAFT), store)
    assert compared.target == compared.draft == "smollm2-135m-instruct"


def test_run_auto_falls_back_to_the_next_pick_where_the_first_cannot_run(tiny_model_dir, monkeypatch):
    picked = auto.AutoChoice("eagle", {"eagle": 3.0, "ngram": 1.5}, ["coding q1"], "a test table")
    monkeypatch.setattr(auto, "choose", lambda *a, **k: picked)  # no EAGLE head exists for the tiny target
    store = Store()
    record = run_method(RunInput(method="auto", prompt=CODE, target=str(tiny_model_dir), max_new_tokens=4, chat=False,
                                 dtype="float32"), store=store)
    assert record["method"] == "ngram" and "eagle cannot run here" in record["sizing"]["method"]
    task = store.get_task(record["task_id"])
    assert task["status"] == "done" and task["left"] == [] and task["done"] == ["ngram"]


class _FitRuns:
    """A store holding fit-half draft runs of two drafts (what `bench --prompts fit` leaves in memory)."""

    def __init__(self, runs):
        self.runs = runs

    def find_runs(self, prompt_set=None, target=None):
        return [r for r in self.runs if r["target"] == target]


def _draft_run(qid, text, draft, speedup, hardware):
    return {"question_id": qid, "category": "x", "prompt": text, "method": "draft", "target": "t", "draft": draft,
            "speedup": speedup, "hardware": hardware, "dtype": "float32", "matches_baseline": True}


def test_a_draft_run_weighs_the_targets_own_copy_against_the_built_in_draft_from_the_fit_half(monkeypatch):
    from tools.bench.protocol import hardware_info
    hw = hardware_info("cpu")
    monkeypatch.setattr(auto, "shipped_table", lambda dtype=None: {"kernel_width": 0.5})  # a narrow kernel: near prompts decide
    inp = RunInput(method="draft", prompt=STORY.replace("night", "evening"), target="t", dtype="float32")
    small = auto.matching(inp).draft
    texts = [STORY.replace("a", "a" * i) for i in range(1, 5)] + [CODE.replace("a", "a" * i) for i in range(1, 5)]
    # the own copy wins on stories, the small draft on code
    runs = [_draft_run(i, t, small, 1.2 if t.startswith("Write") else 2.0, hw) for i, t in enumerate(texts)]
    runs += [_draft_run(i, t, "t", 1.6 if t.startswith("Write") else 1.1, hw) for i, t in enumerate(texts)]
    story = auto.choose_draft(inp, _FitRuns(runs))
    code = auto.choose_draft(inp.model_copy(update={"prompt": CODE.replace("out", "res")}), _FitRuns(runs))
    assert story.self_draft and "own 4-bit copy (self-q4), predicted" in story.reason
    assert not code.self_draft and code.reason.startswith(f"draft: {small}, predicted")
    few = auto.choose_draft(inp, _FitRuns(runs[:8] + runs[8:10]))  # two fit runs of the own copy: not weighed
    assert not few.self_draft and "8 and 2 now" in few.reason and "--draft self-q4" in few.reason

