"""The picture serving engineers decide with: output throughput against time per output token, one line per
method (and K) through its concurrency levels, for a measurement on vLLM or an endpoint."""

from __future__ import annotations

import time
from pathlib import Path

from memory import helpers
from tools.report.files import write_new
from tools.report.results import draw_sweep_chart, sweep_chart_png


def throughput_latency_chart(result: dict, command: str = "bench", folder: Path | None = None) -> Path | None:
    """Draw ``result``'s rows (tools.bench.vllm_bench) as a PNG in the reports folder; its path, or None
    where no row has both figures."""
    rows = [r for r in result.get("rows") or [] if r.get("tpot_p50_ms") and r.get("throughput_tok_s")]
    if not rows:
        return None
    folder = folder or helpers.home_dir() / "reports"
    name = f"vllm-{command}-task{result.get('task_id')}-{time.strftime('%Y%m%d-%H%M%S')}"
    hw = (result.get("hardware") or {}).get("name") or "?"
    data = {"name": name, "rows": rows, "dtype": result.get("dtype"), "hardware": {"name": hw}}
    return draw_sweep_chart(data, folder / f"{name}.png")


def rows_from_runs(runs: list[dict]) -> list[dict]:
    """The load figures of stored vLLM / endpoint runs as chart rows (method, K, concurrency, throughput, TPOT)."""
    rows = []
    for run in runs:
        level = (run.get("method_extra") or {}).get("level") or {}
        concurrency = (run.get("settings") or {}).get("concurrency")
        if run.get("backend") in ("vllm", "endpoint") and concurrency and level.get("tpot_p50_ms"):
            rows.append({"method": run.get("method"), "k": (run.get("params") or {}).get("k"), "concurrency": concurrency,
                         "throughput_tok_s": run.get("tokens_per_s"), "tpot_p50_ms": level["tpot_p50_ms"]})
    return rows


def chart_serving(runs: list[dict], path: Path) -> Path | None:
    """Throughput against TPOT p50 of stored vLLM runs (a report's serving chart), written as a new file at ``path``;
    None without such runs."""
    rows = rows_from_runs(runs)
    if not rows:
        return None
    hw = (runs[0].get("hardware") or {}).get("name") or "?"
    write_new(path, sweep_chart_png({"name": path.stem, "rows": rows, "dtype": runs[0].get("dtype"),
                                     "hardware": {"name": hw}}))
    return path
