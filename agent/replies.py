"""Turn tool results into plain answers for the local and offline brains: exact figures with their source,
the approval a gated call waits for, and errors as messages (never tracebacks).

Every result has two forms. :func:`format_result` is the short form a person reads as the answer (1-6 lines:
the choice or result, the one figure that decides it with its run id, or "not measured yet", and the next
step); :func:`format_details` is the whole of it (tables, every parameter with its reason), which the chat
shows on /details. Claude, the MCP host and `--json` get the structured result itself."""

from __future__ import annotations

import json

from tools.agent_tools.choose import CATEGORIES
from tools.agent_tools.install import ALREADY_INSTALLED
from tools.agent_tools.lookup import NO_RUNS, statement
from tools.agent_tools.registry import ToolResult
from tools.engine.params import ACCELERATED
from tools.report.markdown import fmt, versus_baseline

DETAILS_HINT = "/details"  # the chat command that shows the detail form of the last answer
PLANNED_ONLY = "planned only, not executed"  # a plan-only ask's done step (agent.ask): a dry run, no unfinished work


def format_result(result: ToolResult) -> str:
    """The short answer built only from what the tool returned."""
    return _format(result, SHORT)


def format_details(result: ToolResult) -> str:
    """The whole answer built from what the tool returned (the detail form)."""
    return _format(result, DETAILS)


def _format(result: ToolResult, forms: dict) -> str:
    c = result.content
    if result.is_error:
        return c.get("error") if nothing_to_do(result) else f"That did not work: {c.get('error')}"
    if c.get("status") == "approval_required":
        return (f"This needs your approval first (approval {c['approval_id']}, action {c['action']}). It would run:\n"
                f"  {c['will_run']}\n{_left_out(c)}To approve, run `specpilot tool approve --id {c['approval_id']}` in "
                "your terminal, then ask again; nothing has been run.")
    if c.get("status") == "not_executed":
        shown = json.dumps(c.get("input") or {}, ensure_ascii=False, default=str)
        return f"Planned, not executed: {result.name} {shown} ({c.get('reason')})."
    formatter = forms.get(result.name) or DETAILS.get(result.name)
    return formatter(c) if formatter else json.dumps(c, indent=2, ensure_ascii=False, default=str)


def _left_out(c: dict) -> str:
    """The line saying which packages an install approval leaves out as installed already ("" when none is)."""
    arguments = c.get("arguments") or {}
    if arguments.get("tool") != "install_packages" or not arguments.get("requested"):
        return ""
    runs = set((arguments.get("input") or {}).get("packages") or [])
    skipped = [p for p in arguments["requested"].get("packages") or [] if p not in runs]
    return f"Left out, already installed: {', '.join(skipped)}.\n" if skipped else ""


def nothing_to_do(result: ToolResult) -> bool:
    """Whether an error result reports that there was nothing to do, not a failure: no run is stored yet to look up,
    or every package asked for is installed already (said plainly, without "That did not work")."""
    first = str(result.content.get("error") or "").split("\n", 1)[0]
    return ((result.name == "lookup_runs" and first == NO_RUNS)
            or (result.name == "install_packages" and first.endswith(ALREADY_INSTALLED)))


# ---------------------------------------------------------------------------- the detail forms


def _run_head(c: dict) -> list[str]:
    """A run's first lines in both forms: what was measured, where the output left the baseline's, lossiness."""
    lines = [f"Measured now: {c['statement']}."]
    for why in ("method", "draft"):  # auto's pick and the draft chosen: say which and why
        picked = (c.get("sizing") or {}).get(why)
        if picked:
            lines.append(picked[0].upper() + picked[1:] + ".")
    if c.get("matches_baseline") is False and c.get("first_divergence"):
        div = c["first_divergence"]
        lines.append(f"First divergence from the baseline: {div.get('explanation') or div}")
    if c.get("lossy"):
        lines.append("Note: this mode is lossy by design (typical acceptance).")
    return lines


