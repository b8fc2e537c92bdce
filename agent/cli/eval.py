"""The evaluation commands: ``specpilot compare``, ``bench``, ``report`` and ``tune``.

Tables go to stdout, progress to stderr; ``--json`` prints one JSON object with all digits.
"""

from __future__ import annotations

import argparse
import json
import sys
import types
from pathlib import Path

from rich.markup import escape
from rich.table import Table

from agent.cli.bench_view import drift_line, fit_eval_table, recommendation_text, recommended_lines
from agent.cli.options import (PEERS_HELP, add_backend_option, add_generation_options, add_method_argument,
                               add_method_options, method_params, method_table, prompt_text)
from tools.bench.prompt_sets import load_prompt_set
from agent.cli.serving import add_serving_options, run_serving, serving_methods, single_prompt, wants_serving
from agent.render import err, fmt, gated_steps, out, peer_label
from memory import Store
from tools import models
from tools.agent_tools.saved_params import validate_saved_params
from tools.engine.params import shown_value
from tools.errors import ParameterError
from tools.report.markdown import select_runs, write_report
from tools.report.results import (README_BEGIN, check_name, default_results_dir, results_in, save_bench_result,
                                  write_results_docs)


# ---------------------------------------------------------------------------- shared
def _bench() -> types.SimpleNamespace:
    """The measuring modules: compare, context (models, engines, sizing), suite (bench), tune and protocol
    (the hardware's name)."""
    # tools.bench loads torch: imported when a command runs (or `tune` is parsed), not for `specpilot --help`
    from tools.bench import compare, context, protocol, suite, tune

    return types.SimpleNamespace(compare=compare, context=context, protocol=protocol, suite=suite, tune=tune)


bench_modules = _bench  # for the other command modules (guide)


def _methods(values: list[str] | None, default: list[str], extra: tuple[str, ...] = ()) -> list[str]:
    """Methods from ``--methods a b`` or ``--methods a,b`` (``extra``: names beside the table's, bench's auto);
    unknown names are a clear error."""
    if not values:
        return list(default)
    names = [n.strip() for v in values for n in v.split(",") if n.strip()]
    known = (*method_table().METHOD_NAMES, *extra)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ParameterError(f"unknown method(s): {', '.join(unknown)}", hint=f"choose from: {', '.join(known)}")
    return names


def _given_params(args, methods: list[str]) -> dict[str, dict]:
    """Each method's own options given on the command line (unset ones left to memory or defaults)."""
    given_by_method = {}
    for method in methods:
        given = {k: v for k, v in method_params(argparse.Namespace(**{**vars(args), "method": method})).items()
                 if v is not None}
        if given:
            given_by_method[method] = given
    return given_by_method


def _generation(args) -> dict:
    return {"target": args.target or models.DEFAULT_TARGET, "draft": args.draft,
            "max_new_tokens": args.max_new_tokens, "temperature": args.temperature, "top_p": args.top_p,
            "top_k": args.top_k, "seed": args.seed, "chat": args.chat, "dtype": args.dtype,
            "device_map": args.device_map, "threads": args.threads, "repeats": args.repeats}


def _progress(status):
    """A progress callback: a spinner line, and lasting lines for stored runs and methods not run."""
    def show(text: str) -> None:
        if "stored as run" in text or "not run:" in text:
            err.print(f"[dim]{text}[/dim]")
        status.update(text)

    return show


def _print_json(obj) -> None:
    print(json.dumps(obj, default=str))


def _fmt(value, digits: int = 2, suffix: str = "") -> str:
    return fmt(value, digits, suffix)


def _pct(value) -> str:
    return _fmt(value * 100, 1, "%") if value is not None else "—"


