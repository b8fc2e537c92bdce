"""Write prompts/tool_examples.jsonl: the labelled requests of the fitted chat sets, as the local model's
retrieval pool of worked examples (agent.brains.examples). The held-out sets (benchmarks/data/MANIFEST.md,
"fitted" column "held out") are left out, and so is a fitted request written word for word in one of them,
so that what the model is judged on was never shown to it.

    .venv/bin/python benchmarks/scripts/tool_examples.py
    .venv/bin/python benchmarks/scripts/tool_examples.py --kinds    # how often the pool's answers in words get their kind

A request whose right answer is no tool (ask or decline) keeps the example answer the pool already gives it
(written when a rule planner answered those requests), or a generic question for a request new to the pool,
and the kind of that answer (``kind``, agent.brains.local_prompt.ANSWERS); a set that names the kind of a
request's answer gives that kind, with its statement as the example answer. ``--kinds`` gives each such request
the kind the local brain would (agent.brains.local.answer_kind) from the pool without the request's whole set,
and counts how many get their own.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from agent.brains.local_prompt import ANSWERS  # noqa: E402

DATA = ROOT / "benchmarks" / "data"
OUT = ROOT / "prompts" / "tool_examples.jsonl"
MAX_TEXT = 400  # characters of a request shown as an example
GENERIC_REPLY = "Could you say a bit more about what you would like me to measure, and on which prompt?"


def fitted_sets() -> list[Path]:
    """The chat sets the manifest marks as fitted."""
    rows = re.findall(r"^\| (conversations_fresh_\w+\.jsonl) \|.*\| (fitted|held out) \|$",
                      (DATA / "MANIFEST.md").read_text(encoding="utf-8"), re.MULTILINE)
    return [DATA / name for name, fitted in rows if fitted == "fitted"]


def held_out_sets() -> list[Path]:
    rows = re.findall(r"^\| (conversations_fresh_\w+\.jsonl) \|.*\| held out \|$",
                      (DATA / "MANIFEST.md").read_text(encoding="utf-8"), re.MULTILINE)
    return [DATA / name for name in rows]


# the kind of each example answer in words (agent.brains.local_prompt.ANSWERS), read from the answer the pool gives:
# what the local brain says for a request whose nearest labelled requests are answered in words
KINDS = (("Deploying, serving", "deploy"), ("I will not generate", "harmful"), ("I do not delete", "delete"),
         ("specpilot trains only draft heads", "fine_tune"), ("specpilot measures decoding on a model as it is", "fine_tune"),
         ("specpilot measures only the machine", "elsewhere"), ("An EAGLE head is trained", "train_eagle"),
         ("I did not map that onto anything I can do: it looks outside", "outside"), ("I only write reports", "outside"),
         ("I did not map that", "unclear"), ("You're welcome", "thanks"), ("Hello", "hello"))


def answer_kind(reply: str) -> str:
    """The kind of an example answer in words: a question asks; the others by how the pool's answer begins."""
    if reply.rstrip().endswith("?"):
        return "ask"
    return next((kind for start, kind in KINDS if reply.startswith(start)), "unclear")


def earlier_replies() -> dict[str, str]:
    """The example answers the pool gives now, by request."""
    if not OUT.exists():
        return {}
    rows = [json.loads(line) for line in OUT.read_text(encoding="utf-8").splitlines() if line.strip()]
    return {row["text"]: row["reply"] for row in rows if row.get("reply")}


def kinds_check() -> int:
    """Leave each set out: the kind answer_kind gives its answers in words from the rest of the pool."""
    from agent.brains import local
    from agent.brains.examples import ExampleIndex, load_examples

    rows = [json.loads(line) for line in OUT.read_text(encoding="utf-8").splitlines() if line.strip()]
    examples = load_examples(OUT.read_text(encoding="utf-8"))
    right = total = 0
    for name in sorted({r["set"] for r in rows}):
        rest = ExampleIndex([e for e, r in zip(examples, rows) if r["set"] != name])
        local.default_index = lambda rest=rest: rest  # answer_kind reads the pool without this set
        for e, r in zip(examples, rows):
            if r["set"] == name and not e.tool:
                total += 1
                right += local.answer_kind(e.text) == e.kind
    print(f"{right} of {total} answers in words ({right / total:.1%}) get their own kind, each set left out")
    return 0


def main() -> int:
    if sys.argv[1:] == ["--kinds"]:
        return kinds_check()
    replies = earlier_replies()
    held_out = {json.loads(line)["text"] for path in held_out_sets()
                for line in path.read_text(encoding="utf-8").splitlines() if line.strip()}
    rows = []
    for path in fitted_sets():
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            row = json.loads(line)
            if len(row["text"]) > MAX_TEXT or row["text"] in held_out:  # a held-out request verbatim
                continue
            out = {"text": row["text"], "tool": row["tool"], "args": row.get("args") or {},
                   "set": path.stem.rsplit("_", 1)[1]}
            if row["tool"] is None and row.get("kind"):  # the set names the kind: its statement is the answer
                out["kind"] = row["kind"]
                said = ANSWERS[row["kind"]][0]
                out["reply"] = said.format(machine="this CPU", home="the specpilot home") if said else \
                    replies.get(row["text"], GENERIC_REPLY)
            elif row["tool"] is None:
                out["reply"] = replies.get(row["text"], GENERIC_REPLY)
                out["kind"] = answer_kind(out["reply"])
            rows.append(out)
    OUT.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    print(f"{len(rows)} examples from {len(fitted_sets())} fitted sets -> {OUT}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
