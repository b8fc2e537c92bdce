"""The offline brain: a deterministic planner that maps the user's words and slash commands onto
the same tools the Claude brain uses, asks for missing parameters, and follows the same workflows
(memory first, exact figures with their run id, approval before install/train/share). No network.
"""

from __future__ import annotations

import re
from typing import Any

from agent.brains.base import RUN_WORDS, Reply
from agent.brains.format import format_result
from agent.loop import Session
from tools.agent_tools.install import PACKAGE_PATTERN
from tools.agent_tools.lookup import statement
from tools.engine.methods import ACCELERATED, METHOD_NAMES

# the words that name a method besides its own name; the methods are read from the method table, the
# accelerated ones first (so "draft versus the baseline" names draft)
METHOD_SYNONYMS = {
    "draft": r"draft(?:[- ]model)?|speculative(?: decoding| sampling)?|assisted",
    "lookahead": r"look[- ]?ahead|jacobi",
    "ngram": r"n-?gram|prompt[- ]lookup",
    "baseline": r"baseline|plain generation|autoregressive",
}
METHOD_WORDS = {m: METHOD_SYNONYMS.get(m, re.escape(m))
                for m in (*ACCELERATED, *(n for n in METHOD_NAMES if n not in ACCELERATED))}
TOPIC_WORDS = {
    "tradeoffs": r"trade-?offs?|differen\w*|compare|comparison|versus|\bvs\.?\b|which (?:method|one) (?:is|should)",
    "medusa": r"medusa",
    "lookahead": r"look[- ]?ahead|jacobi",
    "draft": r"draft|speculative|assisted",
}
# asking to compare methods (on a prompt: measure them; without one: explain the trade-offs)
COMPARE_WORDS = re.compile(r"\b(?:compar\w*|versus|vs\b\.?|side[- ]by[- ]side|head[- ]to[- ]head)", re.IGNORECASE)
# "speculative decoding methods" names all of them, not the draft-model method
GENERIC_METHODS = re.compile(r"\bspeculative[- ]decoding (?:methods|techniques|approaches|variants)\b", re.IGNORECASE)
# another request that mentions a comparison ("share the comparison", "write a report comparing ...")
OTHER_ACTIONS = re.compile(r"\b(?:install|share|upload|publish|train|(?:write|make|create) (?:a |the )?report)\b",
                           re.IGNORECASE)
STORED_WORDS = re.compile(r"\b(?:runs|results?|figures?|speedups?|measured|stored)\b", re.IGNORECASE)
LEADING_METHOD = re.compile(rf"[\s,]*({'|'.join(METHOD_WORDS)}|all)(?=[\s,:]|$)", re.IGNORECASE)
RUN_ID = re.compile(r"\b[0-9a-f]{8}\b")
QUOTED = re.compile(r"\"([^\"]+)\"|“([^”]+)”|'([^']{3,})'")
URL_OR_PATH = re.compile(r"(https?://\S+|(?:~|\.{0,2})/\S+)")
INSTALL_FILLER = {"now", "it", "them", "the", "package", "packages", "please", "for", "me", "and", "then", "a",
                  "approved", "ok", "okay", "yes", "pip", "install", "with", "using", "to", "this", "that"}
HELP = """I can, offline:
  run a method on a prompt       run draft: <prompt>      (/run [method] <prompt>)
  compare methods on a prompt    compare draft and medusa on 'def fib(n):'   (/compare [methods...] <prompt>)
  look up stored figures         what was the speedup for the medusa run on that prompt?   (/runs, /lookup ID)
  suggest parameters             suggest lookahead parameters   (/guide METHOD)
  explain a method               explain medusa   (/explain draft|medusa|lookahead|tradeoffs)
  check dependencies             check dependencies for medusa   (/deps [method])
  install packages (asks first)  install gguf   (/install PKG ...)
  train Medusa heads (asks first)  train medusa heads   (/train [target])
  write a local report           write a report   (/report)
  share a report (asks first)    share the results to https://...   (/share DEST)
  memory                         /params  /tasks  /runs
Deploying or serving is outside specpilot (I ask before even planning it)."""


def _again(low: str) -> bool:
    return bool(re.search(r"\b(again|rerun|re-run|fresh|anew)\b", low))


def find_method(text: str) -> str | None:
    """The decoding method a message names, or None."""
    for method, words in METHOD_WORDS.items():
        if re.search(rf"\b(?:{words})\b", text, re.IGNORECASE):
            return method
    return None


def find_topic(text: str) -> str | None:
    """The concept a message asks to have explained, or None."""
    for topic, words in TOPIC_WORDS.items():
        if re.search(words, text, re.IGNORECASE):
            return topic
    return None