# ---------------------------------------------------------------------------- compare
def compare_table(result: dict) -> Table:
    """The comparison: one row per method with figures, requirements and measured quality."""
    hw = result.get("hardware") or {}
    engine = " on llama.cpp" if result.get("backend") == "llamacpp" else ""
    table = Table(title=f"compare{engine} — task {result['task_id']}",
                  caption=f"{hw.get('name', '?')} · {result.get('dtype')} · {result['settings']['max_new_tokens']} "
                          f"new tokens max · median of {result.get('repeats')} (after warm-up) · baseline "
                          f"{_fmt(result.get('baseline_tokens_per_s'))} tok/s")
    right = ("time", "tok/s", "speedup", "accept", "tok/step")
    for col in ("method", "time", "tok/s", "speedup", "accept", "tok/step", "output vs baseline", "training",
                "draft model", "run id"):
        table.add_column(col, justify="right" if col in right else "left", no_wrap=col in ("method", "run id"),
                         min_width=24 if col == "output vs baseline" else None)
    for row in result["rows"]:
        if row["status"] != "measured":
            table.add_row(row["method"], "—", "—", "—", "—", "—", f"not run: {row['short_reason']}",
                          row["training_required"], row["draft_required"], "—")
            continue
        table.add_row(row["method"], _fmt(row["wall_time_s"], 2, " s"), _fmt(row["tokens_per_s"]),
                      _fmt(row["speedup"], 2, "x"), _pct(row["acceptance_rate"]), _fmt(row["mean_accepted_per_step"]),
                      row["quality"], row["training_required"], row["draft_required"], row["run_id"])
    for name, peer in (result.get("peers") or {}).items():
        same = "n/a" if peer.get("matches_baseline") is None else ("identical" if peer["matches_baseline"] else "differs")
        table.add_row(peer_label(name), _fmt(peer["wall_time_s"], 2, " s"), _fmt(peer["tokens_per_s"]),
                      _fmt(peer["speedup"], 2, "x"), "—", "—", same, "none",
                      "yes" if name.startswith("hf_assisted") else "no", "(in each run)")
    return table


ENGINE_NAMES = {"transformers": "transformers", "llamacpp": "llama.cpp"}


def backends_table(result: dict) -> Table:
    """A comparison on several engines: per engine its methods and peers, tokens/s absolute, speedup
    against that engine's own baseline."""
    hw = result.get("hardware") or {}
    by = result["by_backend"]
    table = Table(title=f"compare on {' and '.join(ENGINE_NAMES.get(b, b) for b in by)} — tasks "
                        f"{', '.join(str(t) for t in result['task_ids'])}",
                  caption=f"{hw.get('name', '?')} · same {len(result['prompt_ids'])} prompt ids on every engine · "
                          f"{result['settings']['max_new_tokens']} new tokens max · median of {result.get('repeats')} "
                          "(after warm-up) · speedup against each engine's own baseline")
    right = ("time", "tok/s", "speedup", "accept", "tok/step")
    for col in ("engine", "method", "time", "tok/s", "speedup", "accept", "tok/step", "output vs baseline", "run id"):
        table.add_column(col, justify="right" if col in right else "left", no_wrap=col in ("method", "run id"),
                         min_width=24 if col == "output vs baseline" else None)
    for backend, res in by.items():
        name = f"{ENGINE_NAMES.get(backend, backend)} ({res.get('dtype')})"
        for row in res["rows"]:
            if row["status"] != "measured":
                table.add_row(name, row["method"], "—", "—", "—", "—", "—", f"not run: {row['short_reason']}", "—")
                continue
            table.add_row(name, row["method"], _fmt(row["wall_time_s"], 2, " s"), _fmt(row["tokens_per_s"]),
                          _fmt(row["speedup"], 2, "x"), _pct(row["acceptance_rate"]),
                          _fmt(row["mean_accepted_per_step"]), row["quality"], row["run_id"])
        for peer, fig in (res.get("peers") or {}).items():
            same = "n/a" if fig.get("matches_baseline") is None else ("identical" if fig["matches_baseline"] else "differs")
            table.add_row(name, peer_label(peer), _fmt(fig["wall_time_s"], 2, " s"), _fmt(fig["tokens_per_s"]),
                          _fmt(fig["speedup"], 2, "x"), "—", "—", same, "(in each run)")
        table.add_section()
    return table


