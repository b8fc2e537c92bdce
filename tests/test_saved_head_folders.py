"""Saved parameters that name a folder (the EAGLE head, the Medusa heads) are the ones a later run loads, and the
ones its record shows: `specpilot run`, the run_method tool (chat `/run`), compare and the auto method read them
from memory as they read every other saved parameter, and a folder given to the run still wins over the saved one.
Tiny models and random heads: the plumbing, not the speed."""

from __future__ import annotations

import json

import pytest
import torch

import tools.bench.context as context
from agent.cli.main import main
from conftest import VOCAB, make_tiny_model
from memory import Store
from tools.agent_tools import registry
from tools.agent_tools.registry import ToolContext
from tools.bench.compare import CompareInput, compare
from tools.bench.inputs import RunInput
from tools.bench.run import build_context

PROMPT = "def f(x): return x"


@pytest.fixture(scope="module")
def eagle_head_dir(tmp_path_factory):
    """A random EAGLE head for the tiny model folder (the conftest's qwen2 weights)."""
    from tools.engine.eagle import EagleHead, config_for
    from tools.medusa.eagle_train import save_head

    model = make_tiny_model("qwen2", layers=2, seed=0)
    torch.manual_seed(3)
    head = EagleHead(config_for(model.config, VOCAB, 48), torch.arange(VOCAB))
    head.init_identity()
    folder = tmp_path_factory.mktemp("saved-eagle") / "head"
    save_head(head.eval(), folder, {"note": "random, for the plumbing"})
    return folder


@pytest.fixture
def loaded_from(monkeypatch):
    """The folders the run loads its heads from, in order: {"eagle": [...], "medusa": [...]} (the real loaders)."""
    seen: dict[str, list] = {"eagle": [], "medusa": []}
    real_eagle, real_medusa = context.load_eagle_for, context.load_medusa_heads

    def eagle(target, given):
        seen["eagle"].append(given)
        return real_eagle(target, given)

    def medusa(target, ref):
        seen["medusa"].append(ref)
        return real_medusa(target, ref)

    monkeypatch.setattr(context, "load_eagle_for", eagle)
    monkeypatch.setattr(context, "load_medusa_heads", medusa)
    return seen


def save(store: Store, method: str, params: dict) -> None:
    """Save ``params`` for ``method`` as the chat's /save and onboarding do: through the save_params tool."""
    tool = registry.get_tool("save_params")
    result = registry.execute(tool, registry.parse_input(tool, {"method": method, "params": params}),
                              ToolContext(store=store))
    assert not result.is_error, result.content


def cli_run(capsys, *args: str) -> tuple[int, dict | str]:
    code = main(["run", *args, "--dtype", "float32", "--raw", "--prompt", PROMPT, "--max-new-tokens", "4", "--json"])
    captured = capsys.readouterr()
    return code, (json.loads(captured.out) if code == 0 else captured.out + captured.err)


# ---------------------------------------------------------------------------- EAGLE
def test_a_saved_eagle_head_folder_is_loaded_by_the_context_a_run_builds(tiny_model_dir, eagle_head_dir, loaded_from):
    store = Store()
    save(store, "eagle", {"eagle_heads": str(eagle_head_dir)})
    inp = RunInput(method="eagle", prompt=PROMPT, target=str(tiny_model_dir), dtype="float32")
    ctx = build_context(inp, store=store)
    assert loaded_from["eagle"] == [str(eagle_head_dir)] and ctx.eagle_head is not None
    # and a folder given to the run wins over the saved one
    other = RunInput(method="eagle", prompt=PROMPT, target=str(tiny_model_dir), dtype="float32",
                     params={"eagle_heads": str(eagle_head_dir) + "-given"})
    with pytest.raises(Exception, match="-given"):
        build_context(other, store=store)


def test_specpilot_run_uses_and_records_the_saved_eagle_head(capsys, tiny_model_dir, eagle_head_dir, loaded_from):
    with Store() as store:
        save(store, "eagle", {"eagle_heads": str(eagle_head_dir)})
    code, record = cli_run(capsys, "--method", "eagle", "--target", str(tiny_model_dir))  # no shipped head for it
    assert code == 0, record
    assert loaded_from["eagle"] == [str(eagle_head_dir)]
    assert record["params"]["eagle_heads"] == str(eagle_head_dir)
    assert record["sizing"]["eagle_heads"].startswith("memory: ") and record["matches_baseline"] is True


def test_a_given_eagle_head_wins_over_the_saved_one(capsys, tiny_model_dir, eagle_head_dir, loaded_from, tmp_path):
    with Store() as store:
        save(store, "eagle", {"eagle_heads": str(tmp_path / "not-this-one")})
    code, record = cli_run(capsys, "--method", "eagle", "--target", str(tiny_model_dir),
                           "--eagle-heads", str(eagle_head_dir))
    assert code == 0, record
    assert loaded_from["eagle"] == [str(eagle_head_dir)] and record["params"]["eagle_heads"] == str(eagle_head_dir)
    assert record["sizing"]["eagle_heads"].startswith("given")


def test_a_saved_eagle_head_that_is_gone_is_named_not_replaced_by_the_shipped_one(capsys, tiny_model_dir, tmp_path,
                                                                                 loaded_from):
    with Store() as store:
        save(store, "eagle", {"eagle_heads": str(tmp_path / "gone")})
    code, out = cli_run(capsys, "--method", "eagle", "--target", str(tiny_model_dir))
    assert code != 0 and str(tmp_path / "gone") in out and "Traceback" not in out
    assert loaded_from["eagle"] == [str(tmp_path / "gone")]