def find_methods(text: str) -> list[str]:
    """Every decoding method a message names (generic words such as "speculative decoding methods"
    name none), in the order of METHOD_WORDS."""
    text = GENERIC_METHODS.sub(" ", text)
    return [m for m, words in METHOD_WORDS.items() if re.search(rf"\b(?:{words})\b", text, re.IGNORECASE)]


def compare_list(named: list[str]) -> list[str]:
    """The methods to compare: the baseline first, then those named (all of them when none is)."""
    named = [m for m in named if m != "baseline"]
    return [m for m in METHOD_NAMES if m == "baseline" or not named or m in named]


def leading_methods(text: str) -> tuple[list[str], str]:
    """Method names (or "all") at the start of ``text``, separated by spaces or commas, and the rest."""
    named = []
    while match := LEADING_METHOD.match(text):
        named.append(match.group(1).lower())
        text = text[match.end():]
    return [m for m in named if m != "all"], text.lstrip(" ,:")


def unquote(text: str) -> str:
    """``text`` without one pair of quotes around all of it."""
    text = text.strip()
    for left, right in (('"', '"'), ("'", "'"), ("“", "”")):
        if len(text) > 2 and text.startswith(left) and text.endswith(right):
            return text[1:-1].strip()
    return text


def find_prompt(text: str) -> str | None:
    """The prompt inside a run request: quoted text, or everything after the first colon."""
    quoted = QUOTED.search(text)
    if quoted:
        return next(g for g in quoted.groups() if g)
    colon = re.search(r":(?!//)", text)  # not the colon of a URL
    if colon:
        head, tail = text[:colon.start()], text[colon.end():]
        if tail.strip() and not head.lower().startswith(("http", "https")):
            return tail.strip()
    return None


def find_packages(text: str) -> list[str]:
    """Package names after the word 'install' (plain names only; filler words skipped)."""
    match = re.search(r"\binstall\b(.*)", text, re.IGNORECASE | re.DOTALL)
    if not match:
        return []
    words = re.split(r"[\s,;]+", match.group(1))
    return [w for w in (w.strip(".!?'\"") for w in words)
            if w and w.lower() not in INSTALL_FILLER and PACKAGE_PATTERN.fullmatch(w)]