def _run(c: dict) -> str:
    lines = _run_head(c)
    text = str(c.get("output_text") or "").strip()
    if text:
        lines.append("Output:\n" + "\n".join("  " + line for line in text.splitlines()[:20]))
    lines.append(f"Source: {c.get('source')}.")
    return "\n".join(lines)


def _lookup(c: dict) -> str:
    lines = [f"Note: {c['unmatched']}."] if c.get("unmatched") else []
    lines += [f"From memory ({c['source']}):"]
    lines += [f"- {r['statement']}" for r in c["runs"]]
    return "\n".join([*lines, *_fastest(c)])


def _fastest(c: dict) -> list[str]:
    """The line naming the fastest of the runs listed (lookup_runs' ``fastest``), where it names one."""
    best = c.get("fastest")
    return [f"Fastest of these: run {best['run_id']} ({best['method']}, {fmt(best['speedup'])}x)."] if best else []


SAVE_HINT = ("To save some: `/save draft k=6` (or, with a brain that reads words, 'save k=6 as my default for "
             "draft').")


def _params_line(method: str, params: dict, default: str | None) -> str:
    """One method's saved parameters: "draft (default): k=6, adaptive_k=True"."""
    return f"{method}{' (default)' if method == default else ''}: " + ", ".join(f"{k}={v}" for k, v in params.items())


def _saved_params_only(c: dict, short: bool) -> str:
    """The answer to /params: the saved parameters and the default method, nothing else (/tasks lists tasks)."""
    params = c.get("saved_params") or {}
    default = (c.get("answers") or {}).get("default_method")
    if not params:
        return "\n".join(["No parameters saved yet. " + SAVE_HINT,
                          *([f"Default method: {default}."] if default else [])])
    if short:
        return "Saved parameters: " + "; ".join(_params_line(m, p, default) for m, p in params.items()) + "."
    lines = ["Saved parameters:", *(f"  {_params_line(m, p, default)}" for m, p in params.items())]
    if default and default not in params:
        lines.append(f"Default method: {default}")
    return "\n".join(lines)


def _recall(c: dict) -> str:
    if c.get("only_saved_params"):
        return _saved_params_only(c, short=False)
    lines = []
    params = c.get("saved_params") or {}
    if params:
        lines.append("Saved parameters:")
        lines += [f"  {m}: " + ", ".join(f"{k}={v}" for k, v in p.items()) for m, p in params.items()]
    else:
        lines.append("No parameters saved yet.")
    default = (c.get("answers") or {}).get("default_method")
    if default:
        lines.append(f"Default method: {default}")
    lines.append("Unfinished tasks:" if c.get("unfinished_tasks") else "No unfinished tasks.")
    lines += [f"  {t}" for t in c.get("unfinished_tasks", [])]
    if c.get("not_done_tasks"):
        lines.append("Not done:")
        lines += [f"  {t}" for t in c["not_done_tasks"]]
    if c.get("done_tasks"):
        lines.append("Finished tasks:")
        lines += [f"  {t}" for t in c["done_tasks"]]
    if c.get("recent_runs"):
        lines.append("Newest runs:")
        lines += [f"  {r}" for r in c["recent_runs"]]
    return "\n".join(lines)


def _guidance(c: dict) -> str:
    if c.get("method") is None:
        return _choose(c)
    params = ", ".join(f"{k}={v}" for k, v in c["suggested_params"].items())
    lines = [f"Suggested starting parameters for {c['method']} on {c['target']} ({c['hardware']['name']}): {params}",
             *[f"- {r}" for r in c["reasons"]], f"Source: {c['source']}.", c["measured_best"],
             f"Note: {c['advice']}."]
    lines += [f"Serving: {line}" for line in c.get("serving") or []]
    if c.get("choice"):
        lines += _choice_lines(c["choice"], every=True, method_named=True)
    lines.append(_guidance_next(c))
    return "\n".join(lines)