def _print_params(rows: list[dict]) -> None:
    """Each measured method's parameters and where they came from; the reasons of those sized to this machine."""
    for row in rows:
        if row.get("status") == "measured" and row.get("params"):
            params = ", ".join(f"{k}={shown_value(v)}" for k, v in row["params"].items())
            out.print(f"{row['method']} params ({row.get('params_source')}): {params}")
            for name, why in (row.get("sizing") or {}).items():
                if why.startswith("sized"):
                    out.print(f"[dim]  {name}: {escape(why)}[/dim]", highlight=False)
            declined = gated_steps(row)
            if declined:
                out.print(f"  {declined}", highlight=False)


def _run_and_show(args, name: str, run, table, details=None, reports=None) -> int:
    """Run a compare or bench task under a status line, write its report when asked, then print its
    JSON, or its table, the methods not run, ``details(result)`` and where the report is.
    ``reports(result)`` writes the reports instead (and ``details`` says where they are). A comparison that
    measured nothing (every method refused here) exits 1, after its result says why."""
    with err.status(f"{name}: starting…") as status:
        result = run(_progress(status))
    if args.report and reports:
        reports(result)
    elif args.report:
        result["report"] = _write_task_report(result["task_id"], result["run_ids"])
    nothing = name == "compare" and not result.get("run_ids")
    if args.json:
        _print_json(result)
        return 1 if nothing else 0
    out.print(table(result))
    for method, reason in result["not_run"].items():
        out.print(f"{method}: not run: {reason}")
    if details:
        details(result)
    if not reports:
        _print_report_paths(result.get("report"), result["task_id"])
    if nothing:
        err.print("error: nothing was measured: every method was refused here (the reasons are above)", highlight=False)
        return 1
    return 0


def cmd_compare(args) -> int:
    if wants_serving(args):  # vLLM or an endpoint: its own speculative modes, per concurrency level
        return run_serving(args, serving_methods(args.methods, ["ngram", "draft"]), [single_prompt(args)], None, "compare")
    comparing = _bench().compare
    methods = _methods(args.methods, list(method_table().METHOD_NAMES))
    backends = list(dict.fromkeys(args.backend or ["transformers"]))
    inp = comparing.CompareInput(prompt=prompt_text(args), methods=methods, medusa_heads=args.medusa_heads,
                       params=_given_params(args, methods), peers=args.peers, backend=backends[0], **_generation(args))
    if len(backends) > 1:
        return _compare_backends(args, comparing, inp, backends)

    def details(result: dict) -> None:
        _print_params(result["rows"])
        if result.get("recommended"):
            out.print(f"recommended here: {recommendation_text(result['recommended'])}", highlight=False)
        if result.get("medusa_heads") and "medusa" in result["run_ids_by_method"]:
            out.print(f"medusa heads: {result['medusa_heads']}")
        out.print(f"versions: {', '.join(f'{k} {v}' for k, v in result['versions'].items())}")

    return _run_and_show(args, "compare", lambda progress: comparing.compare(inp, progress=progress), compare_table, details)


def _compare_backends(args, comparing, inp, backends: list[str]) -> int:
    """``compare --backend A --backend B``: one comparison per engine, shown in one table."""

    def reports(result: dict) -> None:
        result["reports"] = {b: _write_task_report(r["task_id"], r["run_ids"]) for b, r in result["by_backend"].items()}

    def details(result: dict) -> None:
        for backend, res in result["by_backend"].items():
            out.print(f"[bold]{ENGINE_NAMES.get(backend, backend)}[/bold]: baseline "
                      f"{_fmt(res.get('baseline_tokens_per_s'))} tok/s, task {res['task_id']}")
            _print_params(res["rows"])
            _print_report_paths((result.get("reports") or {}).get(backend), res["task_id"])
        out.print(f"versions: {', '.join(f'{k} {v}' for k, v in result['versions'].items())}")

    return _run_and_show(args, "compare", lambda progress: comparing.compare_backends(inp, backends, progress=progress),
                         backends_table, details, reports)


