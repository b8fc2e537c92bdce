"""Human output: rich tables for runs and model lists (stdout), progress on stderr."""

from __future__ import annotations

import json
import sys

from rich.console import Console
from rich.table import Table

from tools.bench.inputs import PEER_LABELS
from tools.engine.params import shown_value
from tools.report.markdown import fmt, versus_baseline

out = Console(width=None if sys.stdout.isatty() else 140)
err = Console(stderr=True)


def peer_label(name: str) -> str:
    """How a peer (timed beside a method) is named in tables."""
    return PEER_LABELS.get(name, name)


def run_table(record: dict) -> Table:
    """One run as a table: baseline, the method, and any transformers peers measured beside it."""
    hw = record.get("hardware", {})
    table = Table(
        title=f"{record['method']} vs baseline — run {record.get('run_id', '?')}",
        caption=f"{hw.get('name', '?')} · {record.get('dtype')} · {record.get('new_tokens')} new tokens · "
        f"median of {record.get('repeats')} (after warm-up)",
    )
    for col in ("method", "wall time", "tokens/s", "speedup", "acceptance", "tokens/step", "output"):
        table.add_column(col, justify="right" if col not in ("method", "output") else "left")
    table.add_row("baseline", fmt(record["baseline_wall_time_s"], 2, " s"), fmt(record["baseline_tokens_per_s"]),
                  "1.00x", "—", "1.00", "reference")
    if record["method"] != "baseline":
        table.add_row(
            record["method"], fmt(record["wall_time_s"], 2, " s"), fmt(record["tokens_per_s"]),
            fmt(record["speedup"], 2, "x"),
            fmt(record["acceptance_rate"] * 100, 1, "%") if record.get("acceptance_rate") is not None else "—",
            fmt(record["mean_accepted_per_step"]), versus_baseline(record),
        )
    for name, peer in (record.get("peers") or {}).items():
        label = peer_label(name)
        same = "n/a" if peer.get("matches_baseline") is None else ("identical" if peer["matches_baseline"] else "differs")
        acceptance = "—" if peer.get("acceptance") is None else fmt(peer["acceptance"] * 100, 1, "%")
        per_step = "—" if peer.get("tokens_per_step") is None else fmt(peer["tokens_per_step"])
        table.add_row(label, fmt(peer["wall_time_s"], 2, " s"), fmt(peer["tokens_per_s"]),
                      fmt(peer["speedup"], 2, "x"), acceptance, per_step, same)
    return table


def gated_steps(record: dict) -> str:
    """How many steps the cost gate kept plain (verifying guesses would not have paid on this machine), in
    words; "" when none was (ngram counts declined drafts; draft and lookahead declined steps)."""
    extra = record.get("method_extra") or {}
    declined = extra.get("declined_steps") or extra.get("declined_drafts") or 0
    if not declined:
        return ""
    steps = record.get("steps")
    of = f" of {steps}" if steps else ""
    return (f"cost gate: {declined}{of} steps were plain one-token steps, no guess verified: on this machine's "
            "cost curve a fuller step was expected to give fewer tokens than its pass costs")


def show_run(record: dict, as_json: bool = False) -> None:
    """Print a run record as a table with its details, or as one JSON object."""
    if as_json:
        print(json.dumps(record, default=str))
        return
    out.print(run_table(record))
    for why in ("method", "draft"):  # auto's method and the draft chosen: which and why, before the parameters
        if (record.get("sizing") or {}).get(why):
            out.print(record["sizing"][why], highlight=False)
    params = ", ".join(f"{k}={shown_value(v)}" for k, v in (record.get("params") or {}).items())
    if params:
        source = f" ({record['params_source']})" if record.get("params_source") else ""
        out.print(f"params{source}: {params}")
    for name, why in (record.get("sizing") or {}).items():
        if str(why).startswith("sized") or name == "cost_curve":
            out.print(f"  {name}: {why}", highlight=False)
    declined = gated_steps(record)
    if declined:
        out.print(declined, highlight=False)
    div = record.get("first_divergence")
    if div:
        out.print(f"divergence: {div.get('explanation')}")
    if record.get("lossy"):
        out.print("note: this mode is lossy by design (typical acceptance); see the output comparison above")
    out.print(f"versions: {', '.join(f'{k} {v}' for k, v in (record.get('versions') or {}).items())}")
    if record.get("not_stored"):
        out.print(f"not stored: {record['not_stored']}")


def runs_table(rows: list[dict]) -> Table:
    table = Table(title="stored runs (newest first)")
    for col in ("run id", "when", "method", "target", "speedup", "tokens/s", "acceptance", "output", "prompt"):
        table.add_column(col)
    for r in rows:
        prompt = str(r.get("prompt", ""))
        table.add_row(
            str(r.get("run_id")), str(r.get("created_at", ""))[:19], str(r.get("method")), str(r.get("target")),
            fmt(r.get("speedup"), 2, "x"), fmt(r.get("tokens_per_s")),
            fmt(r["acceptance_rate"] * 100, 1, "%") if r.get("acceptance_rate") is not None else "—",
            versus_baseline(r), prompt[:40] + ("…" if len(prompt) > 40 else ""),
        )
    return table
