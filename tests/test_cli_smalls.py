"""Smaller command-line fixes of the robustness QA (findings 11 and 14): `runs list` names the tasks left
unfinished, interrupted run / compare say what they left, and bad prompt, make-data and run-id input is
refused with a message that names the real problem. Through the real command line, agent.cli.main.main."""

from __future__ import annotations

import json

import pytest

from agent.cli import eval as eval_cli
from agent.cli import main as main_cli
from agent.cli.main import main
from memory import Store
from tools.errors import ParameterError


def cli(capsys, *args: str) -> tuple[int, str, str]:
    """Run ``specpilot ARGS`` in this process; return (exit code, stdout, stderr)."""
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def interrupted_task(request: str, note: str = "interrupted by the user") -> int:
    """A stored task left as an interrupted run leaves it: unfinished, with its note and nothing done."""
    with Store() as store:
        task_id = store.create_task(request, "run", ["ngram"])
        store.update_task(task_id, status="unfinished", note=note)
    return task_id


# ---------------------------------------------------------------------------- runs list (finding 11)
def test_runs_list_names_an_interrupted_run_that_stored_nothing(capsys):
    task_id = interrupted_task("run ngram on 'Count from 1 to 50'")
    code, out, _ = cli(capsys, "runs", "list")
    assert code == 0 and "no runs stored yet" in out
    assert "1 task was left unfinished (`specpilot tool recall` says what each left undone):" in out
    assert f"  task {task_id}: run ngram on 'Count from 1 to 50' — interrupted by the user\n" in out


def test_runs_list_json_stays_the_list_of_runs(capsys):
    interrupted_task("run ngram on 'Count from 1 to 50'")
    code, out, _ = cli(capsys, "runs", "list", "--json")
    assert code == 0 and json.loads(out) == [] and out.strip() == "[]"


def test_runs_list_says_nothing_of_tasks_when_none_is_unfinished(capsys):
    with Store() as store:
        store.update_task(store.create_task("run ngram on 'x'", "run", ["ngram"]), status="done")
    code, out, _ = cli(capsys, "runs", "list")
    assert code == 0 and out.strip() == "no runs stored yet: try `specpilot run --method draft`"


def test_each_unfinished_task_says_why_newest_first_and_how_many_more(capsys):
    with Store() as store:
        running = store.create_task("bench ngram on 3 prompts from set.jsonl", "bench", ["q1 ngram"])
        waiting = store.create_task("[bold]tune[/bold] it\nplease " + "x" * 200, "chat", ["answer"])
        store.update_task(waiting, note="an older note, not why it stopped")
        store.update_task(waiting, status="unfinished", left=["waiting for the user: which target?"])
    older = [interrupted_task(f"run ngram on 'p{i}'") for i in range(5)]
    code, out, _ = cli(capsys, "runs", "list")
    lines = out.splitlines()
    assert code == 0 and "7 tasks were left unfinished" in out
    shown = [line for line in lines if line.startswith("  task ")]
    assert [int(line.split()[1].rstrip(":")) for line in shown] == [*reversed(older)]
    assert lines[-1] == "  and 2 older"
    main_cli.SHOWN_TASKS, kept = 10, main_cli.SHOWN_TASKS
    try:
        out = cli(capsys, "runs", "list")[1]
    finally:
        main_cli.SHOWN_TASKS = kept
    assert f"  task {running}: bench ngram on 3 prompts from set.jsonl — still running, or cut off" in out
    line = next(line for line in out.splitlines() if line.startswith(f"  task {waiting}:"))
    # the request as typed (markup is not rendered), on one line and cut; why: what it left, not the older note
    assert line.startswith(f"  task {waiting}: [bold]tune[/bold] it please xxx") and "...  — " not in line
    assert line.endswith("... — not done: waiting for the user: which target?")


# ---------------------------------------------------------------------------- interrupted run / compare
@pytest.mark.parametrize("command, module, says", [
    (["run", "--method", "ngram"], main_cli, "a run is stored only once it finishes"),
    (["compare", "--methods", "ngram"], eval_cli, "compare does not resume: give those to --methods"),
])
def test_an_interrupted_run_or_compare_does_not_point_to_bench(capsys, monkeypatch, command, module, says):
    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(module, "prompt_text", interrupted)
    code, out, err = cli(capsys, *command, "--json")
    assert code == 130 and err.startswith("interrupted: ") and says in err
    assert "bench" not in err and "runs list" in err
    assert json.loads(out)["error"] == err.strip()


def test_bench_keeps_its_own_interrupted_hint_and_the_others_name_no_bench():
    parser = main_cli.build_parser()
    assert parser.parse_args(["bench"]).interrupted_hint == main_cli.BENCH_INTERRUPTED
    assert getattr(parser.parse_args(["chat"]), "interrupted_hint", None) is None  # the default says what chat keeps
    assert "bench" not in main_cli.INTERRUPTED


