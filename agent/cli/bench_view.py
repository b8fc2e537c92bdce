"""What ``specpilot bench`` and ``compare`` print besides their main tables: the method recommended per
category (or for the prompt), and, for ``bench --prompts both``, the fit half beside the eval half."""

from __future__ import annotations

from rich.table import Table

from agent.render import fmt


def recommendation_text(rec: dict | None) -> str | None:
    """One recommendation in words: the method and its measured speedup, or plain decoding and why."""
    if not rec:
        return None
    if rec["method"] == "baseline":
        return f"plain decoding ({rec['reason']})"
    return f"{rec['method']} ({fmt(rec['speedup'], 2, 'x')}, {fmt(rec.get('mean_accepted_per_step'))} tok/step)"


def recommended_lines(summary: dict) -> list[str]:
    """Per category and overall, the fastest lossless method that beat plain decoding (bench's summary)."""
    recs = summary.get("recommended") or {}
    if not recs:
        return []
    cells = [f"{cat}: {recommendation_text(rec)}" for cat, rec in sorted(recs.get("categories", {}).items())]
    return ["recommended here (fastest lossless method per category, measured in this run):", *(f"  {c}" for c in cells),
            f"  overall: {recommendation_text(recs.get('overall'))}"]


def drift_line(summary: dict) -> str | None:
    """How far apart the baseline's two timings on each prompt were (before and after the methods): the
    noise every speedup in the table carries."""
    drift = summary.get("baseline_drift")
    if not drift:
        return None
    return (f"baseline timed before and after the methods on each prompt: {drift['mean']:.0%} apart on average, "
            f"{drift['max']:.0%} at most ({drift['prompts']} prompts); a speedup that close to 1.00x cannot be told "
            "from plain decoding on this machine at this time")


def fit_eval_table(result: dict) -> Table | None:
    """``bench --prompts both``: each method on the fit and the eval half, and per category the fit half's
    pick measured on the eval half (a choice made before the eval prompts ran)."""
    both = result.get("fit_vs_eval")
    if not both:
        return None
    table = Table(title="fit half against eval half (same settings; eval/fit near 1.00 = nothing overfitted)")
    for col in ("method", "fit speedup", "eval speedup", "eval/fit", "fit tok/step", "eval tok/step"):
        table.add_column(col, justify="left" if col == "method" else "right")
    for m, row in both["methods"].items():
        table.add_row(m, fmt(row["fit_speedup"], 2, "x"), fmt(row["eval_speedup"], 2, "x"), fmt(row["ratio"]),
                      fmt(row["fit_tokens_per_step"]), fmt(row["eval_tokens_per_step"]))
    picks = Table(title="the fit half's pick per category, measured on the eval half")
    for col in ("category", "picked on fit", "fit speedup", "eval speedup", "eval's own best (after the fact)"):
        picks.add_column(col, justify="left" if col in ("category", "picked on fit") else "right")
    for cat, p in both["picks"].items():
        best = p["eval_best"]
        picks.add_row(cat, p["method"], fmt(p["fit_speedup"], 2, "x"), fmt(p["eval_speedup"], 2, "x"),
                      f"{best['method']} {fmt(best['speedup'], 2, 'x')}")
    picks.add_row("mean", "", "", fmt(both["picked_mean"], 2, "x"), fmt(both["best_after_mean"], 2, "x"), style="bold")
    outer = Table.grid()
    outer.add_row(table)
    outer.add_row(picks)
    return outer