class OfflineBrain:
    """Deterministic planner. Keeps one pending question (a missing parameter) between messages."""

    name = "offline"

    def __init__(self):
        self.pending: dict | None = None  # {"tool": name, "input": {...}, "missing": field, "question": text}

    # ---- entry ---------------------------------------------------------------------------

    def respond(self, session: Session, text: str) -> Reply:
        """Map one message onto tools; ask for what is missing; answer with the tools' exact figures."""
        text = text.strip()
        if self.pending is not None and not text.startswith("/"):
            pending, self.pending = self.pending, None
            return self._complete(session, pending, text)
        self.pending = None
        if text.startswith("/"):
            return self._slash(session, text)
        return self._words(session, text)

    # ---- slash commands ------------------------------------------------------------------

    def _slash(self, session: Session, text: str) -> Reply:
        command, _, rest = text[1:].strip().partition(" ")
        command, rest = command.lower() or "help", rest.strip()
        args = rest.split()
        if command == "help":
            return Reply(HELP)
        if command in ("params", "memory", "saved"):
            return self._call(session, "recall", {})
        if command == "tasks":
            return self._call(session, "recall", {"include_done_tasks": True})
        if command == "runs":
            method = find_method(rest) if rest else None
            return self._call(session, "lookup_runs", {"method": method, "limit": 10} if method else {"limit": 10})
        if command == "lookup":
            return self._call(session, "lookup_runs", {"run_id": args[0]} if args else {})
        if command == "run":
            method = args[0] if args and args[0] in METHOD_WORDS else None
            prompt = (rest[len(args[0]):].strip() if method else rest) or None
            return self._run(session, method, prompt, again=True)
        if command == "compare":
            named, prompt = leading_methods(rest)
            return self._compare(session, named, unquote(prompt) or None)
        if command in ("deps", "dependencies"):
            return self._call(session, "check_deps", {"method": find_method(rest) or "all"})
        if command in ("guide", "guidance", "suggest"):
            return self._guidance(session, find_method(rest))
        if command == "explain":
            return self._explain(session, find_topic(rest) if rest else None)
        if command == "install":
            return self._install(session, args)
        if command == "train":
            return self._train(session, args[0] if args else None)
        if command == "report":
            return self._call(session, "write_report", {})
        if command == "share":
            return self._share(session, rest or None)
        return Reply(f"Unknown command /{command}.\n{HELP}")

    # ---- words ---------------------------------------------------------------------------

    def _words(self, session: Session, text: str) -> Reply:
        low = text.lower()
        prompt = find_prompt(text)
        head = text.replace(prompt, " ", 1) if prompt else text  # the prompt may say anything: read the rest
        if COMPARE_WORDS.search(head) and not OTHER_ACTIONS.search(head):
            if prompt:
                return self._compare(session, find_methods(head), prompt)
            if STORED_WORDS.search(head):  # "compare the speedups of my medusa and lookahead runs"
                return self._lookup(session, text, one_method_only=True)
            return self._explain(session, "tradeoffs")
        if RUN_WORDS.match(text) and prompt:  # ("run draft: ... install numpy" is a run)
            return self._run(session, find_method(head), prompt, again=_again(head.lower()))
        if re.search(r"\binstall\b", low):
            return self._install(session, find_packages(text))
        if re.search(r"\btrain\w*\b", low) and "medusa" in low:
            return self._train(session, None)
        if re.search(r"\b(share|upload|publish|send)\b", low):
            found = URL_OR_PATH.search(text)
            return self._share(session, found.group(1) if found else None)
        if re.search(r"\breport\b", low):
            return self._call(session, "write_report", {})
        if re.search(r"\b(explain|what is|what's|what are|how does|how do|tell me about)\b", low) and \
                not re.search(r"\b(speedup|figures?|result)\b", low):
            topic = find_topic(text)
            if topic:
                return self._explain(session, topic)
        if re.search(r"\b(dependenc\w*|deps|requirements?)\b", low) or \
                re.search(r"\b(is|are)\b.*\binstalled\b", low):
            return self._call(session, "check_deps", {"method": find_method(text) or "all"})
        if RUN_ID.search(low) or re.search(r"\b(speedup|figures?|results?|acceptance|tokens/s|how fast)\b", low) and \
                re.search(r"\b(what|which|show|how|tell|did|was|were)\b", low):
            return self._lookup(session, text)
        if re.search(r"\b(suggest\w*|recommend\w*|guidance|advice|advise)\b", low) or \
                re.search(r"\b(which|what|how)\b.*\b(param\w*|settings?|window|threshold|k value)\b", low):
            return self._guidance(session, find_method(text))
        if re.search(r"\b(my|saved) (param\w*|settings?)\b|\bwhat do you remember\b|\bunfinished\b", low):
            return self._call(session, "recall", {"include_done_tasks": True})
        if re.search(r"\b(run|try|benchmark|measure|speed up|accelerate|generate|test)\b", low):
            return self._run(session, find_method(text), find_prompt(text), again=_again(low))
        return Reply("I did not map that onto anything I can do.\n" + HELP)

    # ---- workflows -----------------------------------------------------------------------

    def plan_deployment(self, session: Session, request: str) -> Reply:
        """A plan in words only (called after the person approved planning); nothing is run."""
        best = [r for r in session.store.find_runs(limit=200) if r.get("speedup") is not None]
        best.sort(key=lambda r: r["speedup"], reverse=True)
        start = (f"start from your best measured configuration: {statement(best[0])}" if best else
                 "measure the methods on your own prompts first (nothing is measured yet)")
        steps = [start,
                 "measure again with specpilot on the production hardware: speedups depend on the hardware, "
                 "the dtype and the prompts",
                 "choose a serving stack that supports that method and set the same parameters; compare it "
                 "with its own plain decoding on the same prompts",
                 "watch the acceptance rate on real traffic: it changes with the kind of prompts"]
        return Reply("Plan (in words only; specpilot does not deploy or serve anything):\n"
                     + "\n".join(f"{i}. {s}" for i, s in enumerate(steps, start=1)))

    def _call(self, session: Session, name: str, tool_input: dict) -> Reply:
        result = session.call_tool(name, tool_input)
        return Reply(format_result(result), data=[result])

    def _ask(self, tool: str, tool_input: dict, missing: str, question: str) -> Reply:
        self.pending = {"tool": tool, "input": tool_input, "missing": missing, "question": question}
        return Reply(question, awaiting=question)

    def _complete(self, session: Session, pending: dict, answer: str) -> Reply:
        tool_input = dict(pending["input"])
        missing = pending["missing"]
        if missing == "method":
            method = find_method(answer)
            if method is None:
                return self._ask(pending["tool"], tool_input, "method", "Please name a method: "
                                 f"{', '.join(ACCELERATED)} or baseline.")
            tool_input["method"] = method
            if pending["tool"] == "guidance":
                return self._guidance(session, method)
            return self._run(session, method, tool_input.get("prompt"), again=tool_input.get("again", False))
        if missing == "prompt" and pending["tool"] == "compare_methods":
            return self._compare(session, tool_input["methods"], unquote(answer))
        if missing == "prompt":
            return self._run(session, tool_input.get("method"), answer, again=tool_input.get("again", False))
        if missing == "destination":
            return self._share(session, answer.strip())
        if missing == "packages":
            return self._install(session, find_packages("install " + answer))
        return Reply(f"I was waiting for {missing}; let us start over.\n{HELP}")

    def _default_method(self, session: Session) -> str | None:
        return session.store.get_answer("default_method")

    def _run(self, session: Session, method: str | None, prompt: str | None, again: bool = False) -> Reply:
        method = method or self._default_method(session)
        if method is None:
            return self._ask("run_method", {"prompt": prompt, "again": again}, "method",
                             "Which method should I run: draft (a draft model), medusa or lookahead?")
        if not prompt:
            return self._ask("run_method", {"method": method, "again": again}, "prompt",
                             f"Which prompt should I run with {method}?")
        if not again:
            earlier = self._already_measured(session, method, prompt)
            if earlier is not None:
                return Reply(f"This was already measured, so I did not run it again (say 'run it again' to "
                             f"measure anew):\n{earlier}")
        session.last_prompt = prompt
        return self._call(session, "run_method", {"method": method, "prompt": prompt})

    def _compare(self, session: Session, named: list[str], prompt: str | None) -> Reply:
        """Compare the named methods (all when none is) with the baseline on ``prompt``; each method's
        parameters are left to the tool, which takes those saved in memory."""
        methods = compare_list(named)
        if not prompt:
            shown = ", ".join(methods[1:]) if len(methods) < len(compare_list([])) else "all methods"
            return self._ask("compare_methods", {"methods": methods}, "prompt",
                             f"Which prompt should I compare {shown} on (beside the baseline)?")
        session.last_prompt = prompt
        return self._call(session, "compare_methods", {"prompt": prompt, "methods": methods})

    def _already_measured(self, session: Session, method: str, prompt: str) -> str | None:
        saved = session.store.get_params(method) or {}
        for run in session.store.find_runs(method=method, prompt=prompt, limit=5):
            if saved.get("target", run.get("target")) == run.get("target"):
                        return statement(run)
        return None

    def _lookup(self, session: Session, text: str, one_method_only: bool = False) -> Reply:
        """Restate stored runs; ``one_method_only``: filter by method only when the message names one."""
        tool_input: dict[str, Any] = {}
        run_id = RUN_ID.search(text.lower())
        if run_id:
            tool_input["run_id"] = run_id.group(0)
        else:
            named = find_methods(text)
            method = named[0] if named and (len(named) == 1 or not one_method_only) else None
            if method:
                tool_input["method"] = method
            if re.search(r"\b(that|the same|this|last|previous) prompt\b", text, re.IGNORECASE):
                if session.last_prompt:
                    tool_input["prompt_contains"] = session.last_prompt
                else:
                    tool_input["same_prompt_as_last_run"] = True
            quoted = QUOTED.search(text)
            if quoted:
                tool_input["prompt_contains"] = next(g for g in quoted.groups() if g)
        return self._call(session, "lookup_runs", tool_input)

    def _guidance(self, session: Session, method: str | None) -> Reply:
        method = method or self._default_method(session)
        if method is None or method == "baseline":
            return self._ask("guidance", {}, "method", "Guidance for which method: "
                             f"{', '.join(ACCELERATED[:-1])} or {ACCELERATED[-1]}?")
        saved = session.store.get_params(method) or {}
        tool_input = {"method": method}
        if saved.get("target"):
            tool_input["target"] = saved["target"]
        return self._call(session, "guidance", tool_input)

    def _explain(self, session: Session, topic: str | None) -> Reply:
        if topic is None:
            return Reply("I can explain: draft (draft-model speculative decoding), medusa, lookahead, tradeoffs.")
        return self._call(session, "explain", {"topic": topic})

    def _install(self, session: Session, packages: list[str]) -> Reply:
        if not packages:
            return self._ask("install_packages", {}, "packages", "Which packages should I install (PyPI names)?")
        return self._call(session, "install_packages", {"packages": packages})

    def _train(self, session: Session, target: str | None) -> Reply:
        saved = session.store.get_params("medusa") or {}
        target = target or saved.get("target")
        return self._call(session, "train_medusa", {"target": target} if target else {})

    def _share(self, session: Session, destination: str | None) -> Reply:
        if not destination:
            return self._ask("share_results", {}, "destination",
                             "Where should the report go (an http(s) URL or a folder outside this machine)? "
                             "Sharing asks for your approval first. To keep it local, say 'write a report'.")
        return self._call(session, "share_results", {"destination": destination})
