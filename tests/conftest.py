"""Shared fixtures: tiny randomly initialised models (Qwen2 and Llama) and a private user folder."""

from __future__ import annotations

import logging
import os
import subprocess
from collections import Counter
from pathlib import Path

import pytest
import torch

from tiny_models import make_tiny_model, perturbed_copy  # noqa: F401  (tests import them from here)

torch.set_num_threads(1)
# the specpilot processes the tests start inherit this: a tiny model gains nothing from a second thread,
# and two test workers each running a two-thread process on a two-core machine only spin against each other
os.environ.setdefault("OMP_NUM_THREADS", "1")

VOCAB = 64  # make_tiny_model's default vocabulary
SHARED = Path(__file__).resolve().parents[1].parent / "shared"


FLOAT32_TIE = 1e-5  # top-2 logit gap below which float32 rounding decides the greedy pick


def assert_greedy_equal(model, prompt: list[int], expected: list[int], got: list[int]) -> None:
    """``got`` is the baseline's greedy ``expected``, or leaves it only where the target's top two
    logits tie within float32 rounding: both tokens are then greedy picks, and a pass over more
    tokens may round the other way (property tests draw thousands of cases; such ties turn up)."""
    if got == expected:
        return
    i = next((j for j, (a, b) in enumerate(zip(expected, got)) if a != b), None)
    assert i is not None, f"one output is a prefix of the other: {len(got)} vs {len(expected)} tokens"
    with torch.no_grad():
        logits = model(torch.tensor([list(prompt) + expected[:i]])).logits[0, -1].double()
    top = torch.topk(logits, 2)
    gap = float(top.values[0] - top.values[1])
    assert gap < FLOAT32_TIE and {expected[i], got[i]} <= set(top.indices.tolist()), (
        f"outputs differ at token {i} ({got[i]} vs the baseline's {expected[i]}) without a float32 tie "
        f"(top-2 gap {gap:.3g})")


@pytest.fixture(scope="session")
def tiny_qwen():
    return make_tiny_model("qwen2", layers=2, seed=0)


@pytest.fixture(scope="session")
def tiny_llama():
    return make_tiny_model("llama", layers=2, seed=0)


@pytest.fixture(scope="session")
def tiny_draft(tiny_qwen):
    """A draft for ``tiny_qwen`` that accepts often but not always."""
    return perturbed_copy(tiny_qwen, noise=0.3)


