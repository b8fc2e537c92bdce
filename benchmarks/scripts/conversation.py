"""Conversation evaluation: does a brain pick the right tool (with the right key arguments) for what
a user types, and how long does a turn take?

    .venv/bin/python benchmarks/scripts/conversation.py                       # local (+ anthropic with a key)
    .venv/bin/python benchmarks/scripts/conversation.py --brains local:qwen2.5-coder-0.5b-instruct,local --half A
    .venv/bin/python benchmarks/scripts/conversation.py --out results.json --verbose
    .venv/bin/python benchmarks/scripts/conversation.py --data benchmarks/data/conversations_fresh_d.jsonl  # a set shipped here
    .venv/bin/python benchmarks/scripts/conversation.py --data benchmarks/data/conversations_fresh_{j,u}.jsonl --no-tool-only

Each request of ../shared/data/conversations_dev.jsonl (fields: ``text``; ``tool``, the tool a good
assistant calls, or null where it should ask a question or decline; ``args``, the key arguments of
that call) is one turn of ``specpilot ask --plan-only`` (agent.ask.ask): read-only tools run, tools
that load a model, write files or need approval are only listed. Each brain gets a fresh specpilot
home. Scoring: a request with a tool is right when the brain called that tool, and right with its
arguments when that call's arguments hold every key argument (lists as sets, where ``baseline`` may
be added since every method is measured against it); a request without one is right when the brain
called no tool. Median seconds per turn are taken after one untimed warm-up turn (model loading).

benchmarks/data/conversations_fresh_a.jsonl ... _z.jsonl and _aa.jsonl to _ac.jsonl are twenty-nine more sets in the
same format, written apart from each other and from the planner (benchmarks/data/MANIFEST.md says which were
fitted and which stayed held out).

Halves, so that prompts are not tuned on what they are judged on: half A is the even lines (0, 2,
...) and the only one looked at while writing the local brain's prompt; half B, the odd lines, is
held out. Both are reported.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

DATA = ROOT.parent / "shared" / "data" / "conversations_dev.jsonl"
WARM_UP = "hello there"
LOCAL_MODEL_ENV = "SPECPILOT_LOCAL_MODEL"


def load_requests(path: Path) -> list[dict]:
    """The requests with their line number and half (A: even lines, B: odd lines)."""
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [{**row, "line": i, "half": "A" if i % 2 == 0 else "B"} for i, row in enumerate(rows)]


def value_matches(expected, got) -> bool:
    """Whether a produced argument value is the expected one (dicts: every expected key; lists: the
    same items, where ``baseline`` may be added; numbers numerically; text without case or outer space)."""
    if isinstance(expected, dict):
        return isinstance(got, dict) and all(k in got and value_matches(v, got[k]) for k, v in expected.items())
    if isinstance(expected, list):
        if not isinstance(got, list):
            return False
        want, have = {str(v) for v in expected}, {str(v) for v in got}
        return want <= have and have - want <= {"baseline"}
    if isinstance(expected, bool) or isinstance(got, bool):
        return expected is got
    if isinstance(expected, (int, float)):
        return isinstance(got, (int, float)) and float(got) == float(expected)
    return isinstance(got, str) and got.strip().casefold() == str(expected).strip().casefold()


def score(request: dict, calls: list[dict], reply: str = "") -> tuple[bool, bool]:
    """(right tool, right tool and key arguments) for one request and the calls a brain made. A request answered in
    words whose set names the answer's ``kind`` is right with its "arguments" when the reply is that kind's."""
    if request.get("tool") is None:
        return not calls, not calls and (not request.get("kind") or reply_kind_matches(request["kind"], reply))
    matching = [c for c in calls if c["name"] == request["tool"]]
    if not matching:
        return False, False
    return True, all(value_matches(v, matching[0].get("input", {}).get(k)) if k in matching[0].get("input", {})
                     else False for k, v in (request.get("args") or {}).items())


def reply_kind_matches(kind: str, reply: str) -> bool:
    """Whether ``reply`` is an answer in words of ``kind`` (agent.brains.local_prompt.ANSWERS): a question for
    "ask" ("Which prompt should I run draft on? Please give it in quotes."), else that kind's statement (compared
    up to its first placeholder)."""
    from agent.brains.local_prompt import ANSWERS

    statement = ANSWERS.get(kind, (None, None))[0]
    if statement is None:
        return "?" in reply
    return reply.startswith(statement.split("{", 1)[0])


def run_brain(spec: str, requests: list[dict], verbose: bool) -> list[dict]:
    """Every request through one plan-only turn of the brain ``spec`` (``local:MODEL`` names the
    local brain's model); returns one result row per request."""
    name, _, model = spec.partition(":")
    saved = {k: os.environ.get(k) for k in (LOCAL_MODEL_ENV, "SPECPILOT_HOME")}
    if model:
        os.environ[LOCAL_MODEL_ENV] = model
    try:
        return _run_requests(name, spec, requests, verbose)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _run_requests(name: str, spec: str, requests: list[dict], verbose: bool) -> list[dict]:
    with tempfile.TemporaryDirectory(prefix="specpilot-conv-") as home:
        os.environ["SPECPILOT_HOME"] = home
        from agent.ask import ask
        from memory import Store

        from agent.brains import make_brain

        fallback = getattr(make_brain(name), "fallback_reason", None)
        if fallback:
            print(f"  note: {spec} answers with the command brain: {fallback}", file=sys.stderr)
        rows = []
        with Store() as store:
            ask(store, WARM_UP, brain=name, plan_only=True)  # loads the model: not timed
            for request in requests:
                start, work = time.perf_counter(), model_work()
                answer = ask(store, request["text"], brain=name, plan_only=True)
                seconds = time.perf_counter() - start
                passes, tokens = (after - before for after, before in zip(model_work(), work))
                tool_ok, args_ok = score(request, answer["tool_calls"], answer["reply"])
                rows.append({"brain": spec, "line": request["line"], "half": request["half"], "text": request["text"],
                             "expected": request.get("tool"), "expected_args": request.get("args"),
                             "kind": request.get("kind"),
                             "calls": [{"name": c["name"], "input": c["input"]} for c in answer["tool_calls"]],
                             "reply": answer["reply"], "tool_ok": tool_ok, "args_ok": args_ok, "seconds": seconds,
                             "forward_passes": passes, "tokens_run": tokens, "fallback": fallback})
                if verbose:
                    mark = "ok " if args_ok else "TOOL" if tool_ok else "BAD"
                    shown = json.dumps(rows[-1]["calls"], ensure_ascii=False)[:160]
                    print(f"  {mark:4} {seconds:5.1f}s {request['text'][:60]!r:64} -> {shown or answer['reply'][:80]!r}",
                          file=sys.stderr, flush=True)
    return rows


def model_work() -> tuple[int, int]:
    """Forward passes and tokens the local brain's models ran so far in this process (0, 0 without one)."""
    local = sys.modules.get("agent.brains.local")
    engines = list(getattr(local, "_ENGINES", {}).values())
    return sum(e.passes for e in engines), sum(e.fed for e in engines)


def summary(rows: list[dict]) -> dict:
    """Accuracy per half and overall, and the median seconds per turn."""
    out = {}
    for half in ("A", "B", "all"):
        part = [r for r in rows if half == "all" or r["half"] == half]
        if part:
            out[half] = {"n": len(part), "tool": sum(r["tool_ok"] for r in part) / len(part),
                         "tool_args": sum(r["args_ok"] for r in part) / len(part)}
    out["median_s"] = statistics.median(r["seconds"] for r in rows) if rows else None
    out["median_passes"] = statistics.median(r["forward_passes"] for r in rows) if rows else None
    out["median_tokens"] = statistics.median(r["tokens_run"] for r in rows) if rows else None
    return out


def table(results: dict[str, dict]) -> str:
    """The Markdown table: per brain, accuracy on each half and overall, and the median turn time."""
    head = ("| brain | half A: tool | half A: tool + key args | half B (held out): tool | half B: tool + key args "
            "| all: tool + key args | median s/turn | median forward passes / tokens per turn |\n"
            "|---|---|---|---|---|---|---|---|")
    lines = [head]
    for brain, s in results.items():
        def pct(half, key):
            return f"{100 * s[half][key]:.0f}% ({round(s[half][key] * s[half]['n'])}/{s[half]['n']})" if half in s else "—"
        median = f"{s['median_s']:.1f}" if s.get("median_s") is not None else "—"
        work = f"{s['median_passes']:g} / {s['median_tokens']:g}" if s.get("median_tokens") else "—"
        lines.append(f"| {brain} | {pct('A', 'tool')} | {pct('A', 'tool_args')} | {pct('B', 'tool')} | "
                     f"{pct('B', 'tool_args')} | {pct('all', 'tool_args')} | {median} | {work} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, nargs="+", default=[DATA], help="one or more sets (JSONL)")
    parser.add_argument("--no-tool-only", action="store_true",
                        help="only the requests whose right answer is no tool (answered in words)")
    parser.add_argument("--brains", default=None,
                        help="comma-separated: local (or model), local:MODEL, anthropic, offline (commands only) "
                             "(default: local, and anthropic when ANTHROPIC_API_KEY is set)")
    parser.add_argument("--half", choices=("A", "B", "all"), default="all")
    parser.add_argument("--limit", type=int, default=None, help="first N requests of the chosen half")
    parser.add_argument("--out", type=Path, default=None, help="write every row and the summary as JSON")
    parser.add_argument("--verbose", action="store_true", help="one line per request on stderr")
    args = parser.parse_args(argv)
    brains = args.brains.split(",") if args.brains else (
        ["local"] + (["anthropic"] if os.environ.get("ANTHROPIC_API_KEY") else []))
    requests = [r for path in args.data for r in load_requests(path) if args.half in ("all", r["half"])
                and not (args.no_tool_only and r.get("tool"))][: args.limit]
    rows, results = [], {}
    for spec in brains:
        print(f"{spec}: {len(requests)} requests", file=sys.stderr, flush=True)
        brain_rows = run_brain(spec, requests, args.verbose)
        rows += brain_rows
        results[spec] = summary(brain_rows)
    print(table(results))
    if args.out:
        args.out.write_text(json.dumps({"summary": results, "rows": rows}, indent=1, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