def _guidance_next(c: dict) -> str:
    if (c.get("next_step") or {}).get("tool") == "measure_cost_curve":
        return (f"Next: /measure sizes it to this machine (it measures the cost curve of {c['target']} here and "
                "stores it: it loads the model, a few minutes on a small CPU).")
    return f"Next: run it on your own prompt ('run {c['method']}: <your prompt>') to measure it here."


def _deps(c: dict) -> str:
    lines = [f"Dependencies for {c['method']}: " + ("ready" if c["ready"] else "NOT ready")]
    for p in c["packages"]:
        need = "required" if p["required"] else "optional"
        line = f"- {p['package']} ({need}): {p['status']}" + (f" {p['version']}" if p.get("version") else "")
        if p.get("error"):
            line += f" — {p['error']}"
        if p.get("install_command"):
            line += f"\n    install: {p['install_command']}"
        lines.append(line)
    if c.get("suggested_install"):
        lines.append(f"Suggested: {c['suggested_install']['command']} (I ask for approval before installing).")
    if c.get("note"):
        lines.append(c["note"])
    return "\n".join(lines)


def _explain(c: dict) -> str:
    measured = (c.get("measured_here") or {}).get("sentence")
    gap = "\n\n" if c.get("detail") == "full" else "\n"  # the full text is Markdown: its own paragraph
    return (c["text"].strip() + (f"{gap}{measured}" if measured else "")
            + (f"\n({c['more'][0].upper()}{c['more'][1:]}.)" if c.get("more") else ""))


def _installed(c: dict) -> str:
    return f"Installed with: {c['command']} (exit code {c['returncode']})."


def _trained(c: dict) -> str:
    top1 = ", ".join(f"{a:.3f}" for a in c.get("head_top1") or [])
    return (f"Trained Medusa heads: {c['steps_done']} steps, final loss {c.get('final_loss')}, held-out top-1 "
            f"accuracy per head [{top1}]; heads written to {c['heads_folder']}.")


def _report(c: dict) -> str:
    return f"Report written to {c['path']} (runs {', '.join(c['run_ids'])}); it stays on this machine."


def _shared(c: dict) -> str:
    return f"Shared runs {', '.join(c['run_ids'])} to {c['destination']}."


def _saved(c: dict) -> str:
    saved = c["saved"]
    return (f"Saved {saved['method']} parameters: " + ", ".join(f"{k}={v}" for k, v in saved["params"].items())
            + f". Default method: {c.get('default_method')}.")


def _curve(c: dict) -> str:
    return (f"Cost curve on {c['hardware']} ({c['dtype']}), ms per forward by tokens: {c['curve_ms']}. "
            f"{c['reasoning']} Suggested lookahead: {c['suggested_lookahead']}.")


