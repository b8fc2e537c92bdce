"""Reports of stored runs: a Markdown file (table, settings, hardware, versions, run ids), JSON, and PNG
charts made with matplotlib (Agg): speedup per method with its spread, acceptance per draft position,
and speedup per category for benchmark runs.

Every figure is copied from the stored runs (or pooled from them as stated beside it). Files are
written under the user's own folder ($SPECPILOT_HOME/reports/ unless ``out`` says otherwise); nothing
here sends anything off the machine (sharing goes through the share approval gate).
"""

from __future__ import annotations

import io
import json
import os
import re
import secrets
from collections import defaultdict
from pathlib import Path

from memory.migrations import utc_now
from memory.store import home_dir
from tools.bench.summary import method_stats, quality_text, recommend, summarise
from tools.engine.params import METHODS
from tools.errors import ParameterError
from tools.report.files import exists_already, make_folder, write_new
from tools.report.serving import chart_serving

FORMATS = ("md", "json", "png")
# the methods' chart colours are tools.engine.methods METHODS[...].colour; these are the peers'
PEER_COLOURS = {"hf_assisted": "#aec7e8", "hf_assisted_int8": "#c5b0d5", "hf_prompt_lookup": "#ffbb78"}
PEER_SHORT = {"hf_assisted": "HF assisted", "hf_assisted_int8": "HF assisted int8", "hf_prompt_lookup": "HF prompt lookup"}
PROMPT_SHOWN = 1500


def reports_dir() -> Path:
    """$SPECPILOT_HOME/reports (created if missing)."""
    folder = home_dir() / "reports"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


# ---------------------------------------------------------------------------- which runs
def select_runs(store, run_ids: list[str] | None = None, last: bool = False,
                task_id: int | None = None) -> tuple[list[dict], dict | None]:
    """The runs a report covers and their task (if one task): given ids, a task's runs, or ``last``:
    the newest run's task (all its runs) or, without a task, the newest run (also the default when
    nothing is given). Oldest first."""
    if sum((bool(run_ids), last, task_id is not None)) > 1:
        raise ParameterError("choose the runs one way", hint="give run ids, or --task ID, or --last")
    if run_ids:
        runs = [store.get_run(r) for r in run_ids]
        tasks = {r.get("task_id") for r in runs}
        task = store.get_task(tasks.pop()) if len(tasks) == 1 and None not in tasks else None
        return runs, task
    if task_id is None:
        newest = store.last_run()
        if newest is None:
            raise ParameterError("there are no stored runs to report",
                                 hint="measure something first: specpilot compare, bench or run")
        if newest.get("task_id") is None:
            return [newest], None
        task_id = int(newest["task_id"])
    task = store.get_task(task_id)
    runs = list(reversed(store.list_runs(limit=100000, task_id=task_id)))
    if not runs:
        raise ParameterError(f"task {task_id} has no stored runs", hint="pick another task or give run ids")
    if task["kind"] == "compare":  # the order the methods were asked in, not the order they finished
        order = {m: i for i, m in enumerate(task["plan"])}
        runs.sort(key=lambda r: order.get(r["method"], len(order)))
    return runs, task


# ---------------------------------------------------------------------------- figures
def label_of(run: dict) -> str:
    """How a run is named in tables and charts: the method, or the method and the swept setting."""
    sweep = run.get("sweep")
    if isinstance(sweep, dict) and sweep.get("label"):
        return f"{run['method']} {sweep['label']}"
    return str(run["method"])


def paired_speedups(run: dict) -> list[float]:
    """baseline / method time per repeat (each round timed the two side by side)."""
    base, times = run.get("baseline_times") or [], run.get("times") or []
    return [b / t for b, t in zip(base, times) if t]


def group_by_label(runs: list[dict]) -> dict[str, list[dict]]:
    groups: dict[str, list[dict]] = {}
    for r in runs:
        groups.setdefault(label_of(r), []).append(r)
    return groups