def _write_task_report(task_id: int, run_ids: list[str]) -> dict:
    store = Store()
    if not run_ids:
        return {}
    return write_report([store.get_run(r) for r in run_ids], fmt="md", task=store.get_task(task_id))


def _print_report_paths(report: dict | None, task_id: int) -> None:
    if report and report.get("markdown"):
        out.print(f"report: {report['markdown']}")
        for path in report.get("charts", {}).values():
            out.print(f"chart: {path}")
    else:
        out.print(f"write a report with: specpilot report --task {task_id}")


def cmd_demo(args) -> int:
    """``specpilot demo``: every method on a coding prompt with the default models, then the report."""
    from tools.agent_tools.demo import demo

    with err.status("demo: starting…") as status:
        result = demo(progress=_progress(status), max_new_tokens=args.max_new_tokens, repeats=args.repeats,
                      dtype=args.dtype)
    if args.json:
        _print_json(result)
        return 0
    comparison = result["compare"]
    out.print(compare_table(comparison))
    _print_params(comparison["rows"])
    for method, reason in comparison["not_run"].items():
        out.print(f"{method}: not run: {reason}")
    out.print(f"stored in memory as task {comparison['task_id']} (runs {', '.join(comparison['run_ids'])})")
    _print_report_paths(result["report"], comparison["task_id"])
    return 0


# ---------------------------------------------------------------------------- bench
def bench_table(result: dict) -> Table:
    """Per-category and overall speedup and tokens per step for each method (and peers)."""
    summary = result["summary"]
    methods = [m for m in result["methods"] if m in summary["overall"]]
    peer_names = sorted(summary["peers"]["overall"])
    hw = result.get("hardware") or {}
    half = "eval half, " if result.get("halves") else ""
    table = Table(title=f"bench — {half}task {result['task_id']} ({result['prompts']} prompts: {result['measured']} "
                        f"measured now, {result['reused']} from memory)",
                  caption=f"{hw.get('name', '?')} · {result.get('dtype')} · speedup = total baseline time / total "
                          "method time; tok/step = new tokens / target forwards")
    table.add_column("category")
    table.add_column("n", justify="right")
    for m in methods:
        table.add_column(f"{m} speedup", justify="right")
        table.add_column(f"{m} tok/step", justify="right")
    for p in peer_names:
        table.add_column(f"{peer_label(p)} speedup", justify="right")
    cats = [*sorted(summary["categories"].items()), ("overall", summary["overall"])]
    for cat, by in cats:
        peers = summary["peers"]["overall"] if cat == "overall" else summary["peers"]["categories"].get(cat, {})
        n = max((s["prompts"] for s in by.values()), default=0)
        cells = [cat, str(n)]
        for m in methods:
            s = by.get(m)
            cells += [_fmt(s["speedup"], 2, "x") if s else "—", _fmt(s["mean_accepted_per_step"]) if s else "—"]
        cells += [_fmt(peers[p]["speedup"], 2, "x") if p in peers else "—" for p in peer_names]
        table.add_row(*cells, style="bold" if cat == "overall" else None)
    return table