@pytest.fixture(autouse=True)
def specpilot_home(tmp_path, monkeypatch, request):
    """Every test gets its own SPECPILOT_HOME (database, settings) in a temporary folder, and no peers
    set up (``specpilot peers setup`` venvs and llama-server live outside it), so a run's peers do not
    depend on what this machine has built; the slow group uses the machine's real peers."""
    home = tmp_path / "specpilot-home"
    monkeypatch.setenv("SPECPILOT_HOME", str(home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    if request.node.get_closest_marker("slow") is None:
        monkeypatch.setenv("SPECPILOT_PEERS", str(tmp_path / "no-peers"))
        # guidance measures this machine's cost curve before advising where none is stored: with the built-in
        # models fetched that loads the 1.5B target for a minute, so the fast group advises unmeasured instead
        # (tests/test_guidance.py measures through a stand-in)
        import tools.agent_tools.advice as advice
        from tools.errors import DependencyError

        def not_measured(ctx, method, target, backend):
            raise DependencyError("no measuring in the fast test group")

        monkeypatch.setattr(advice, "measure_machine", not_measured)
    return home


@pytest.fixture(autouse=True)
def nothing_installed(monkeypatch):
    """The install tool finds none of the packages a test names installed, so that the approval of an install is
    what the tests see whatever this machine holds (gguf is installed here, for one). Returns the real check, for
    the tests of leaving installed packages out (``monkeypatch.setattr(install, "installed_version", it)``)."""
    import tools.agent_tools.install as install

    real = install.installed_version
    monkeypatch.setattr(install, "installed_version", lambda spec: None)
    return real


@pytest.fixture(scope="session")
def spec_bench_path():
    path = SHARED / "data" / "spec_bench_dev.jsonl"
    if not path.exists():
        pytest.skip("../shared/data/spec_bench_dev.jsonl is not beside this checkout")
    return path


TINY_WORDS = "def return the a of to in is for and if else print x y n i value list string function python write code"


def make_tiny_model_folder(folder: Path, eos: bool = False, kind: str = "qwen2", seed: int = 0) -> Path:
    """Save a tiny random checkpoint (``kind``: qwen2 or llama) with a word-level tokenizer to ``folder``
    (a local model ref)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<eos>": 1}
    for word in TINY_WORDS.split():
        vocab.setdefault(word, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    # eos=False: no stop token at all, neither the generation config's nor the tokenizer's, so every generation
    # runs the full max_new_tokens whatever the random weights emit (they depend on transformers' init code)
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>",
                            eos_token="<eos>" if eos else None).save_pretrained(folder)
    model = make_tiny_model(kind, layers=2, seed=seed, vocab=VOCAB)
    if not eos:
        model.generation_config.eos_token_id = None
    model.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A tiny model folder usable as --target / --draft."""
    return make_tiny_model_folder(tmp_path_factory.mktemp("tiny-model"))


@pytest.fixture
def cli_in_process(capfd):
    """``specpilot ARGS`` through the real command line (agent.cli.main.main) in this process, returned as
    a CompletedProcess. For tests of what a command prints, stores or refuses, not of the process itself:
    a new interpreter spends 3-10 s importing torch and transformers before it does anything. Output is
    read at the file-descriptor level (capfd), so what a library writes is seen as a real process shows
    it; the models a command loaded are released after it, so each call loads as a fresh process does."""
    from agent.cli.main import main
    from tools.bench import context

    def run(*args: str) -> subprocess.CompletedProcess:
        # main's logging.basicConfig is a no-op under pytest (the root logger has pytest's handlers): the
        # handler it gives a real process shows warnings and logged tracebacks on stderr here too
        shown = logging.StreamHandler()
        shown.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        shown.setLevel(logging.WARNING)
        root = logging.getLogger()
        handlers, level = list(root.handlers), root.level  # `chat` moves all logging to its file
        environ = dict(os.environ)  # main quiets the libraries through environment variables
        capfd.readouterr()
        root.addHandler(shown)
        try:
            code = main(list(args))
        except SystemExit as exc:  # argparse's usage errors exit, as in a real process
            code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
        finally:
            for handler in set(root.handlers) - set(handlers):
                root.removeHandler(handler)
                if handler is not shown:
                    handler.close()
            for handler in handlers:
                if handler not in root.handlers:
                    root.addHandler(handler)
            root.setLevel(level)
            logging.captureWarnings(False)
            os.environ.clear()
            os.environ.update(environ)
            context.release_models()
        out, err = capfd.readouterr()
        return subprocess.CompletedProcess(["specpilot", *args], code, out, err)

    return run


# ---------------------------------------------------------------- the order the two test workers take files in
# `--dist loadfile` hands each worker whole files, those with the most tests first: files with few but slow
# tests (real processes, thousands of samples) came last, and one worker ran them alone for a minute or two
# after the other had finished. The workers take these files first, slowest first (measured with
# --durations=0); the rest follow as before. A file missing here only starts later.
SLOW_FILES_FIRST = (
    "test_mcp_hardening.py", "test_hostile_caller.py", "test_speculative_lossless.py", "test_chat_onboarding.py", "test_mcp.py",
    "test_cli_run.py", "test_kill_during_run.py", "test_speculative.py", "test_approval_gates.py",
    "test_json_cli.py", "test_lookahead.py", "test_eagle.py", "test_prompt_lookup.py", "test_chat_pty.py",
    "test_answers_pty.py", "test_upstream_peers.py", "test_mcp_polish.py", "test_medusa_data.py", "test_llamacpp_cli.py",
    "test_medusa.py", "test_memory_concurrency.py", "test_local_brain.py",
)


def pytest_configure(config):
    if config.getoption("dist", "no") == "loadfile":
        config.option.loadscopereorder = False  # xdist's own order (most tests first) is replaced below


def pytest_collection_modifyitems(config, items):
    """In an xdist worker (both collect alike): the slow files first, then the others, most tests first."""
    if not hasattr(config, "workerinput"):
        return
    tests_in = Counter(item.path for item in items)
    rank = {name: i for i, name in enumerate(SLOW_FILES_FIRST)}
    # a stable sort: each file's tests stay together, in their order
    items.sort(key=lambda item: (rank.get(item.path.name, len(rank)), -tests_in[item.path]))


@pytest.fixture(scope="session")
def tiny_heads_dir(tmp_path_factory):
    """Tiny Medusa heads for the tiny model folder (hidden 32, the conftest vocabulary)."""
    from tools.engine.medusa import MedusaHeads
    from tools.medusa.checkpoint import save_heads

    torch.manual_seed(0)
    heads = MedusaHeads(32, VOCAB, 3, 1, shared_projection=True)
    with torch.no_grad():
        for p in heads.parameters():
            p.normal_(0.0, 0.3)
    return save_heads(heads, tmp_path_factory.mktemp("tiny-heads"))