def speedup_rows(runs: list[dict]) -> list[dict]:
    """Per label (and per transformers peer): pooled speedup and the spread of the per-repeat ratios."""
    rows = []
    for label, group in group_by_label(runs).items():
        base = sum(r["baseline_wall_time_s"] for r in group)
        wall = sum(r["wall_time_s"] for r in group)
        ratios = [s for r in group for s in paired_speedups(r)] or [r["speedup"] for r in group]
        rows.append({"label": label, "method": group[0]["method"], "speedup": base / wall if wall else None,
                     "min": min(ratios), "max": max(ratios), "n": len(ratios), "runs": len(group)})
    peers: dict[str, dict] = {}
    for r in runs:
        for name, peer in (r.get("peers") or {}).items():
            key = (name, str(r.get("prompt")), str(r.get("settings_key") or r.get("run_id")))
            entry = peers.setdefault(name, {"seen": set(), "base": 0.0, "wall": 0.0, "ratios": []})
            if key[1] in entry["seen"]:
                continue
            entry["seen"].add(key[1])
            entry["base"] += r["baseline_wall_time_s"]
            entry["wall"] += peer["wall_time_s"]
            entry["ratios"] += [b / t for b, t in zip(r.get("baseline_times") or [], peer.get("times") or []) if t]
    for name, e in peers.items():
        ratios = e["ratios"] or [e["base"] / e["wall"]]
        rows.append({"label": PEER_SHORT.get(name, name), "method": name, "speedup": e["base"] / e["wall"],
                     "min": min(ratios), "max": max(ratios), "n": len(ratios), "runs": len(e["seen"])})
    return rows


def acceptance_by_position(runs: list[dict]) -> dict[str, list[tuple[int, float, int]]]:
    """Per label: (draft position from 1, accepted / drafted at that position, drafted) pooled over runs."""
    out = {}
    for label, group in group_by_label(runs).items():
        drafted: dict[int, int] = defaultdict(int)
        accepted: dict[int, int] = defaultdict(int)
        for r in group:
            for i, d in enumerate(r.get("drafted_by_position") or []):
                drafted[i] += int(d)
            for i, a in enumerate(r.get("accepted_by_position") or []):
                accepted[i] += int(a)
        points = [(i + 1, accepted[i] / drafted[i], drafted[i]) for i in sorted(drafted) if drafted[i]]
        if points:
            out[label] = points
    return out


def category_speedups(runs: list[dict]) -> dict[str, dict[str, float]]:
    """{category: {label: pooled speedup}} for runs with a category (benchmark runs)."""
    cats: dict[str, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for r in runs:
        if r.get("category") is not None:
            cats[str(r["category"])][label_of(r)].append(r)
    return {c: {label: sum(r["baseline_wall_time_s"] for r in g) / sum(r["wall_time_s"] for r in g)
                for label, g in by.items()} for c, by in cats.items()}


def caption(runs: list[dict]) -> str:
    """Hardware, dtype, new tokens and repeats of the runs (distinct values joined)."""
    def distinct(values):
        return ", ".join(sorted({str(v) for v in values if v is not None})) or "?"

    hw = distinct((r.get("hardware") or {}).get("name") for r in runs)
    tokens = distinct((r.get("settings") or {}).get("max_new_tokens") for r in runs)
    return (f"{hw} · {distinct(r.get('dtype') for r in runs)} · {tokens} new tokens max · "
            f"median of {distinct(r.get('repeats') for r in runs)} repeat(s)")


# ---------------------------------------------------------------------------- charts
def _figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=110)
    FigureCanvasAgg(fig)
    return fig


def _save_png(fig, path: Path) -> Path:
    """Write ``fig`` as a new PNG file at ``path`` (never over a file, :func:`write_new`) and return ``path``."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    write_new(path, buf.getvalue())
    return path


def _method_spec(method: str):
    """The method table's entry for ``method`` (None for peers and unknown names)."""
    return METHODS.get(method)


def _colour(method: str, i: int) -> str:
    palette = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22"]
    spec = _method_spec(method)
    return spec.colour if spec is not None else PEER_COLOURS.get(method, palette[i % len(palette)])


def _value_label(ax, x: float, y: float, text: str, fontsize: int = 9, rotation: int = 0) -> None:
    """A value written just above ``y``, on a white box so grid and reference lines never cross it."""
    ax.annotate(text, (x, y), xytext=(0, 3), textcoords="offset points", ha="center", va="bottom",
                fontsize=fontsize, fontweight="bold", rotation=rotation,
                bbox={"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": "none", "alpha": 0.85})