def cmd_bench(args) -> int:
    if wants_serving(args):
        if args.save_result:
            check_name(args.save_result)
        prompts = load_prompt_set(args.prompts, args.category, args.limit)
        return run_serving(args, serving_methods(args.methods, ["ngram"]), prompts, args.prompts or "eval", "bench")
    suite = _bench().suite
    methods = _methods(args.methods, suite.BENCH_METHODS, (method_table().AUTO,))
    # auto has no options of its own; each method it may pick among keeps those given for it
    measured = [m for m in methods if m != method_table().AUTO] or list(method_table().ACCELERATED)
    inp = suite.BenchInput(prompts=args.prompts, category=args.category, limit=args.limit, methods=methods,
                     medusa_heads=args.medusa_heads, params=_given_params(args, measured), peers=args.peers,
                     backend=args.backend, fresh=args.fresh, **_generation(args))

    def details(result: dict) -> None:
        for line in [drift_line(result["summary"]), *recommended_lines(result["summary"])]:
            if line:
                out.print(line, highlight=False)
        both = fit_eval_table(result)
        if both is not None:
            out.print(both)
        if result.get("result_file"):
            out.print(f"result: {result['result_file']}")

    def measured(progress) -> dict:
        result = suite.bench(inp, progress=progress)
        if args.save_result:  # benchmarks/results/NAME.json: the per-prompt rows and the summary
            result["result_file"] = str(save_bench_result(args.save_result, result))
        return result

    if args.save_result:
        check_name(args.save_result)  # a bad name is refused before anything is measured
    return _run_and_show(args, "bench", measured, bench_table, details)


# ---------------------------------------------------------------------------- report
def cmd_report(args) -> int:
    if args.results:
        return cmd_report_results(args)
    store = Store()
    runs, task = select_runs(store, run_ids=args.run_ids, last=args.last, task_id=args.task)
    result = write_report(runs, fmt=args.format, out=args.out, task=task)
    if args.json:
        _print_json(result)
        return 0
    for key in ("markdown", "json"):
        if result.get(key):
            out.print(f"report: {result[key]}")
    for path in result["charts"].values():
        out.print(f"chart: {path}")
    out.print(f"runs: {', '.join(result['run_ids'])}")
    return 0


def cmd_report_results(args) -> int:
    """``report --results DIR``: docs/results.md (or --out), its charts and the README's results block, generated
    from the result files in DIR (tools.report.results)."""
    if args.out is not None and not args.out.strip():
        raise ParameterError("--out is empty", hint="give the page's file name, such as docs/results.md")
    folder = Path(args.results)
    results_in(folder)  # a missing or empty folder is named before --out is asked for
    repo = folder.resolve().parent.parent  # benchmarks/results -> the repository
    if args.out:
        target = Path(args.out)
    elif folder.resolve() == default_results_dir().resolve():
        target = repo / "docs" / "results.md"
    else:  # a docs/results.md beside some other folder may be anyone's page
        raise ParameterError(f"say where the results page made from {folder} goes",
                             hint="pass --out PAGE.md (docs/results.md is the default only for this checkout's "
                                  "benchmarks/results)")
    readme = Path(args.readme) if args.readme else repo / "README.md"
    if not args.readme and not _has_results_block(readme):
        readme = None  # no README with a results block beside those results: only the page
    result = write_results_docs(folder, target, readme)
    if args.json:
        _print_json(result)
        return 0
    for key in ("markdown", "readme"):
        if result.get(key):
            out.print(f"{'results page' if key == 'markdown' else 'README block'}: {result[key]}")
    for path in result["charts"]:
        out.print(f"chart: {path}")
    out.print(f"from {len(result['results'])} result file(s) in {folder}")
    return 0


def _has_results_block(readme: Path) -> bool:
    """Whether ``readme`` is a file with a results block; one that cannot be read has none (it was not asked for)."""
    try:
        return readme.is_file() and README_BEGIN in readme.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False


# ---------------------------------------------------------------------------- tune
def tune_table(result: dict) -> Table:
    """The sweep: one row per setting, best measured speedup first."""
    hw = result.get("hardware") or {}
    table = Table(title=f"tune {result['method']} — task {result['task_id']} ({result['prompts']} prompts)",
                  caption=f"{hw.get('name', '?')} · {result.get('dtype')} · {result.get('max_new_tokens')} new tokens "
                          "max · speedup = total baseline time / total method time")
    for col in ("setting", "speedup", "per-prompt min–max", "tokens/step", "acceptance", "identical", "runs"):
        table.add_column(col, justify="left" if col in ("setting", "runs") else "right")
    for row in result["rows"]:
        if row["status"] != "measured":
            table.add_row(row["label"], "—", "—", "—", "—", "—", f"not run: {row.get('reason')}")
            continue
        table.add_row(row["label"], _fmt(row["speedup"], 2, "x"), f"{_fmt(row['speedup_min'])}–{_fmt(row['speedup_max'])}",
                      _fmt(row["mean_accepted_per_step"]), _pct(row["acceptance_rate"]),
                      f"{row['identical']}/{row['compared']}", ", ".join(row["run_ids"][:3]))
    return table


