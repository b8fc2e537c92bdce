"""The demo: every method compared on a coding prompt with the default (offline) models, stored in
memory, then the Markdown report with its charts. It sits above both the measurement (tools.bench)
and the report (tools.report), which must not import each other upward.
"""

from __future__ import annotations

from memory import Store
from tools import models
from tools.bench.compare import Progress, compare
from tools.bench.inputs import DEMO_PROMPT, CompareInput
from tools.report.markdown import write_report

__all__ = ["DEMO_PROMPT", "demo"]


def demo(store=None, progress: Progress = None, max_new_tokens: int = 128, repeats: int = 1, dtype: str = "auto",
         target: str = models.DEFAULT_TARGET, draft: str | None = None) -> dict:
    """The demo: all five methods on a coding prompt (default: the offline default models), stored in
    memory, then a Markdown report with PNG charts. Medusa uses the shipped (or trained) heads and is
    reported as not run when there are none. Parameters not saved in memory are sized to this
    machine's forward-pass cost curve by compare (tools.bench.sizing; the curve is measured once,
    about half a minute on a slow CPU, when none is stored), each with its reason in the run.
    Returns the comparison (``compare``) and the report's paths (``report``)."""
    store = store if store is not None else Store()
    inp = CompareInput(prompt=DEMO_PROMPT, target=target, draft=draft, max_new_tokens=max_new_tokens,
                       repeats=repeats, dtype=dtype)
    result = compare(inp, store=store, progress=progress)
    runs = [store.get_run(r) for r in result["run_ids"]]
    report = write_report(runs, fmt="md", task=store.get_task(result["task_id"])) if runs else {}
    return {"compare": result, "report": report}