def chart_speedup(runs: list[dict], path: Path) -> Path | None:
    """Bar chart: pooled speedup per method (and peer) with min-max whiskers of the per-repeat ratios
    (over every repeat of every prompt)."""
    rows = [r for r in speedup_rows(runs) if r["speedup"] is not None]
    if not rows:
        return None
    fig = _figure(max(6.5, 1.25 * len(rows) + 2.5), 4.8)
    ax = fig.add_subplot()
    x = list(range(len(rows)))
    values = [r["speedup"] for r in rows]
    lower = [max(0.0, v - r["min"]) for v, r in zip(values, rows)]
    upper = [max(0.0, r["max"] - v) for v, r in zip(values, rows)]
    ax.bar(x, values, color=[_colour(r["method"], i) for i, r in enumerate(rows)], width=0.6,
           yerr=[lower, upper], capsize=5, ecolor="#333333", zorder=2)
    ax.axhline(1.0, color="#333333", linewidth=1, linestyle="--", zorder=1, label="baseline (1.0x)")
    for xi, r in zip(x, rows):
        _value_label(ax, xi, max(r["max"], r["speedup"]), f"{r['speedup']:.2f}x")
    tilt = len(rows) > 5 or max(len(r["label"]) for r in rows) > 12
    ax.set_xticks(x, [r["label"] for r in rows], rotation=25 if tilt else 0, ha="right" if tilt else "center")
    ax.set_ylabel("speedup vs plain generation (x)")
    ax.set_ylim(0, max(max(r["max"] for r in rows), 1.0) * 1.2)
    ax.set_title("Speedup per method (bar: pooled; whiskers: min-max over repeats and prompts)", fontsize=11)
    ax.legend(fontsize=8, loc="upper right", framealpha=0.9)
    fig.text(0.01, 0.01, caption(runs), fontsize=7, color="#555555")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return _save_png(fig, path)


MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


def chart_acceptance(runs: list[dict], path: Path) -> Path | None:
    """Line chart: acceptance rate at each draft position (1 = first drafted token), per method."""
    data = acceptance_by_position(runs)
    if not data:
        return None
    fig = _figure(8.5, 4.6)
    ax = fig.add_subplot()
    longest = 1
    for i, (label, points) in enumerate(data.items()):
        nudge = (i - (len(data) - 1) / 2) * 0.04  # equal rates of two methods stay visible side by side
        xs = [p[0] + nudge for p in points]
        ys = [p[1] for p in points]
        longest = max(longest, points[-1][0])
        ax.plot(xs, ys, marker=MARKERS[i % len(MARKERS)], markersize=7, linewidth=1.6,
                linestyle=("-", "--", "-.", ":")[i % 4], label=f"{label} ({sum(p[2] for p in points)} proposed)",
                color=_colour(label.split()[0], i) if len(data) <= 5 else None, alpha=0.9)
    ax.set_xticks(range(1, longest + 1))
    ax.set_ylim(-0.03, 1.05)
    ax.set_xlabel("draft position (1 = first proposed token after the accepted prefix)")
    ax.set_ylabel("accepted / proposed at that position")
    ax.set_title("Acceptance per draft position", fontsize=11)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    fig.text(0.01, 0.01, caption(runs), fontsize=7, color="#555555")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return _save_png(fig, path)


def chart_categories(runs: list[dict], path: Path) -> Path | None:
    """Grouped bars: pooled speedup per category for each method (benchmark runs only)."""
    cats = category_speedups(runs)
    if not cats:
        return None
    labels = sorted({label for by in cats.values() for label in by})
    overall = {label: sum(r["baseline_wall_time_s"] for r in g) / sum(r["wall_time_s"] for r in g)
               for label, g in group_by_label([r for r in runs if r.get("category") is not None]).items()}
    names = sorted(cats) + ["overall"]
    cats["overall"] = overall
    fig = _figure(min(13.0, max(7.0, 0.5 * len(names) * max(1, len(labels)) + 2)), 4.8)
    ax = fig.add_subplot()
    width = 0.8 / max(1, len(labels))
    for j, label in enumerate(labels):
        xs = [i - 0.4 + width * (j + 0.5) for i in range(len(names))]
        ys = [cats[c].get(label, 0.0) for c in names]
        ax.bar(xs, ys, width=width * 0.95, label=label, color=_colour(label.split()[0], j))
        for xi, y in zip(xs, ys):
            if y:
                _value_label(ax, xi, y, f"{y:.2f}", fontsize=7, rotation=90 if len(labels) > 3 else 0)
    ax.axhline(1.0, color="#333333", linewidth=1, linestyle="--", zorder=1)
    ax.set_xticks(range(len(names)), names, rotation=20, ha="right")
    ax.set_ylabel("speedup vs plain generation (x)")
    top = max((v for by in cats.values() for v in by.values()), default=1.0)
    ax.set_ylim(0, max(top, 1.0) * 1.25)
    ax.set_title("Speedup per category (total baseline time / total method time)", fontsize=11)
    ax.legend(fontsize=8, ncols=min(len(labels), 5), loc="upper left")
    fig.text(0.01, 0.01, caption(runs), fontsize=7, color="#555555")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return _save_png(fig, path)