def test_the_run_method_tool_uses_and_records_the_saved_eagle_head(tiny_model_dir, eagle_head_dir, loaded_from):
    """chat `/run eagle ...` (and onboarding's later runs) go through the run_method tool."""
    store = Store()
    save(store, "eagle", {"eagle_heads": str(eagle_head_dir), "target": str(tiny_model_dir), "max_new_tokens": 4})
    tool = registry.get_tool("run_method")
    inp = registry.parse_input(tool, {"method": "eagle", "prompt": PROMPT, "chat": False, "dtype": "float32"})
    result = registry.execute(tool, inp, ToolContext(store=store))
    assert not result.is_error, result.content
    run = store.get_run(result.content["run_id"])
    assert loaded_from["eagle"] == [str(eagle_head_dir)]
    assert run["params"]["eagle_heads"] == str(eagle_head_dir) and run["sizing"]["eagle_heads"].startswith("memory")


def test_compare_uses_and_records_the_saved_eagle_head(tiny_model_dir, eagle_head_dir, loaded_from):
    store = Store()
    save(store, "eagle", {"eagle_heads": str(eagle_head_dir)})
    result = compare(CompareInput(prompt=PROMPT, methods=["baseline", "eagle", "ngram"], target=str(tiny_model_dir),
                                  max_new_tokens=4, chat=False, dtype="float32",
                                  params={"ngram": {"max_ngram_size": 2}}),  # another method's are not eagle's
                     store=store)
    row = next(r for r in result["rows"] if r["method"] == "eagle")
    assert row["status"] == "measured", row
    assert loaded_from["eagle"] == [str(eagle_head_dir)]
    assert store.get_run(row["run_id"])["params"]["eagle_heads"] == str(eagle_head_dir)


# ---------------------------------------------------------------------------- Medusa
def test_specpilot_run_uses_and_records_the_saved_medusa_heads(capsys, tiny_model_dir, tiny_heads_dir, loaded_from):
    with Store() as store:
        save(store, "medusa", {"medusa_heads": str(tiny_heads_dir)})
    code, record = cli_run(capsys, "--method", "medusa", "--target", str(tiny_model_dir))  # none shipped for it
    assert code == 0, record
    assert loaded_from["medusa"] == [str(tiny_heads_dir)] and record["medusa_heads"] == str(tiny_heads_dir)


def test_a_given_medusa_heads_folder_wins_over_the_saved_one(capsys, tiny_model_dir, tiny_heads_dir, loaded_from,
                                                             tmp_path):
    with Store() as store:
        save(store, "medusa", {"medusa_heads": str(tmp_path / "not-these")})
    code, record = cli_run(capsys, "--method", "medusa", "--target", str(tiny_model_dir),
                           "--medusa-heads", str(tiny_heads_dir))
    assert code == 0, record
    assert loaded_from["medusa"] == [str(tiny_heads_dir)] and record["medusa_heads"] == str(tiny_heads_dir)


def test_compare_uses_the_saved_medusa_heads(tiny_model_dir, tiny_heads_dir, loaded_from):
    store = Store()
    save(store, "medusa", {"medusa_heads": str(tiny_heads_dir)})
    result = compare(CompareInput(prompt=PROMPT, methods=["baseline", "medusa"], target=str(tiny_model_dir),
                                  max_new_tokens=4, chat=False, dtype="float32"), store=store)
    row = next(r for r in result["rows"] if r["method"] == "medusa")
    assert row["status"] == "measured", row
    assert loaded_from["medusa"] == [str(tiny_heads_dir)] and result["medusa_heads"] == str(tiny_heads_dir)
    assert store.get_run(row["run_id"])["medusa_heads"] == str(tiny_heads_dir)


def test_medusa_heads_saved_for_another_method_are_not_medusa_s(tiny_model_dir, tmp_path):
    """Only the medusa method's saved parameters choose its heads (any method may save the run-level field)."""
    store = Store()
    save(store, "draft", {"medusa_heads": str(tmp_path / "draft-s")})
    assert context.medusa_heads_for(store, str(tiny_model_dir), None) is None  # none trained or shipped for it
    save(store, "medusa", {"medusa_heads": str(tmp_path / "medusa-s")})
    assert context.medusa_heads_for(store, str(tiny_model_dir), None) == str(tmp_path / "medusa-s")
    assert context.medusa_heads_for(store, str(tiny_model_dir), "given") == "given"


def test_auto_picking_eagle_loads_the_saved_head(tiny_model_dir, eagle_head_dir, loaded_from, monkeypatch):
    from tools.bench import auto
    from tools.bench.run import run_method

    picked = auto.AutoChoice("eagle", {"eagle": 3.0, "ngram": 1.5}, ["coding q1"], "a test table")
    monkeypatch.setattr(auto, "choose", lambda *a, **k: picked)
    store = Store()
    save(store, "eagle", {"eagle_heads": str(eagle_head_dir)})
    record = run_method(RunInput(method="auto", prompt=PROMPT, target=str(tiny_model_dir), max_new_tokens=4,
                                 chat=False, dtype="float32"), store=store)
    assert record["method"] == "eagle" and loaded_from["eagle"] == [str(eagle_head_dir)]
    assert record["params"]["eagle_heads"] == str(eagle_head_dir)