def _confirm(args):
    """y/n on a terminal, yes with --yes, and no question at all otherwise (nothing saved)."""
    if args.yes:
        return lambda question: True
    if sys.stdin.isatty():
        return lambda question: input(f"{question} [y/N] ").strip().lower() in ("y", "yes")
    return None


def save_checked_params(store: Store, method: str, changes: dict) -> dict:
    """Merge ``changes`` into ``method``'s saved parameters in one transaction, refusing (ParameterError naming
    the field) a result a run could not read, e.g. an invalid value saved earlier; return what is saved."""
    return store.update_params(method, changes, check=lambda merged: validate_saved_params(method, merged))


def cmd_tune(args) -> int:
    tuning = _bench().tune
    gen = _generation(args)
    grid = json.loads(args.grid) if args.grid else None
    limit = {"limit": args.limit} if args.limit is not None else {}
    inp = tuning.TuneInput(method=args.method, prompts=args.prompts, category=args.category, medusa_heads=args.medusa_heads,
                    grid=grid, backend=args.backend, **limit, **gen)
    confirm = _confirm(args)
    if args.json and confirm is not None and not args.yes:
        confirm = None  # JSON output is for scripts: no question on stdout
    with err.status("tune: starting…") as status:
        result = tuning.tune(inp, progress=_progress(status), confirm=None)
    # ask after the spinner has stopped, so the question is readable
    if result["best"] is not None and confirm is not None:
        question = f"save {result['best']['label']} as your {args.method} parameters?"
        if not args.json:
            out.print(tune_table(result))
            out.print(result["recommendation"])
        if confirm(question):  # merged into what is saved now, in one transaction (not the sweep's start)
            result["would_save"] = save_checked_params(Store(), args.method, result["best"]["params"])
            result["saved"] = True
        if args.json:
            _print_json(result)
        else:
            out.print("saved to memory" if result["saved"] else "not saved")
        return 0
    if args.json:
        _print_json(result)
        return 0
    out.print(tune_table(result))
    out.print(result["recommendation"])
    if result["best"] is not None:
        out.print(f"not saved: no terminal to ask on. To save it, rerun with --yes (the sweep is stored as task "
                  f"{result['task_id']}; `specpilot tune --method {args.method} --from-last-sweep --yes` saves its "
                  "best setting without measuring again)")
    return 0


def cmd_tune_from_last_sweep(args) -> int:
    """Save the best setting of the newest stored sweep (no measuring), after the same question."""
    # torch takes seconds to import: only when the command runs
    import torch

    bench = _bench()

    store = Store()
    target = args.target or models.DEFAULT_TARGET
    hardware = bench.protocol.hardware_info("cuda" if torch.cuda.is_available() else "cpu")["name"]
    best = bench.tune.best_measured_params(store, args.method, target, hardware)
    if best is None:
        out.print(f"no stored {args.method} sweep on {target} on {hardware}: run `specpilot tune --method {args.method}`")
        return 2
    out.print(best["source"])
    confirm = _confirm(args)
    if confirm is None:
        out.print("not saved: no terminal to ask on; add --yes to save")
        return 0
    if confirm(f"save {best['label']} as your {args.method} parameters?"):
        save_checked_params(store, args.method, bench.compare.own_params(args.method, best["params"]))
        out.print("saved to memory")
    else:
        out.print("not saved")
    return 0


def _tunable() -> tuple[str, ...]:
    """The methods with a built-in sweep (read when `specpilot tune` is parsed)."""
    return _bench().tune.TUNABLE