CHART_NAMES = ("speedup", "acceptance", "categories", "serving")


def make_charts(runs: list[dict], folder: Path, stem: str) -> dict[str, Path]:
    """Write every chart that has data, each as a new file (``STEM-NAME.png``, NAME from :data:`CHART_NAMES`);
    return {"speedup"|"acceptance"|"categories"|"serving": path} (serving: throughput against TPOT per method
    and concurrency level, for runs measured on vLLM or an endpoint). When one cannot be written, those
    written before it are removed and a ParameterError says why."""
    make_folder(folder)
    makers = dict(zip(CHART_NAMES, (chart_speedup, chart_acceptance, chart_categories, chart_serving)))
    out = {}
    try:
        for name, maker in makers.items():
            path = maker(runs, folder / f"{stem}-{name}.png")
            if path is not None:
                out[name] = path
    except BaseException:
        _remove(out.values())
        raise
    return out


# ---------------------------------------------------------------------------- markdown
def fmt(value, digits: int = 2, suffix: str = "") -> str:
    """A figure for display: floats to ``digits`` places, None as a dash."""
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.{digits}f}{suffix}"
    return f"{value}{suffix}"


def versus_baseline(record: dict) -> str:
    """Whether a run's output matched the baseline, or where and how it first differs."""
    if record.get("matches_baseline") is None:
        return "n/a (sampling)"
    if record["matches_baseline"]:
        return "identical"
    div = record.get("first_divergence") or {}
    kind = {"near_tie": "near-tie", "mismatch": "MISMATCH", "length": "length"}.get(div.get("kind"), "differs")
    return f"{kind} at token {div.get('position')}"


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def output_text(run: dict) -> str:
    """Whether the output matched the baseline, as measured."""
    return quality_text(run)


def _training_of(method: str) -> str:
    """What the method needs trained (from the method table), for runs stored without it."""
    spec = _method_spec(method)
    return spec.training if spec is not None else "none"


def _draft_of(run: dict) -> str:
    """Whether the run's method needs a draft model (from the method table), for runs stored without it."""
    spec = _method_spec(run["method"])
    return f"yes: {run.get('draft')}" if spec is not None and spec.needs_draft else "no"


