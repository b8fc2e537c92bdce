"""Inputs are checked before any model work, and every user-facing error names the file or value and
says what to do (issue 13, findings 6, 8 and 9): through the real command line, agent.cli.main.main."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from agent.cli.main import main
from memory import Store
from tools.errors import ParameterError

TINY_CONTEXT = 1024  # make_tiny_model_folder's max_position_embeddings


def cli(capsys, *args: str) -> tuple[int, str, str]:
    """Run ``specpilot ARGS`` in this process; return (exit code, stdout, stderr)."""
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def tool(capsys, name: str, inp: dict | str) -> tuple[int, dict]:
    """``specpilot tool NAME --input JSON``: the exit code and the one JSON object printed."""
    code, out, _ = cli(capsys, "tool", name, "--input", inp if isinstance(inp, str) else json.dumps(inp))
    return code, json.loads(out)


def token_count(model_dir: Path, text: str) -> int:
    from transformers import AutoTokenizer

    return len(AutoTokenizer.from_pretrained(str(model_dir))(text)["input_ids"])


def stored_runs() -> list[dict]:
    with Store() as store:
        return store.list_runs(limit=100)


# ---------------------------------------------------------------------------- empty prompts (finding 9)
@pytest.mark.parametrize("command", ["run", "compare"])
@pytest.mark.parametrize("prompt", ["", "   \n\t "])
def test_an_empty_prompt_is_refused_not_replaced_by_the_demo_prompt(capsys, command, prompt):
    # the target does not exist: the prompt is refused first, before any model is looked at
    method = ["--method", "baseline"] if command == "run" else ["--methods", "baseline"]
    code, out, err = cli(capsys, command, *method, "--target", "/no/such/model", "--prompt", prompt)
    assert code == 2 and out == ""
    assert err.startswith("error: --prompt is empty") and "what to do:" in err
    assert ("only whitespace" in err) == bool(prompt)
    assert "/no/such/model" not in err and stored_runs() == []


def test_an_empty_prompt_file_is_refused(capsys, tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text(" \n\n")
    code, _, err = cli(capsys, "run", "--method", "baseline", "--prompt-file", str(empty))
    assert code == 2 and f"the prompt file {empty} is empty" in err


@pytest.mark.parametrize("prompt", ["", "  "])
@pytest.mark.parametrize("name,inp", [("run_method", {"method": "baseline"}), ("compare_methods", {})])
def test_tools_refuse_an_empty_prompt(capsys, name, inp, prompt):
    code, result = tool(capsys, name, {**inp, "prompt": prompt})
    assert code == 1 and "prompt" in result["error"]
    assert "Traceback" not in result["error"] and stored_runs() == []


# ---------------------------------------------------------------------------- prompt files (finding 9)
def test_a_prompt_file_that_is_not_utf8_names_the_file_and_the_byte(capsys, tmp_path):
    latin1 = tmp_path / "latin1 prompt.txt"
    latin1.write_bytes("Écris une fonction qui trie une liste".encode("latin-1"))
    for command, method in (("run", "--method"), ("compare", "--methods")):
        code, _, err = cli(capsys, command, method, "baseline", "--prompt-file", str(latin1))
        assert code == 2 and "UnicodeDecodeError" not in err and "Traceback" not in err
        assert f"prompt file {latin1} is not UTF-8 text: byte 0xc9 at offset 0" in err
        assert "what to do: save it as UTF-8" in err


def test_a_bench_prompt_set_that_is_not_utf8_names_the_file(capsys, tmp_path):
    prompts = tmp_path / "set.jsonl"
    prompts.write_bytes(b'{"question_id": 1, "category": "c", "prompt": "caf\xe9"}\n')
    code, _, err = cli(capsys, "bench", "--prompts", str(prompts), "--methods", "ngram")
    assert code == 2 and f"{prompts} is not UTF-8 text: byte 0xe9" in err


def test_a_utf8_prompt_file_with_a_byte_order_mark_is_read_without_it(tmp_path):
    from tools.bench.inputs import read_prompt_file

    bom = tmp_path / "bom.txt"
    bom.write_bytes("\ufeffdéf x".encode())
    assert read_prompt_file(bom) == "déf x"


# ---------------------------------------------------------------------------- context length (finding 6)
def test_compare_refuses_a_prompt_longer_than_the_context_before_measuring(capsys, tiny_model_dir):
    prompt = "x " * 50
    n = token_count(tiny_model_dir, prompt)
    code, out, err = cli(capsys, "compare", "--methods", "baseline", "ngram", "--target", str(tiny_model_dir),
                         "--dtype", "float32", "--raw", "--prompt", prompt, "--max-new-tokens", "1000", "--json")
    assert code == 2 and f"error: {json.loads(out)['error']}" in err  # --json: the one error document on stdout
    assert (f"error: the prompt is {n} tokens and max_new_tokens is 1000: {n + 1000} tokens, more than the "
            f"{TINY_CONTEXT}-token context of {tiny_model_dir} (max_position_embeddings in its config)") in err
    assert f"shorten the prompt to at most {TINY_CONTEXT - 1000} tokens" in err
    assert f"lower max_new_tokens (--max-new-tokens) to {TINY_CONTEXT - n} or less" in err
    assert stored_runs() == []
    with Store() as store:
        (task,) = store.list_tasks()
    assert task["status"] == "failed" and task["run_ids"] == []


def test_run_refuses_a_prompt_longer_than_the_context_before_measuring(capsys, tiny_model_dir):
    code, _, err = cli(capsys, "run", "--method", "baseline", "--target", str(tiny_model_dir), "--dtype", "float32",
                       "--raw", "--prompt", "x " * 50, "--max-new-tokens", str(TINY_CONTEXT))
    assert code == 2 and f"more than the {TINY_CONTEXT}-token context" in err and stored_runs() == []


def test_the_command_line_takes_prompt_files_over_the_tool_limit_but_checks_the_context(capsys, tmp_path,
                                                                                     tiny_model_dir):
    from tools.agent_tools.registry import MAX_PROMPT_BYTES

    big = tmp_path / "big.txt"
    big.write_text("x " * MAX_PROMPT_BYTES)  # twice the tool limit
    code, _, err = cli(capsys, "compare", "--methods", "baseline", "--target", str(tiny_model_dir), "--dtype",
                       "float32", "--raw", "--prompt-file", str(big), "--max-new-tokens", "8")
    assert code == 2 and "bytes" not in err  # not the tool's size limit ...
    assert "max_new_tokens is 8" in err and f"{TINY_CONTEXT}-token context" in err  # ... the model's context


def test_a_prompt_that_fits_exactly_is_measured(capsys, tiny_model_dir):
    prompt = "x " * 6
    n = token_count(tiny_model_dir, prompt)
    code, out, err = cli(capsys, "compare", "--methods", "baseline", "--target", str(tiny_model_dir), "--dtype",
                         "float32", "--raw", "--prompt", prompt, "--max-new-tokens", str(TINY_CONTEXT - n), "--json")
    assert code == 0, err
    assert json.loads(out)["rows"][0]["new_tokens"] == TINY_CONTEXT - n


@pytest.mark.parametrize("config_limit,tokenizer_limit,expected", [
    (2048, 4096, (2048, "max_position_embeddings in its config")),
    (None, 4096, (4096, "model_max_length of its tokenizer")),
    (None, int(1e30), (None, "")),  # transformers' "no limit": nothing to check against
])
def test_the_context_comes_from_the_config_else_a_real_tokenizer_limit(config_limit, tokenizer_limit, expected):
    from tools.bench.context import check_fits_context, context_length

    config = SimpleNamespace(**({"max_position_embeddings": config_limit} if config_limit else {}))
    loaded = SimpleNamespace(ref="m", model=SimpleNamespace(config=config),
                             tokenizer=SimpleNamespace(model_max_length=tokenizer_limit))
    assert context_length(loaded) == expected
    check_fits_context(loaded, 100, 1948)  # 2048 fits every limit above
    if expected[0] is not None:
        with pytest.raises(ParameterError, match=f"the prompt is 8000 tokens and max_new_tokens is 128: 8128 tokens, "
                                                 f"more than the {expected[0]}-token context of m"):
            check_fits_context(loaded, 8000, 128)


# ---------------------------------------------------------------------------- prompt size for tools (finding 6)
@pytest.mark.parametrize("name,inp", [("run_method", {"method": "baseline"}), ("compare_methods", {})])
def test_tool_calls_refuse_prompt_text_over_the_limit_with_its_size(capsys, name, inp):
    from tools.agent_tools.registry import MAX_PROMPT_BYTES

    prompt = "é" * (MAX_PROMPT_BYTES // 2 + 1)  # under the limit in characters, over it in UTF-8 bytes
    code, result = tool(capsys, name, {**inp, "prompt": prompt})
    assert code == 1
    assert f"the prompt of {name} is {MAX_PROMPT_BYTES + 2:,} bytes of UTF-8" in result["error"]
    assert f"at most {MAX_PROMPT_BYTES:,} bytes (64 KiB)" in result["error"]
    assert "specpilot run --prompt-file" in result["error"] and stored_runs() == []


def test_the_registry_checks_prompt_text_for_every_caller():
    """The JSON CLI, the MCP server, the chat and the approval gate all validate through parse_input."""
    from tools.agent_tools.registry import MAX_PROMPT_BYTES, get_tool, parse_input

    run = get_tool("run_method")
    assert parse_input(run, {"method": "ngram", "prompt": "x" * MAX_PROMPT_BYTES}).prompt  # at the limit: fine
    with pytest.raises(ParameterError, match="bytes of UTF-8"):
        parse_input(run, {"method": "ngram", "prompt": "x" * (MAX_PROMPT_BYTES + 1)})
    with pytest.raises(ParameterError, match="empty"):
        parse_input(run, json.dumps({"method": "ngram", "prompt": "\n"}))
    with pytest.raises(ParameterError, match="prompt"):  # a lone surrogate is not text
        parse_input(run, '{"method": "ngram", "prompt": "a\\ud800"}')


# ---------------------------------------------------------------------------- saved parameters (finding 8)
def test_save_params_refuses_bad_run_level_fields_naming_each(capsys):
    code, result = tool(capsys, "save_params", {"method": "draft", "params": {"max_new_tokens": "lots", "target": 12}})
    assert code == 1
    assert "max_new_tokens" in result["error"] and "(got 'lots')" in result["error"]
    assert "target" in result["error"] and "(got 12)" in result["error"]
    with Store() as store:
        assert store.get_params("draft") is None and store.get_answer("default_method") is None


@pytest.mark.parametrize("params,field", [
    ({"k": 99}, "k"),
    ({"max_new_tokens": 0}, "max_new_tokens"),
    ({"temperature": -1}, "temperature"),
    ({"peers": "sometimes"}, "peers"),
    ({"repeats": None}, "repeats"),
    ({"no_such_field": 1}, "no_such_field"),
])
def test_save_params_refuses_each_kind_of_bad_field(capsys, params, field):
    code, result = tool(capsys, "save_params", {"method": "draft", "params": params})
    assert code == 1 and field in result["error"]
    with Store() as store:
        assert store.get_params("draft") is None


def test_valid_saved_params_are_stored_and_a_later_run_reads_them(capsys):
    params = {"target": "/some/model", "max_new_tokens": 64, "temperature": 0.5, "peers": True, "k": 4}
    code, result = tool(capsys, "save_params", {"method": "draft", "params": params})
    assert code == 0, result
    from tools.agent_tools.run_tool import with_saved_params
    from tools.bench.run import RunInput

    with Store() as store:
        assert store.get_params("draft") == params
        full = with_saved_params(RunInput(method="draft", prompt="p"), store.get_params("draft"))
    # the run-level fields fill the input; k stays in memory, read by the run itself as a "memory" value
    assert full.max_new_tokens == 64 and full.params == {} and full.peers is True


def test_the_command_line_save_path_validates_too(tmp_path):
    from agent.cli.eval import save_checked_params

    with Store() as store:
        with pytest.raises(ParameterError, match="max_new_tokens"):
            save_checked_params(store, "lookahead", {"max_new_tokens": "lots", "window": 4})
        assert store.get_params("lookahead") is None
        save_checked_params(store, "lookahead", {"max_new_tokens": 32, "window": 4})
        assert store.get_params("lookahead") == {"max_new_tokens": 32, "window": 4}


# ---------------------------------------------------------------------------- corrupt weights (finding 9)
def test_a_corrupt_model_file_is_named_with_how_to_get_a_good_copy(capsys, tmp_path, tiny_model_dir):
    broken = tmp_path / "broken-model"
    shutil.copytree(tiny_model_dir, broken)
    weights = broken / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])  # a partial download
    code, _, err = cli(capsys, "run", "--method", "baseline", "--target", str(broken), "--prompt", "x y")
    assert code == 2 and "SafetensorError" not in err and "Traceback" not in err
    assert f"{weights} is not a valid safetensors file" in err
    assert "specpilot models fetch" in err


def test_corrupt_medusa_heads_are_named_with_how_to_retrain(capsys, tmp_path, tiny_model_dir):
    from tools.engine.medusa import MedusaHeads
    from tools.medusa.checkpoint import WEIGHTS_NAME, save_heads

    heads = save_heads(MedusaHeads(32, 64, 2, 1), tmp_path / "heads")
    (heads / WEIGHTS_NAME).write_bytes(b"\x00" * 64)
    code, _, err = cli(capsys, "run", "--method", "medusa", "--target", str(tiny_model_dir), "--medusa-heads",
                       str(heads), "--dtype", "float32", "--raw", "--prompt", "x y", "--max-new-tokens", "4")
    assert code == 2 and "Traceback" not in err
    assert f"cannot read the Medusa weights {heads / WEIGHTS_NAME}: the file is corrupt or partial" in err
    assert "specpilot medusa train" in err and stored_runs() == []


# ---------------------------------------------------------------------------- -v (finding 9)
def _break_runs_list(monkeypatch):
    def broken(self, **kwargs):
        raise RuntimeError("boom in list_runs")

    monkeypatch.setattr(Store, "list_runs", broken)


def test_an_unexpected_error_says_v_shows_the_traceback_and_v_does(capsys, monkeypatch):
    _break_runs_list(monkeypatch)
    code, _, err = cli(capsys, "runs", "list")
    assert code == 1 and "Traceback" not in err
    assert "error: RuntimeError: boom in list_runs" in err and "run with -v to see the traceback" in err
    code, _, err = cli(capsys, "-v", "runs", "list")
    assert code == 1 and "Traceback (most recent call last)" in err and "list_runs" in err
    assert "boom in list_runs" in err and "run with -v" not in err


def test_v_shows_the_traceback_of_a_user_error_too(capsys):
    code, _, err = cli(capsys, "-v", "run", "--method", "baseline", "--prompt", "")
    assert code == 2 and "Traceback (most recent call last)" in err and "error: --prompt is empty" in err
    code, _, err = cli(capsys, "run", "--method", "baseline", "--prompt", "")
    assert code == 2 and "Traceback" not in err


def test_bench_skips_a_prompt_too_long_for_the_context_and_measures_the_others(capsys, tmp_path, tiny_model_dir):
    prompts = tmp_path / "set.jsonl"
    rows = [{"question_id": 1, "category": "long", "prompt": "x " * (TINY_CONTEXT + 10)},
            {"question_id": 2, "category": "short", "prompt": "x y"}]
    prompts.write_text("".join(json.dumps(r) + "\n" for r in rows))
    code, out, err = cli(capsys, "bench", "--prompts", str(prompts), "--methods", "ngram", "--target",
                         str(tiny_model_dir), "--dtype", "float32", "--raw", "--max-new-tokens", "4", "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["measured"] == 1 and [r["question_id"] for r in stored_runs()] == [2]
    with Store() as store:
        task = store.get_task(result["task_id"])
    assert task["status"] == "done" and task["left"] == []
    (note,) = [n["text"] for n in task["notes"] if n["text"].startswith("q1:")]
    assert f"more than the {TINY_CONTEXT}-token context" in note and "not run" in note