def _dispatch_tune(args) -> int:
    return cmd_tune_from_last_sweep(args) if args.from_last_sweep else cmd_tune(args)


# ---------------------------------------------------------------------------- parser
def add_eval_commands(sub) -> None:
    """Register ``compare``, ``bench``, ``report`` and ``tune`` on the top-level subparsers."""
    p = sub.add_parser("compare", help="run every method on one prompt with identical settings, side by side")
    p.add_argument("--prompt", default=None)
    p.add_argument("--prompt-file", default=None)
    p.add_argument("--methods", nargs="+", default=None, help="methods to compare (default: all of them, the baseline included)")
    p.add_argument("--peers", action="store_true", help=PEERS_HELP)
    p.add_argument("--report", action="store_true", help="also write the Markdown/PNG report")
    add_backend_option(p, repeatable=True)
    add_generation_options(p)
    add_method_options(p)
    add_serving_options(p)
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("bench", help="evaluate methods over a prompt set (Spec-Bench style JSONL), resumable")
    p.add_argument("--prompts", default=None, help="JSONL with question_id, category, prompt; or fit / eval (the "
                   "shipped Spec-Bench halves, default eval); or both (fit, then eval, side by side)")
    p.add_argument("--category", default=None)
    p.add_argument("--limit", type=int, default=None, help="at most this many prompts per category")
    p.add_argument("--methods", nargs="+", default=None, help="methods (default: draft medusa lookahead ngram; auto: per "
                   "prompt the one predicted fastest from the fit half's figures, its own row)")
    p.add_argument("--peers", action="store_true", help="also time transformers' assisted generation and prompt lookup")
    p.add_argument("--report", action="store_true", help="also write the Markdown/PNG report")
    p.add_argument("--fresh", action="store_true", help="measure everything again, reusing no run stored before "
                   "(after a change to a method's code); rerun without it to resume an interrupted fresh bench")
    p.add_argument("--save-result", default=None, metavar="NAME", help="also write the per-prompt rows and the "
                   "summary to benchmarks/results/NAME.json (a newer result replaces one of the same name)")
    add_backend_option(p)
    add_generation_options(p)
    add_method_options(p)
    add_serving_options(p)
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("report", help="write a Markdown/JSON/PNG report of stored runs (in your specpilot folder)")
    p.add_argument("run_ids", nargs="*", help="run ids (default: the newest run's task)")
    p.add_argument("--last", action="store_true", help="the newest run's task, or the newest run (default)")
    p.add_argument("--task", type=int, default=None, help="every run of this task")
    p.add_argument("--format", choices=["md", "json", "png"], default="md")
    p.add_argument("--out", default=None, help="folder, or file path whose name is used (default: SPECPILOT_HOME/reports)")
    p.add_argument("--json", action="store_true", help="print the written paths as JSON")
    p.add_argument("--results", default=None, metavar="DIR", help="instead: generate the results page (--out, default "
                   "docs/results.md), its charts and the README's results block from the result files in DIR")
    p.add_argument("--readme", default=None, help="with --results: the README whose results block is filled (default: "
                   "the repository's README.md, when it has one)")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("tune", help="sweep a method's parameters on a few prompts and recommend the best")
    add_method_argument(p, "--method", required=True, names=_tunable)
    p.add_argument("--prompts", default=None, help="JSONL prompt set (default: the fit half of the shipped "
                                                   "Spec-Bench prompts)")
    p.add_argument("--category", default=None)
    p.add_argument("--limit", type=int, default=None, help="prompts to sweep on (default 3, spread over categories)")
    p.add_argument("--grid", default=None, help='JSON list of settings to measure, e.g. \'[{"k": 3}, {"k": 5}]\'')
    p.add_argument("--medusa-heads", default=None)
    p.add_argument("--yes", action="store_true", help="save the recommendation without asking")
    p.add_argument("--from-last-sweep", action="store_true", help="save the newest stored sweep's best (no measuring)")
    add_backend_option(p)
    add_generation_options(p)
    p.set_defaults(func=_dispatch_tune)