def results_table(runs: list[dict]) -> list[str]:
    """One row per run: figures as stored."""
    lines = ["| method | run id | wall time | tokens/s | speedup (min–max of repeats) | acceptance | tokens/step | "
             "output vs baseline | training required | draft model | params |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        ratios = paired_speedups(r)
        spread = f" ({min(ratios):.2f}–{max(ratios):.2f})" if len(ratios) > 1 else ""
        acc = fmt(r["acceptance_rate"] * 100, 1, "%") if r.get("acceptance_rate") is not None else "—"
        params = ", ".join(f"{k}={v}" for k, v in (r.get("params") or {}).items() if v is not None) or "—"
        if r.get("params_source"):
            params += f" ({r['params_source']})"
        cells = [label_of(r), r.get("run_id"), fmt(r.get("wall_time_s"), 3, " s"), fmt(r.get("tokens_per_s")),
                 fmt(r.get("speedup"), 2, "x") + spread, acc, fmt(r.get("mean_accepted_per_step")), output_text(r),
                 r.get("training_required") or _training_of(r["method"]),
                 r.get("draft_required") or _draft_of(r), params]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return lines


def peers_table(runs: list[dict]) -> list[str]:
    rows = [r for r in speedup_rows(runs) if r["method"] in PEER_SHORT]
    if not rows:
        return []
    lines = ["", "### transformers peers (timed in the same rounds)", "",
             "| peer | prompts | speedup (min–max of repeats) |", "|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['label']} | {r['runs']} | {r['speedup']:.2f}x ({r['min']:.2f}–{r['max']:.2f}) |")
    return lines


def category_table(runs: list[dict]) -> list[str]:
    """Per-category and overall figures for benchmark runs (pooled as tools.bench.summary.summarise states)."""
    bench_runs = [r for r in runs if r.get("category") is not None and not r.get("sweep")]
    if not bench_runs:
        return []
    summary = summarise(bench_runs)
    lines = ["Per category. Speedup = total baseline time / total method time over the category's prompts; tokens/step = total "
             "new tokens / total target forward passes.", "",
             "| category | method | prompts | speedup | per-prompt min–max | tokens/step | acceptance | identical |",
             "|---|---|---|---|---|---|---|---|"]
    for cat, by in [*sorted(summary["categories"].items()), ("overall", summary["overall"])]:
        for method, s in sorted(by.items()):
            acc = fmt(s["acceptance_rate"] * 100, 1, "%") if s["acceptance_rate"] is not None else "—"
            lines.append(f"| {_cell(cat)} | {method} | {s['prompts']} | {fmt(s['speedup'], 2, 'x')} | "
                         f"{fmt(s['speedup_min'])}–{fmt(s['speedup_max'])} | {fmt(s['mean_accepted_per_step'])} | {acc} | "
                         f"{s['identical']}/{s['compared']} |")
    recs = summary["recommended"]
    picks = "; ".join(f"{cat} {_picked(rec)}" for cat, rec in [*sorted(recs["categories"].items()),
                                                              ("overall", recs["overall"])])
    drift = summary["baseline_drift"]
    noise = ([f"The baseline, timed before and after the methods on each prompt, differed by {drift['mean']:.0%} on "
              f"average and {drift['max']:.0%} at most ({drift['prompts']} prompts): speedups that close to 1.00x "
              "cannot be told from plain decoding here.", ""] if drift else [])
    return lines + ["", f"Recommended (the fastest lossless method faster than plain decoding): {picks}.", "", *noise]


def _picked(rec: dict) -> str:
    return "plain decoding" if rec["method"] == "baseline" else f"{rec['method']} {fmt(rec['speedup'], 2, 'x')}"


def recommendation_lines(runs: list[dict]) -> list[str]:
    """One prompt's runs (a comparison): the method recommended for it on this machine."""
    measured = [r for r in runs if r.get("method") != "baseline" and r.get("speedup") is not None and not r.get("sweep")]
    if not measured or len({str(r.get("prompt")) for r in runs}) != 1 or any(r.get("category") for r in runs):
        return []
    rec = recommend({label: method_stats(rs) for label, rs in group_by_label(measured).items()})
    why = f" ({rec['reason']})" if rec["method"] == "baseline" else ""
    return [f"Recommended on this machine for this prompt (the fastest lossless method faster than plain decoding): "
            f"{_picked(rec)}{why}.", ""]


def _distinct_block(title: str, values: list[dict]) -> list[str]:
    seen: list[str] = []
    for v in values:
        text = json.dumps(v or {}, sort_keys=True)
        if text not in seen:
            seen.append(text)
    lines = [f"## {title}", ""]
    for text in seen:
        for k, v in json.loads(text).items():
            lines.append(f"- {k}: {v}")
        if len(seen) > 1:
            lines.append("")
    return lines + [""]


def render_markdown(runs: list[dict], task: dict | None = None, charts: dict[str, Path] | None = None,
                    folder: Path | None = None) -> str:
    """The Markdown report of ``runs``; chart links are relative to ``folder`` (where the .md goes)."""
    title = f"specpilot report — task {task['id']} ({task['kind']})" if task else "specpilot report"
    lines = [f"# {title}", "", f"Generated {utc_now()}. Every figure is copied from the stored runs listed below "
             "(pooled figures say how they were pooled).", ""]
    if task:
        lines += [f"Request: {task['request']}", "", f"Status: {task['status']}"
                  + (f"; left: {', '.join(task['left'])}" if task.get("left") else ""), ""]
        notes = [n["text"] for n in task.get("notes") or []]
        if notes:
            lines += ["Notes:", ""] + [f"- {_cell(n)}" for n in notes] + [""]
    prompts = list(dict.fromkeys(str(r.get("prompt")) for r in runs))
    if len(prompts) == 1:
        text = prompts[0] if len(prompts[0]) <= PROMPT_SHOWN else prompts[0][:PROMPT_SHOWN] + " …"
        lines += ["## Prompt", "", "```text", text.replace("```", "'''"), "```", ""]
    else:
        lines += [f"{len(prompts)} prompts.", ""]
    per_category = category_table(runs)
    lines += [f"## Results ({caption(runs)})", ""]
    if per_category:  # a benchmark: the summary first, every run after it
        lines += per_category + peers_table(runs) + ["", "## Every run", ""] + results_table(runs) + [""]
    else:
        lines += results_table(runs) + peers_table(runs) + [""] + recommendation_lines(runs)
    divergences = [r for r in runs if r.get("first_divergence")]
    if divergences:
        lines += ["## Where outputs differ from the baseline", ""]
        lines += [f"- {r['run_id']} ({label_of(r)}): {_cell((r['first_divergence'] or {}).get('explanation', ''))}"
                  for r in divergences] + [""]
    if charts:
        lines += ["## Charts", ""]
        for name, path in charts.items():
            rel = Path(path).name if folder is None or Path(path).parent == folder else str(path)
            lines += [f"![{name}]({rel})", ""]
    settings = [{**(r.get("settings") or {}), "chat template": r.get("chat"), "dtype": r.get("dtype"),
                 "device_map": r.get("device_map"), "repeats": r.get("repeats"), "target": r.get("target")}
                for r in runs]
    lines += _distinct_block("Settings", settings)
    lines += _distinct_block("Hardware", [r.get("hardware") for r in runs])
    lines += _distinct_block("Versions", [r.get("versions") for r in runs])
    lines += ["## Runs", "", "| run id | stored at | method | category | prompt |", "|---|---|---|---|---|"]
    for r in runs:
        prompt = str(r.get("prompt") or "")
        shown = prompt[:60] + ("…" if len(prompt) > 60 else "")
        lines.append(f"| {r['run_id']} | {r.get('created_at', '')} | {_cell(label_of(r))} | {r.get('category') or '—'} | "
                     f"{_cell(shown)} |")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------- files
def _target_paths(out: str | Path | None, stem: str) -> tuple[Path, str]:
    """(folder, stem) for the files: ``out`` is a folder, or a file path whose name gives the stem."""
    if out is None:
        return reports_dir(), stem
    if isinstance(out, str) and not out.strip():
        raise ParameterError("--out is empty", hint="give a folder or a file name, or leave --out out for a new "
                                                    "file in the reports folder")
    path = Path(out).expanduser()
    if path.suffix.lower() in (".md", ".json", ".png", ".markdown"):
        return path.parent, path.stem
    return path, stem


def default_stem(runs: list[dict], task: dict | None) -> str:
    """report-<UTC time>-<task N | first run id>-<random>: two reports in one second never share a name, and
    nobody can plant a file at the name beforehand."""
    when = re.sub(r"[^0-9T]", "", utc_now()[:19])
    return f"report-{when}-" + (f"task{task['id']}" if task else str(runs[0]["run_id"])) + f"-{secrets.token_hex(3)}"


def _remove(paths) -> None:
    """Delete files this report created before a later one failed: no half report is left behind."""
    for path in paths:
        Path(path).unlink(missing_ok=True)


def write_report(runs: list[dict], fmt: str = "md", out: str | Path | None = None, task: dict | None = None) -> dict:
    """Write the report files and return their paths: {"format", "markdown"|"json", "charts": {...},
    "run_ids"}. ``md`` writes the Markdown and its PNG charts beside it; ``png`` only the charts;
    ``json`` every stored key of every run (all digits)."""
    if fmt not in FORMATS:
        raise ParameterError(f"unknown report format {fmt!r}", hint=f"use one of: {', '.join(FORMATS)}")
    if not runs:
        raise ParameterError("there are no runs to report", hint="measure something first")
    folder, stem = _target_paths(out, default_stem(runs, task))
    names = ([f"{stem}.{fmt}"] if fmt != "png" else []) + ([f"{stem}-{n}.png" for n in CHART_NAMES] if fmt != "json"
                                                          else [])
    for name in names:  # a clash found after some files are written would leave half a report
        if os.path.lexists(folder / name):
            raise exists_already(folder / name)
    make_folder(folder)
    result: dict = {"format": fmt, "run_ids": [r["run_id"] for r in runs], "charts": {}}
    if fmt == "json":
        path = folder / f"{stem}.json"
        payload = {"generated_at": utc_now(), "task": task, "runs": runs}
        write_new(path, json.dumps(payload, indent=1, ensure_ascii=False, default=str))
        result["json"] = str(path)
        return result
    charts = make_charts(runs, folder, stem)
    result["charts"] = {k: str(v) for k, v in charts.items()}
    if fmt == "md":
        path = folder / f"{stem}.md"
        try:
            write_new(path, render_markdown(runs, task, charts, folder))
        except BaseException:
            _remove(charts.values())
            raise
        result["markdown"] = str(path)
    elif not charts:
        raise ParameterError("these runs have nothing to chart", hint="use --format md or json")
    return result