def text_table(header: list[str], rows: list[list[str]]) -> str:
    """Rows of cells as aligned plain-text columns under ``header``."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(str(cell).ljust(w) for cell, w in zip(line, widths)).rstrip() for line in [header, *rows]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _compare(c: dict) -> str:
    hw = (c.get("hardware") or {}).get("name", "hardware not recorded")
    settings = c.get("settings") or {}
    lines = [f"Compared on {hw} ({c.get('dtype')}, target {c.get('target')}, prompt {c.get('prompt')!r}, "
             f"up to {settings.get('max_new_tokens')} new tokens, temperature {settings.get('temperature')}, median "
             f"of {c.get('repeats')}; baseline {fmt(c.get('baseline_tokens_per_s'))} tok/s):"]
    header = ["method", "speedup", "tok/s", "acceptance", "tok/step", "output vs baseline", "training", "draft model",
              "run id"]
    rows = []
    for row in c["rows"]:
        if row.get("status") != "measured":
            why = row.get("short_reason") or row.get("reason")
            rows.append([row["method"], "—", "—", "—", "—", f"not run: {why}", row.get("training_required"),
                         row.get("draft_required"), "—"])
            continue
        accept = row.get("acceptance_rate")
        rows.append([row["method"], fmt(row.get("speedup"), 2, "x"), fmt(row.get("tokens_per_s")),
                     "—" if accept is None else fmt(accept * 100, 1, "%"), fmt(row.get("mean_accepted_per_step")),
                     versus_baseline(row), row.get("training_required"), row.get("draft_required"), row.get("run_id")])
    for name, peer in (c.get("peers") or {}).items():
        same = "—" if peer.get("matches_baseline") is None else "identical" if peer["matches_baseline"] else "differs"
        rows.append([name, fmt(peer.get("speedup"), 2, "x"), fmt(peer.get("tokens_per_s")), "—", "—", same,
                     "none", "yes" if name.startswith("hf_assisted") else "no", "(in each run)"])
    lines.append(text_table(header, rows))
    differs = [f"- {r['method']}: {r['quality']}" for r in c["rows"]
               if r.get("status") == "measured" and r.get("matches_baseline") is False]
    if differs:
        lines += ["Where the output differs from the baseline:", *differs]
    rec = c.get("recommended")
    if rec:
        lines.append(f"Recommended on this machine for this prompt: {rec['method']}, the {rec['reason']}."
                     if rec["method"] != "baseline" else f"Recommended: plain decoding ({rec['reason']}).")
    params = [f"- {r['method']} ({r.get('params_source')}): " + ", ".join(f"{k}={v}" for k, v in r["params"].items())
              for r in c["rows"] if r.get("status") == "measured" and r.get("params")]
    if params:
        lines += ["Parameters used (given, from memory, or the defaults):", *params]
    if c.get("not_run"):
        lines += ["Not run:", *[f"- {m}: {reason}" for m, reason in c["not_run"].items()]]
    by_method = c.get("run_ids_by_method") or {}
    runs = ", ".join(f"{m} {r}" for m, r in by_method.items()) or "none"
    lines.append(f"Task {c['task_id']}; runs: {runs}.")
    if c.get("source"):
        lines.append(f"Source: {c['source']}.")
    return "\n".join(lines)


def _serving(c: dict) -> str:
    hw = (c.get("hardware") or {}).get("name", "hardware not recorded")
    where = "an endpoint" if c.get("backend") == "endpoint" else "vLLM"
    lines = [f"Measured on {where}, {hw} ({c.get('dtype')}, target {c.get('target')}, {c.get('prompts')} prompt(s)):"]
    header = ["method", "K", "streams", "tok/s", "speedup", "TPOT p50", "TTFT p99", "accept len", "output", "run id"]
    rows = [[r["method"], str(r.get("k") or "—"), str(r["concurrency"]), fmt(r.get("throughput_tok_s"), 1),
             fmt(r.get("speedup"), 2, "x"), fmt(r.get("tpot_p50_ms"), 0, " ms"), fmt(r.get("ttft_p99_ms"), 0, " ms"),
             fmt(r.get("acceptance_length")), "—" if r.get("matches_baseline") is None else
             ("identical" if r["matches_baseline"] else "differs"), r.get("run_id")] for r in c.get("rows") or []]
    lines.append(text_table(header, rows))
    lines += list(c.get("statement") or [])
    if c.get("source"):
        lines.append(f"Source: {c['source']}.")
    return "\n".join(lines)


def _choose(c: dict) -> str:
    return "\n".join([*_choice_lines(c, every=True), f"Source of the first figure: {c['source']}."])


def _choice_lines(c: dict, every: bool = False, method_named: bool = False) -> list[str]:
    """A choice between methods: the pick first, a line per candidate (three, or ``every`` one), the next step.
    ``method_named``: the request named a method (guidance's advice for it carries this choice)."""
    kind = (c.get("category") or "").replace("_", " ")
    if kind:
        lines = [f"For {kind}: {c['pick']} first."]
    elif c.get("task"):  # words that name no kind of work: said, not silently ignored
        lines = [f"{_unknown_task(c['task'], method_named)} So over every kind of request: {c['pick']} first."]
    else:
        lines = [f"{c['pick']} first (over every kind of request: no kind of work was named)."]
    lines += [f"- {line}" for line in (c["lines"] if every else c["lines"][:3])]
    pair = [m for m in c["next_step"]["input"]["methods"] if m != "baseline"]
    lines.append(f"Next: I can measure {' and '.join(pair)} on your own prompt: say 'compare {' and '.join(pair)} on "
                 "<your prompt>'.")
    return lines


def _unknown_task(task: str, method_named: bool) -> str:
    """Why the kind of work given (guidance's ``task``) was not used: it names no category (and, one word given where
    no method was named, no method either)."""
    task = " ".join(str(task).split())
    kinds = f"a kind of work I know ({', '.join(CATEGORIES)})"
    if not method_named and len(task.split()) == 1:
        return f"{task!r} is not a method ({', '.join(ACCELERATED)}) nor {kinds}."
    return f"{task!r} names no kind of work I know: {', '.join(CATEGORIES)}."


DETAILS = {
    "choose_method": _choose,
    "measure_serving": _serving,
    "run_method": _run, "lookup_runs": _lookup, "recall": _recall, "guidance": _guidance, "check_deps": _deps,
    "explain": _explain, "install_packages": _installed, "train_medusa": _trained, "write_report": _report,
    "share_results": _shared, "save_params": _saved, "measure_cost_curve": _curve, "compare_methods": _compare,
}


# ---------------------------------------------------------------------------- the short forms


def _run_short(c: dict) -> str:
    lines = _run_head(c)
    lines.append(f"Next: compare it with other methods on this prompt (/compare METHODS PROMPT) to choose; "
                 f"{DETAILS_HINT} shows the output and where each parameter came from.")
    return "\n".join(lines)


def _lookup_short(c: dict) -> str:
    runs = c["runs"]
    lines = [f"Note: {c['unmatched']}."] if c.get("unmatched") else []
    lines += [f"From memory ({len(runs)} run{'s' if len(runs) != 1 else ''}, figures as stored):"]
    lines += [f"- {r['statement']}" for r in runs[:3]]
    if len(runs) > 3:
        lines.append(f"({len(runs) - 3} more: {DETAILS_HINT})")
    return "\n".join([*lines, *_fastest(c)])


def _recall_short(c: dict) -> str:
    if c.get("only_saved_params"):
        return _saved_params_only(c, short=True)
    params = c.get("saved_params") or {}
    default = (c.get("answers") or {}).get("default_method")
    if params:
        lines = ["Saved parameters: " + "; ".join(_params_line(m, p, default) for m, p in params.items())]
    else:
        lines = ["No parameters saved yet." + (f" Default method: {default}." if default else "")]
    unfinished, failed, done = (c.get(key) or [] for key in ("unfinished_tasks", "not_done_tasks", "done_tasks"))
    lines.append(f"Unfinished tasks: {unfinished[0]}" + _more(unfinished) if unfinished else "No unfinished tasks.")
    if failed:
        lines.append(f"Not done: {failed[0]}" + _more(failed))
    if done:
        lines.append("Finished tasks: " + "; ".join(_finished(t) for t in done[:3]) + _more(done, 3))
    if c.get("recent_runs"):
        lines.append(f"Newest run: {c['recent_runs'][0]}")
    return "\n".join(lines)


def _finished(line: str) -> str:
    """A finished task's line without its steps ("task 3 (done): REQUEST"), marked when it was only planned."""
    head, _, steps = line.rpartition(" — done: ")
    return head + (" (planned only)" if PLANNED_ONLY in steps else "")


def _more(items: list, shown: int = 1) -> str:
    return f" ({len(items) - shown} more: {DETAILS_HINT})" if len(items) > shown else ""


def _guidance_short(c: dict) -> str:
    if c.get("method") is None:
        return _choice_short(c)
    shown = {k: v for k, v in c["suggested_params"].items() if v is not None and not isinstance(v, (list, dict))}
    lines = [f"Suggested starting parameters for {c['method']} on {c['target']} ({c['hardware']['name']}): "
             + ", ".join(f"{k}={v}" for k, v in shown.items()) + "."]
    measured_now = "; this machine's cost curve was measured now for it and stored" if c.get("measured_now") else ""
    lines.append(f"Source: {c['source']}{measured_now}; advice to be measured, not a result.")
    expected = c.get("expected")
    if expected and expected.get("measured_curve"):
        low, high = expected["acceptance"]
        lines.append(f"Expected here: about {expected['low']:.2f}x where {low:.0%} of drafted tokens are accepted, up to "
                     f"{expected['high']:.2f}x at {high:.0%} (this machine's pass costs; a guess until a run measures "
                     "it).")
    lines.append(_measured_line(c))
    if c.get("choice"):
        choice = c["choice"]
        kind = (choice.get("category") or "every kind of request").replace("_", " ")
        unknown = _unknown_task(choice["task"], method_named=True) + " " if choice.get("task") and not \
            choice.get("category") else ""
        lines.append(f"{unknown}For {kind}: {choice['pick']} first ({choice['source']}).")
    lines.append(_guidance_next(c))
    return "\n".join(lines)


def _measured_line(c: dict) -> str:
    """What was measured with this method here, in one line: the best setting's median speedup and its runs."""
    best = (c.get("measured") or [None])[0]
    if not isinstance(best, dict) or best.get("median_speedup") is None:
        return f"{c['measured_best'][0].upper()}{c['measured_best'][1:]}."
    params = {k: v for k, v in (best.get("params") or {}).items() if v is not None and not isinstance(v, (list, dict))}
    setting = ", ".join(f"{k}={v}" for k, v in params.items()) or "the defaults"
    runs = ", ".join(best.get("run_ids") or [])
    return (f"Measured here: {best['median_speedup']:.2f}x median over {best['runs']} run(s) with {setting} "
            f"(run {runs}).")


def _choice_short(c: dict) -> str:
    lines = _choice_lines(c)
    if c.get("default_method"):
        lines.append(f"(Parameters for your default method {c['default_method']}: /guide {c['default_method']}.)")
    return "\n".join(lines)


def _deps_short(c: dict) -> str:
    missing = [f"{p['package']} ({p['status']})" for p in c["packages"] if p["required"] and p["status"] != "ok"]
    lines = [f"Dependencies for {c['method']}: " + ("ready." if c["ready"] else f"NOT ready: {', '.join(missing)}.")]
    if c.get("suggested_install"):
        lines.append(f"Suggested: {c['suggested_install']['command']} (I ask for approval before installing).")
    if c.get("note"):
        lines.append(c["note"])
    lines.append(f"{DETAILS_HINT} lists each package with its version.")
    return "\n".join(lines)


def _explain_short(c: dict) -> str:
    if c.get("detail") == "full":
        return _explain(c)
    lines = [c["text"].strip()]
    if (c.get("measured_here") or {}).get("sentence"):
        lines.append(c["measured_here"]["sentence"])
    if c.get("sections"):
        lines.append(f"({DETAILS_HINT}: the full text, also on {', '.join(c['sections'])}.)")
    return "\n".join(lines)


def _curve_short(c: dict) -> str:
    ms = {int(n): float(t) for n, t in c["curve_ms"].items()}
    one = ms.get(1)
    costs = [f"{n} tokens {ms[n] / one:.2f}x" for n in (2, 4, 8) if one and n in ms]
    lines = [f"Cost curve of {c['target']} measured on {c['hardware']} ({c['dtype']}) and stored"
             + (f": a pass over {', '.join(costs)} a one-token pass." if costs else ".")]
    lines.append("Lookahead sized to it: " + ", ".join(f"{k}={v}" for k, v in c["suggested_lookahead"].items()) + ".")
    lines.append(f"Next: runs and guidance size to it from now on; {DETAILS_HINT} shows the curve in ms and why.")
    return "\n".join(lines)


def _compare_short(c: dict) -> str:
    rows = c.get("rows") or []
    rec = c.get("recommended") or {}
    ids = c.get("run_ids_by_method") or {}
    lines = []
    if rec.get("method") and rec["method"] != "baseline":
        lines.append(f"Recommended on this machine for this prompt: {rec['method']}, the {rec['reason']}.")
    elif rec.get("method"):
        lines.append(f"Recommended: plain decoding ({rec['reason']}).")
    figures = []
    for row in rows:
        if row["method"] == "baseline":
            continue
        if row.get("status") != "measured":
            figures.append(f"{row['method']} not run ({row.get('short_reason') or row.get('reason')})")
            continue
        same = "" if row.get("matches_baseline") is not False else f"; output differs: {versus_baseline(row)}"
        figures.append(f"{row['method']} {fmt(row.get('speedup'), 2, 'x')} (run {row.get('run_id')}{same})")
    hw = (c.get("hardware") or {}).get("name", "hardware not recorded")
    lines.append(f"Measured on {hw}, target {c.get('target')}: " + ", ".join(figures) + ".")
    task = f" (task {c['task_id']})" if c.get("task_id") is not None else ""
    lines.append(f"Next: {DETAILS_HINT} shows the table{task}: tok/s, acceptance, tokens per step, parameters used.")
    return "\n".join(lines)


def _serving_short(c: dict) -> str:
    hw = (c.get("hardware") or {}).get("name", "hardware not recorded")
    where = "an endpoint" if c.get("backend") == "endpoint" else "vLLM"
    statement = list(c.get("statement") or [])
    lines = [f"Measured on {where}, {hw} (target {c.get('target')}, {c.get('prompts')} prompt(s)):", *statement[:3]]
    lines.append(f"{DETAILS_HINT} shows every configuration and level" + (f" ({len(statement) - 3} more lines)."
                                                                        if len(statement) > 3 else "."))
    return "\n".join(lines)


SHORT = {
    "choose_method": _choice_short, "measure_serving": _serving_short, "run_method": _run_short,
    "lookup_runs": _lookup_short, "recall": _recall_short, "guidance": _guidance_short, "check_deps": _deps_short,
    "explain": _explain_short, "measure_cost_curve": _curve_short, "compare_methods": _compare_short,
}  # the others (install, train, report, share, save) are one line in both forms


DEPLOY_SCOPE = ("Deploying, serving or integrating into production is outside specpilot: it benchmarks speculative "
                "decoding locally on this machine.")


def deployment_plan(store) -> str:
    """A deployment plan in words only, from the best run stored (after the person approved planning it)."""
    best = [r for r in store.find_runs(limit=200) if r.get("speedup") is not None]
    best.sort(key=lambda r: r["speedup"], reverse=True)
    start = (f"start from your best measured configuration: {statement(best[0])}" if best else
             "measure the methods on your own prompts first (nothing is measured yet)")
    steps = [start,
             "measure again with specpilot on the production hardware: speedups depend on the hardware, the dtype "
             "and the prompts",
             "choose a serving stack that supports that method and set the same parameters; compare it with its own "
             "plain decoding on the same prompts",
             "watch the acceptance rate on real traffic: it changes with the kind of prompts"]
    return "Plan (in words only; specpilot does not deploy or serve anything):\n" + "\n".join(
        f"{i}. {step}" for i, step in enumerate(steps, start=1))


def deployment_status(approval: dict) -> dict:
    """What a task records of a deployment approval (Reply fields): waiting for it, declined, or nothing (approved)."""
    if approval["status"] == "pending":
        return {"unfinished": f"waiting for approval {approval['id']} to plan a deployment"}
    if approval["status"] == "denied":
        return {"not_done": f"planning a deployment was declined (approval {approval['id']} denied)"}
    return {}