# ---------------------------------------------------------------------------- prompts (finding 14)
@pytest.mark.parametrize("command", [["run", "--method", "baseline"], ["compare", "--methods", "baseline"]])
def test_prompt_and_prompt_file_together_are_refused(capsys, tmp_path, command):
    prompt_file = tmp_path / "p.txt"
    prompt_file.write_text("from the file")
    code, out, err = cli(capsys, *command, "--target", "/no/such/model", "--prompt", "hi",
                         "--prompt-file", str(prompt_file))
    assert code == 2 and out == "" and err.startswith("error: --prompt and --prompt-file were both given")
    assert "what to do: give the prompt one way" in err and "/no/such/model" not in err


def test_a_prompt_file_that_is_a_folder_says_so(capsys, tmp_path):
    code, _, err = cli(capsys, "run", "--method", "baseline", "--prompt-file", str(tmp_path))
    assert code == 2 and f"prompt file {tmp_path} is a folder, not a file" in err and "does not exist" not in err


def test_a_missing_prompt_file_still_says_it_does_not_exist(capsys, tmp_path):
    code, _, err = cli(capsys, "run", "--method", "baseline", "--prompt-file", str(tmp_path / "nope.txt"))
    assert code == 2 and f"prompt file {tmp_path / 'nope.txt'} does not exist" in err


# ---------------------------------------------------------------------------- make-data, runs show (finding 14)
@pytest.mark.parametrize("prompts", ["-3", "0"])
def test_make_data_checks_prompts_before_skip(capsys, tmp_path, prompts):
    code, _, err = cli(capsys, "medusa", "make-data", "--generator", str(tmp_path / "no-such-model"),
                       "--out", str(tmp_path / "d.txt"), "--prompts", prompts)
    assert code == 2 and err.startswith(f"error: --prompts {prompts} must be at least 1")
    assert "--skip" not in err and "no-such-model" not in err


def test_runs_show_cuts_a_huge_id_in_its_message(capsys):
    code, _, err = cli(capsys, "runs", "show", "a" * 20_000)
    first = err.splitlines()[0]
    assert code == 2 and first == f"error: no stored run has the id {'a' * 40!r}… (20,000 characters)"
    assert "what to do: list the stored runs with `specpilot runs list`" in err and len(err) < 300


def test_runs_show_quotes_a_short_id_whole(capsys):
    code, _, err = cli(capsys, "runs", "show", "nope")
    assert code == 2 and err.startswith("error: no stored run has the id 'nope'\n")


def test_a_comparison_that_measured_nothing_exits_1_after_saying_why(monkeypatch, capsys):
    result = {"task_id": 7, "run_ids": [], "not_run": {"eagle": "eagle runs on transformers only"}, "rows": []}
    for as_json in (True, False):
        args = type("Args", (), {"json": as_json, "report": False})()
        code = eval_cli._run_and_show(args, "compare", lambda progress: result, lambda r: "table")
        captured = capsys.readouterr()
        assert code == 1
        if as_json:
            assert json.loads(captured.out)["not_run"] == result["not_run"]
        else:
            assert "eagle: not run: eagle runs on transformers only" in captured.out
            assert "nothing was measured" in captured.err
    measured = {**result, "run_ids": ["ab12cd34"]}
    args = type("Args", (), {"json": True, "report": False})()
    assert eval_cli._run_and_show(args, "compare", lambda progress: measured, lambda r: "table") == 0
    capsys.readouterr()
    # bench may finish with no new runs (all reused): it is not a failure
    assert eval_cli._run_and_show(args, "bench", lambda progress: result, lambda r: "table") == 0


def test_a_run_refuses_options_of_another_method_and_keeps_its_own():
    from agent.cli.main import build_parser
    from agent.cli.options import refuse_other_methods_options

    def check(words):
        refuse_other_methods_options(build_parser().parse_args(["run", *words, "--prompt", "hi"]))

    for ok in (["--method", "draft", "--k", "4"], ["--method", "ngram"], ["--method", "medusa", "--tree", "cpu8"],
               ["--method", "lookahead", "--window", "5", "--guess", "3"], ["--method", "auto", "--k", "4"],
               ["--method", "baseline"]):
        check(ok)
    with pytest.raises(ParameterError, match=r"ngram does not take --tree \(medusa\)"):
        check(["--method", "ngram", "--tree", "cpu8"])
    with pytest.raises(ParameterError, match=r"baseline does not take --k \(draft\)"):
        check(["--method", "baseline", "--k", "4"])


def test_a_tasks_long_request_is_one_short_line_in_task_lists():
    from tools.agent_tools.lookup import REQUEST_CHARS, not_done_line, task_line

    task = {"id": 18, "status": "unfinished", "request": "run ngram on:\n" + "word " * 500, "done": [], "left": ["ngram"]}
    line = task_line(task)
    assert "\n" not in line and line.startswith("task 18 (unfinished): run ngram on: word word")
    assert len(line) < REQUEST_CHARS + 80 and "… — done: nothing yet / not done: ngram" in line
    short = {**task, "request": "run ngram on 'hi'"}
    assert task_line(short) == "task 18 (unfinished): run ngram on 'hi' — done: nothing yet / not done: ngram"
    assert not_done_line(short) == "task 18: run ngram on 'hi' — not done: ngram"
