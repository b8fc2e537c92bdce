"""The demo: every method compared on a coding prompt with the default (offline) models, stored in
memory, then the Markdown report with its charts. It sits above both the measurement (tools.bench)
and the report (tools.report), which must not import each other upward.
"""

from __future__ import annotations

from memory import Store
from tools import models
from tools.bench.compare import DEMO_PROMPT, CompareInput, Progress, compare, own_params
from tools.bench.context import load_cached
from tools.bench.tune import sized_lookahead_params
from tools.report.markdown import write_report

__all__ = ["DEMO_PROMPT", "demo"]


def demo(store=None, progress: Progress = None, max_new_tokens: int = 128, repeats: int = 1, dtype: str = "auto",
         target: str = models.DEFAULT_TARGET, draft: str | None = None) -> dict:
    """The demo: all five methods on a coding prompt (default: the offline default models), stored in
    memory, then a Markdown report with PNG charts. Medusa uses the shipped (or trained) heads and is
    reported as not run when there are none. Lookahead without saved parameters is sized to this
    machine's forward-pass cost curve (measured now, a few seconds, when none is stored). Returns the
    comparison (``compare``) and the report's paths (``report``)."""
    store = store if store is not None else Store()
    params, sources = {}, {}
    if not own_params("lookahead", store.get_params("lookahead")):
        if progress:
            progress(f"loading target {target}")
        loaded = load_cached(target, dtype, None)
        params["lookahead"], reasoning = sized_lookahead_params(store, loaded, progress)
        sources["lookahead"] = f"sized to this machine: {reasoning}"
    inp = CompareInput(prompt=DEMO_PROMPT, target=target, draft=draft, max_new_tokens=max_new_tokens,
                       repeats=repeats, dtype=dtype, params=params)
    result = compare(inp, store=store, progress=progress, sources=sources)
    runs = [store.get_run(r) for r in result["run_ids"]]
    report = write_report(runs, fmt="md", task=store.get_task(result["task_id"])) if runs else {}
    return {"compare": result, "report": report}
