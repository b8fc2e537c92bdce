"""What stored run records say, in figures and words: the quality line of one run and the pooled
per-category summary of benchmark runs. Plain Python over record dicts (no torch), so the report
and the CLI can read it without loading a model library.
"""

from __future__ import annotations

import statistics
from collections import defaultdict


def quality_text(record: dict) -> str:
    """Quality loss as measured: identical to the baseline, or where and how the output differs."""
    lossy = " (typical acceptance is lossy by design)" if record.get("lossy") else ""
    if record.get("matches_baseline") is None:
        return "not compared token by token (sampling)" + lossy
    if record["matches_baseline"]:
        return f"identical to baseline ({record.get('new_tokens')} tokens)"
    div = record.get("first_divergence") or {}
    pos = div.get("position")
    if div.get("kind") == "near_tie":
        return f"differs from token {pos}: floating-point near-tie (margin {div.get('margin'):.3g}), not an algorithm error"
    if div.get("kind") == "length":
        return f"differs from token {pos}: one output stopped earlier"
    return (f"differs from token {pos}: baseline token {div.get('baseline_token')}, method token "
            f"{div.get('method_token')} (margin {div.get('margin')}): real mismatch") + lossy


def lossless(record: dict) -> bool:
    """Whether a run kept the target's output: identical to the baseline, different only at a diagnosed
    floating-point near-tie, or sampled by a method that is lossless in distribution (not typical acceptance)."""
    if record.get("lossy"):
        return False
    if record.get("matches_baseline") is None:
        return True
    return bool(record["matches_baseline"]) or (record.get("first_divergence") or {}).get("kind") == "near_tie"


def auto_row(record: dict, picked: str, reason: str) -> dict:
    """auto's row for one prompt: the run of the method it picked, under the name auto (its peers counted once,
    with the run itself)."""
    return {**record, "method": "auto", "auto_picked": picked, "auto_reason": reason, "peers": {}}


def method_stats(runs: list[dict]) -> dict:
    """Pooled figures of one method over several prompts.

    speedup = total baseline time / total method time (each prompt's baseline timed beside the method);
    speedup_mean/min/max are over the per-prompt speedups; mean accepted tokens per step = total new
    tokens / total target forward passes; acceptance = total accepted / total drafted.
    """
    base = sum(r["baseline_wall_time_s"] for r in runs)
    wall = sum(r["wall_time_s"] for r in runs)
    per_prompt = [r["speedup"] for r in runs if r.get("speedup") is not None]
    forwards = sum((r.get("steps") or 0) + 1 for r in runs)
    drafted = sum(r.get("tokens_drafted") or 0 for r in runs)
    accepted = sum(r.get("tokens_accepted") or 0 for r in runs)
    compared = [r for r in runs if r.get("matches_baseline") is not None]
    return {
        "prompts": len(runs),
        "speedup": base / wall if wall else None,
        "speedup_mean": statistics.mean(per_prompt) if per_prompt else None,
        "speedup_min": min(per_prompt) if per_prompt else None,
        "speedup_max": max(per_prompt) if per_prompt else None,
        "mean_accepted_per_step": sum(r.get("new_tokens") or 0 for r in runs) / forwards if forwards else None,
        "acceptance_rate": accepted / drafted if drafted else None,
        "tokens_per_s": sum(r.get("new_tokens") or 0 for r in runs) / wall if wall else None,
        "identical": sum(1 for r in compared if r["matches_baseline"]),
        "compared": len(compared),
        "lossless": sum(1 for r in runs if lossless(r)),
        "run_ids": [r["run_id"] for r in runs if r.get("run_id")],
    }


def peer_stats(runs: list[dict]) -> dict[str, dict]:
    """Pooled speedup of each transformers peer, one measurement per prompt (the first record carrying it)."""
    seen: dict[str, dict[str, dict]] = defaultdict(dict)  # peer -> prompt -> (peer row, baseline time)
    for r in runs:
        for name, row in (r.get("peers") or {}).items():
            seen[name].setdefault(str(r.get("prompt")), {"peer": row, "baseline": r["baseline_wall_time_s"]})
    out = {}
    for name, by_prompt in seen.items():
        base = sum(v["baseline"] for v in by_prompt.values())
        wall = sum(v["peer"]["wall_time_s"] for v in by_prompt.values())
        out[name] = {"prompts": len(by_prompt), "speedup": base / wall if wall else None,
                     "identical": sum(1 for v in by_prompt.values() if v["peer"].get("matches_baseline"))}
    return out


def baseline_drift(runs: list[dict]) -> dict | None:
    """How much the baseline's own timings differed on each prompt ((slowest - fastest) / median of a record's
    ``baseline_times``: a benchmark times it before and after the methods), as {"prompts", "mean", "max"} over
    the prompts timed at least twice; None when none was. A speedup within this of 1.00x cannot be told from
    the baseline on this machine at this time."""
    seen: dict[str, float] = {}
    for r in runs:
        times = r.get("baseline_times") or []
        if len(times) >= 2 and statistics.median(times) > 0:
            seen.setdefault(str(r.get("prompt")), (max(times) - min(times)) / statistics.median(times))
    if not seen:
        return None
    return {"prompts": len(seen), "mean": statistics.mean(seen.values()), "max": max(seen.values())}


def summarise(runs: list[dict]) -> dict:
    """{"categories": {category: {label: stats}}, "overall": {label: stats}, "peers": {...}} for bench runs
    (records with a ``category``), labels being the methods (peers under "peers")."""
    by_cat: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    overall: dict[str, list] = defaultdict(list)
    for r in runs:
        by_cat[str(r.get("category"))][r["method"]].append(r)
        overall[r["method"]].append(r)
    categories = {c: {m: method_stats(rs) for m, rs in ms.items()} for c, ms in by_cat.items()}
    totals = {m: method_stats(rs) for m, rs in overall.items()}
    return {
        "categories": categories,
        "overall": totals,
        "recommended": {"categories": {c: recommend(by) for c, by in categories.items()}, "overall": recommend(totals)},
        "peers": {"categories": {c: peer_stats([r for rs in ms.values() for r in rs]) for c, ms in by_cat.items()},
                  "overall": peer_stats(runs)},
        "baseline_drift": baseline_drift([r for r in runs if "auto_picked" not in r]),  # auto's rows repeat runs
    }


def recommend(by_method: dict[str, dict]) -> dict:
    """The method to use where ``by_method`` (label -> :func:`method_stats`, or compare rows) was measured:
    the fastest whose every run was lossless and faster than plain decoding, else plain decoding itself.
    {"method", "speedup", "mean_accepted_per_step", "reason"}."""
    eligible = {m: s for m, s in by_method.items() if m != "baseline" and s.get("speedup") is not None
                and s.get("lossless", 0) == s.get("prompts", 1) and s["speedup"] > 1.0}
    if not eligible:
        return {"method": "baseline", "speedup": 1.0, "mean_accepted_per_step": 1.0,
                "reason": "no method was both faster than plain decoding and lossless here"}
    best = max(eligible, key=lambda m: eligible[m]["speedup"])
    s = eligible[best]
    return {"method": best, "speedup": s["speedup"], "mean_accepted_per_step": s.get("mean_accepted_per_step"),
            "reason": f"fastest lossless method measured here ({s['speedup']:.2f}x)"}


def fit_vs_eval(fit: dict, held_out: dict) -> dict:
    """Two bench summaries side by side (the fit half's and the eval half's, same settings): each method's
    overall speedup and tokens per step on both with the eval/fit ratio, and per category the method the
    fit half recommends with what it measured on the eval half (a choice made before the eval prompts ran).
    ``picked_mean`` is the mean of those eval speedups over the categories; ``best_after_mean`` the mean of
    each eval category's own best (chosen after the fact, for contrast)."""
    methods = {}
    for m, f in fit["overall"].items():
        e = held_out["overall"].get(m)
        if e is None or not f.get("speedup") or e.get("speedup") is None:
            continue
        methods[m] = {"fit_speedup": f["speedup"], "eval_speedup": e["speedup"],
                      "ratio": e["speedup"] / f["speedup"], "fit_tokens_per_step": f.get("mean_accepted_per_step"),
                      "eval_tokens_per_step": e.get("mean_accepted_per_step")}
    picks = {}
    for cat, by in sorted(held_out["categories"].items()):
        chosen = fit["recommended"]["categories"].get(cat, {}).get("method") if cat in fit["categories"] else None
        if chosen is None:
            continue
        measured = 1.0 if chosen == "baseline" else (by.get(chosen) or {}).get("speedup")
        picks[cat] = {"method": chosen, "fit_speedup": fit["recommended"]["categories"][cat]["speedup"],
                      "eval_speedup": measured, "eval_best": recommend(by)}
    got = [p["eval_speedup"] for p in picks.values() if p["eval_speedup"] is not None]
    after = [p["eval_best"]["speedup"] for p in picks.values()]
    return {"methods": methods, "picks": picks, "picked_mean": statistics.mean(got) if got else None,
            "best_after_mean": statistics.mean(after) if after else None}
