"""The offline brain: a deterministic planner that maps the user's words and slash commands onto
the same tools the Claude brain uses, asks for missing parameters, and follows the same workflows
(memory first, exact figures with their run id, approval before install/train/share). No network.

Words are read by agent.brains.phrases (methods, prompt, target, parameter values, hardware, and
which kind of request it is); each kind of request is one rule below, tried in order. A request it
cannot serve is answered as such and recorded as not done, with the reason.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from agent.brains.background import without_thread
from agent.brains.approval_words import APPROVED_TOOLS, find_approval_id
from agent.brains.base import ToolSession, RUN_WORDS, Reply, command_name, is_known_command
from agent.brains.format import CLOSING_TEXT, GREETING_TEXT, HELP, format_details, format_result
from agent.brains.phrase_fields import (compare_params, explained_topic, guidance_fields, known_packages,
                                       method_of_words, newest_n, prompt_filter, report_fields, run_input, run_options,
                                       train_fields)
from agent.brains.param_words import find_params, method_of_params, without_values
from agent.brains.phrases import (ADVICE_QUESTION, AGAIN, ANY_PROMPT_ANSWER, ASKING, BACK_TO_IT, BASELINE_ONLY, BEATS,
                                  COMPARE, COPY_TO, COST_CURVE, DEFAULT_WORD, DEPS_WORDS, DRAFT_SIZES, EVERY_METHOD,
                                  EXPLAIN_LEAD, EXPLAIN_VERB, EXPLAIN_WORDS, FIGURES, GET_VERBS, GREETING, GUIDE_WORDS,
                                  HOW_SPEEDS, STORED_PROMPT, WITHOUT_DRAFT,
                                  INSTALL_WORDS, IN_SCOPE, LOCAL_ONLY, NOT_DEFAULT, OTHER_ACTIONS, PACKAGE_PRESENCE,
                                  PARAM_DEFAULT, PARAM_WORDS, PAST, PUT_THERE, RECALL_STRONG, RECALL_WEAK,
                                  REPLACE_REST, REPORT_WORDS, RUNS_QUESTION, RUN_ANYWHERE, RUN_ID, RUN_LOOSE,
                                  SAVE_ONLY, SAVE_VERBS, SHARE_WORDS, SHORT_PROMPT, SOME_PROMPT, SPEED_QUESTION,
                                  STORED, STRONG_ADVICE, SUPERLATIVE, THANKS, TRADEOFF_QUESTION, TRAIN_WORDS,
                                  UPGRADE_WORDS, URL_OR_PATH, WHICH, WHY_HOW, asks_for_heads, compare_list, find_draft,
                                  find_hardware, find_method, find_methods, find_packages, find_target, find_topic,
                                  first_named, leading_methods, named_methods, unquote)
from agent.brains.prompt_words import Message, find_prompt
from agent.brains.refusals import CONTENT_WRITING, DELETE_WORDS, MODEL_CHANGES, MODEL_TUNING
from tools.agent_tools.choose import category_of
from tools.agent_tools.guidance import detect_hardware
from tools.agent_tools.lookup import statement
from tools.engine.params import ACCELERATED, METHODS
from tools.models import BUILTIN_MODELS, builtin_draft_for

__all__ = ["OfflineBrain", "HELP", "compare_list", "find_method", "find_methods", "find_packages", "find_prompt",
           "find_topic", "find_params", "find_target", "find_hardware", "leading_methods", "unquote"]

# rules for plain words, tried in this order (each returns a Reply, or None to pass)
WORD_RULES = ("_social", "_refusals", "_other_hardware", "_save_words", "_cost_curve_words", "_compare_words",
              "_run_on_prompt", "_gated_words", "_recall_words", "_explicit_explain", "_guidance_words", "_deps_words",
              "_explain_words", "_lookup_words", "_run_words")


class OfflineBrain:
    """Deterministic planner. Keeps one pending question (a missing parameter) between messages."""

    name = "offline"

    def __init__(self):
        self.pending: dict | None = None  # {"tool": name, "input": {...}, "missing": field, "question": text}
        self.approval: str | None = None  # an approval id the current message gives

    # ---- entry ---------------------------------------------------------------------------

    def respond(self, session: ToolSession, text: str) -> Reply:
        """Map one message onto tools; ask for what is missing; answer with the tools' exact figures.
        While a question is pending, anything but a known /command answers it (a path such as
        /tmp/report.md included)."""
        text = text.strip()
        self.approval = find_approval_id(text)  # "I approved it, the id is apr-4471": for its gated call
        if self.pending is not None and not is_known_command(text):
            pending, self.pending = self.pending, None
            return self._complete(session, pending, text)
        if command_name(text) is not None:  # a known command leaves a pending question pending
            return self._slash(session, text)
        return self._words(session, text)

    # ---- slash commands ------------------------------------------------------------------

    def _slash(self, session: ToolSession, text: str) -> Reply:
        command, _, rest = text.strip()[1:].partition(" ")
        command, rest = command.lower(), rest.strip()
        handler = SLASH.get(command)
        if handler is None:
            return Reply(f"Unknown command /{command}.\n{HELP}", not_done=f"unknown command /{command}")
        return handler(self, session, rest, rest.split())

    def _slash_runs(self, session: ToolSession, rest: str, args: list[str]) -> Reply:
        method = find_method(rest) if rest else None
        return self._call(session, "lookup_runs", {"method": method, "limit": 10} if method else {"limit": 10})

    def _slash_run(self, session: ToolSession, rest: str, args: list[str]) -> Reply:
        method = args[0] if args and args[0] in METHODS else None
        rest = rest[len(args[0]):].strip() if method else rest
        options = {}
        while (word := rest.split(" ", 1)[0]) and "=" in word and find_params(word):  # leading k=v options
            options.update(find_params(word))
            rest = rest[len(word):].strip()
        return self._run(session, method, rest or None, again=True, options=options)

    def _slash_compare(self, session: ToolSession, rest: str, args: list[str]) -> Reply:
        named, prompt = leading_methods(rest)
        return self._compare(session, named, unquote(prompt) or None)

    def _slash_save(self, session: ToolSession, rest: str, args: list[str]) -> Reply:
        method = args[0] if args and args[0] in METHODS else None
        params = find_params(rest[len(args[0]):] if method else rest)
        if not params:
            return Reply("Usage: /save METHOD name=value ... e.g. /save draft k=6 or /save lookahead window=7 ngram=4.",
                         not_done="no parameter values given to /save")
        return self._save(session, method or method_of_params(params), params, make_default=False)

    def _slash_details(self, session: ToolSession, rest: str, args: list[str]) -> Reply:
        """The detail form of the last answer's tool results (an explanation's full text is read anew)."""
        results = list(getattr(session, "last_results", None) or [])
        if not results:
            return Reply("There is no answer to detail yet: /details shows the whole of the last answer a tool gave "
                         "in this conversation.", not_done="no tool answered earlier in this conversation")
        parts, shown = [], []
        for result in results:
            if result.name == "explain" and not result.is_error and result.content.get("detail") == "short":
                result = session.call_tool("explain", {"topic": result.content["topic"], "detail": "full"})
            parts.append(format_details(result))
            shown.append(result)
        return Reply("\n\n".join(parts), data=shown, details=True)

    def _slash_measure(self, session: ToolSession, rest: str, args: list[str]) -> Reply:
        target = find_target(rest) or (args[0] if args else None)
        return self._call(session, "measure_cost_curve", {"target": target} if target else {})

    # ---- words ---------------------------------------------------------------------------

    def _words(self, session: ToolSession, text: str) -> Reply:
        msg = Message.read(without_thread(text))
        for rule in WORD_RULES:
            reply = getattr(self, rule)(session, msg)
            if reply is not None:
                return reply
        return self._not_understood(session, msg)

    def _social(self, session: ToolSession, msg: Message) -> Reply | None:
        if msg.words <= 8 and not IN_SCOPE.search(msg.head) and not msg.has(RECALL_STRONG):  # "hi, where were we?"
            if GREETING.search(msg.head):
                return Reply(GREETING_TEXT)
            if THANKS.search(msg.head) and len(THANKS.sub(" ", msg.head).split()) <= 3:  # not "share X to Y, thanks"
                return Reply(CLOSING_TEXT)
        return None

    def _refusals(self, session: ToolSession, msg: Message) -> Reply | None:
        """Deleting what is stored: no tool does that (harmful prompts are declined by the session, for every brain);
        nor does any write a person's own text."""
        if msg.has(CONTENT_WRITING) and not msg.prompt:
            return Reply("I only write reports of the runs specpilot measured (write_report); your own text, such as a "
                         "section of a report or an essay, is outside what I do.",
                         not_done="writing the user's own text is outside specpilot")
        if DELETE_WORDS.search(msg.head) and not (msg.has(REPLACE_REST) and find_params(msg.head)):  # "...keep k=4"
            return Reply(f"I do not delete stored runs or memory from the chat. Everything specpilot remembers is in "
                         f"one SQLite file, {session.store.path}; move or delete it yourself to start afresh.",
                         not_done="no tool deletes stored runs or memory; told where the file is")
        return None

    def _other_hardware(self, session: ToolSession, msg: Message) -> Reply | None:
        named = find_hardware(msg.request or msg.head)  # not "We have a 4090 and got 95 tok/s. Please run X on ..."
        if named is None and BACK_TO_IT.search(msg.request):  # "She has an M2 Ultra. What would X get on her machine?"
            named = find_hardware(msg.head)
        if named is None or (msg.has(SAVE_VERBS) and find_params(msg.head)) or msg.has(GUIDE_WORDS):  # "always int8,
            return None  # even on the GPU": a save; "advise on W, N, G on a GPU": guidance for one
        here = detect_hardware("auto")["name"]
        method = msg.methods[0] if msg.methods else None
        lines = [f"specpilot measures only the machine it runs on (this one: {here}); it does not estimate or "
                 f"predict figures for {named}: speedups depend on the hardware, the dtype, the model and the prompts.",
                 f"I can measure {method or 'a method'} here (e.g. 'run {method or 'draft'}: <prompt>'), or you can "
                 f"install specpilot on that machine and run `specpilot run --method {method or 'draft'} --prompt "
                 "\"...\"` there: its figures are then measured and stored on that machine."]
        stored = session.store.find_runs(method=method, limit=200) if method else session.store.list_runs(limit=200)
        if stored:
            lines.append(f"The {len(stored)} {method or ''} run(s) stored here were measured on this machine, not on "
                         f"{named}; ask 'show my {method or ''} runs' to see them.".replace("  ", " "))
        return Reply("\n".join(lines), not_done=f"no estimate for other hardware ({named}): specpilot measures only "
                                                 "this machine; offered to run here or on that machine")

    def _save_words(self, session: ToolSession, msg: Message) -> Reply | None:
        heads = asks_for_heads(msg.head) and not SAVE_ONLY.match(msg.head)
        numbers = [v for v in find_params(msg.head).values() if isinstance(v, (int, float)) and not isinstance(v, bool)]
        saving = msg.has(SAVE_VERBS) or (bool(re.search(r"\b(?:drop|discard|keep)\b", msg.head, re.I) or
                                          msg.has(REPLACE_REST)) and not msg.prompt and bool(numbers))
        if not saving or heads or msg.has(COST_CURVE):  # "measure the cost curve and store it"
            return None  # "save", "set", "remember", "from now on", "as my default", ..., not "train heads ... default"
        if msg.prompt and (msg.has(SPEED_QUESTION) or msg.has(RUN_ANYWHERE) or msg.has(COMPARE)) and \
                not msg.has(SAVE_ONLY):
            return None  # "how much does X buy me on 'p' if I pin torch to 8 threads": a run
        params = find_params(msg.head) or find_params(msg.text)
        if not params:  # "save my settings for lookahead": which values?
            return self._ask_values(msg) if SAVE_ONLY.match(msg.head) and not msg.has(REPORT_WORDS) else None
        method = first_named(without_values(msg.head), [m for m in msg.methods if m in METHODS]) or \
            method_of_params(params)
        if (draft := find_draft(msg.head)) and method in (None, "draft"):  # "always use X as the draft model"
            params["draft"] = draft
        make_default = bool(DEFAULT_WORD.search(msg.head)) and not PARAM_DEFAULT.search(msg.head)
        if msg.has(NOT_DEFAULT):  # "... but don't make it the default method"
            make_default = None
        return self._save(session, method, params, make_default=make_default, replace=msg.has(REPLACE_REST))

    def _ask_values(self, msg: Message) -> Reply:
        method = msg.methods[0] if msg.methods else "draft"
        question = f"Which values should I save{' for ' + method if msg.methods else ''}? e.g. 'save k=6 for {method}'"
        return Reply(question, awaiting="the parameter values to save")

    def _compare_words(self, session: ToolSession, msg: Message) -> Reply | None:
        if msg.prompt and BASELINE_ONLY.search(msg.head):  # "I just want plain baseline tok/s here ... use: <prompt>"
            return self._run(session, "baseline", msg.prompt, target=msg.target, options=find_params(msg.head))
        if asked_one(msg) is not None and msg.prompt:
            return None  # a comparison in the scene, one method asked to run: a run
        wants = msg.has(COMPARE) or ((msg.has(SUPERLATIVE) or msg.has(BEATS)) and len(msg.methods) >= 2) or \
            (msg.has(SUPERLATIVE) and msg.has(WHICH)) or \
            (msg.has(EVERY_METHOD) and (msg.prompt or msg.has(RUN_ANYWHERE)))  # "benchmark every technique on ..."
        alone = len([m for m in msg.methods if m != "baseline"]) == 1 and find_params(msg.head).get("peers") and \
            not msg.has(EVERY_METHOD) and not re.search(r"\b(?:everything|all)\b", msg.head, re.I) and \
            not ("baseline" in msg.methods and msg.has(COMPARE))  # one and its peers, not "compare baseline and X"
        written = msg.has(REPORT_WORDS) and not msg.prompt and (msg.has(PAST) or report_fields(msg.head))  # "write up
        wants = wants and not written  # the comparison we did in task 12": a report of it
        if not wants or alone or msg.has(OTHER_ACTIONS) or (msg.has(RECALL_STRONG) and not msg.prompt):  # "did we
            return None  # finish the comparison?": memory
        if not msg.prompt and msg.has(PAST) and msg.has(FIGURES):  # "what tok/s did eagle get vs baseline?"
            return self._lookup(session, msg.text)
        if msg.prompt or msg.has(SOME_PROMPT):  # "on a short prompt", "on any prompt": pick one and say which
            options = run_options(msg.head) | compare_params(msg.head, compare_list(msg.methods))
            return self._compare(session, msg.methods, msg.prompt or SHORT_PROMPT, msg.target, options)
        if msg.has(STORED):  # "compare the speedups of my medusa and lookahead runs"
            return self._lookup(session, msg.text, one_method_only=True)
        if msg.has(TRADEOFF_QUESTION):
            return self._explain(session, "tradeoffs")
        return self._compare(session, msg.methods, None, msg.target)

    def _run_on_prompt(self, session: ToolSession, msg: Message) -> Reply | None:
        if not msg.prompt or RUN_ID.search(msg.text.lower()):  # a run id: a stored run asked about
            return None
        if STORED_PROMPT.search(msg.head):  # "every run whose prompt has 'merge two sorted' in it": stored runs
            return self._lookup(session, msg.text)
        if (one := asked_one(msg)) is not None:  # "My advisor says medusa wins over lookahead. Can you run lookahead
            msg = dataclasses.replace(msg, methods=[one])  # on ...?": the one asked for
        past = PAST.search(msg.request or msg.head)  # not "Nobody recalls last year's settings. Use draft X on ..."
        if len([m for m in msg.methods if m != "baseline"]) >= 2:  # "benchmark baseline, ngram and medusa on: ..."
            options = run_options(msg.head) | compare_params(msg.head, compare_list(msg.methods))
            return self._compare(session, msg.methods, msg.prompt, msg.target, options)
        asked = RUN_WORDS.match(msg.text) or ((msg.has(RUN_ANYWHERE) or msg.has(SPEED_QUESTION)
                                               or len(msg.methods) == 1) and not past) or \
            (msg.has(AGAIN) and msg.has(RUN_ANYWHERE))  # "that last run was useless; try it again on ..."
        draft = find_draft(msg.head)
        if not (asked or (draft and not past)):  # "Use target X and draft Y. The prompt is: ...": draft's run
            return None
        method = msg.methods[0] if msg.methods else "draft" if draft else None
        return self._run(session, method, msg.prompt, again=msg.has(AGAIN), target=msg.target,
                         options=find_params(msg.head) | ({"draft": draft} if draft else {}))

    def _gated_words(self, session: ToolSession, msg: Message) -> Reply | None:
        upgrade = msg.has(UPGRADE_WORDS)
        # "grab lade", not "is lade set up?"
        getting = msg.has(GET_VERBS) and not msg.has(DEPS_WORDS) and not msg.has(PACKAGE_PRESENCE)
        if (upgrade or getting) and known_packages(msg.head) and not msg.has(INSTALL_WORDS):
            return self._call(session, "install_packages",  # "upgrade transformers", "grab lade"
                              {"packages": known_packages(msg.head), **({"upgrade": True} if upgrade else {})})
        if msg.has(INSTALL_WORDS):
            return self._install(session, find_packages(msg.text) or known_packages(msg.head), upgrade)  # "install it"
        if msg.has(TRAIN_WORDS) and "eagle" in msg.methods:  # no chat tool trains an EAGLE head
            return Reply("An EAGLE head is trained from the terminal, behind the same approval as Medusa: `specpilot "
                         "eagle train --target TARGET --out FOLDER` (hours on a CPU; the default target ships "
                         "with one).",
                         not_done="EAGLE heads are trained with `specpilot eagle train`, not from the chat")
        if msg.has(TRAIN_WORDS) and re.search(r"\b(?:medusa|heads?)\b", msg.head, re.IGNORECASE):
            return self._train(session, msg.target, train_fields(msg.text))
        if msg.has(MODEL_CHANGES) and not msg.methods:
            return Reply("specpilot measures decoding on a model as it is; quantizing a model or publishing it to a "
                         "hub is outside what it does.",
                         not_done="quantizing or publishing the model is outside specpilot")
        if msg.has(MODEL_TUNING):
            return Reply("specpilot trains only draft heads (Medusa, EAGLE) on a frozen target; fine-tuning the model "
                         "itself (LoRA, adapters, full fine-tuning) is outside what it does.",
                         not_done="fine-tuning the model itself is outside specpilot")
        if msg.has(COPY_TO) and URL_OR_PATH.search(msg.text):  # "copy a report of task 4 to /mnt/share"
            return self._share(session, URL_OR_PATH.search(msg.text).group(1), report_fields(msg.head))
        report = report_fields(msg.head)
        there = URL_OR_PATH.search(msg.text) if msg.has(REPORT_WORDS) and PUT_THERE.search(msg.head) else None
        if there:  # "our group's folder is /nfs/results, outside specpilot. Put the report there"
            return self._share(session, there.group(1), report)
        if msg.has(SHARE_WORDS) and not msg.has(LOCAL_ONLY):  # not "keep it on this machine, nothing to send"
            found = URL_OR_PATH.search(msg.text)
            return self._share(session, found.group(1) if found else None, report)
        if msg.has(REPORT_WORDS):
            return self._call(session, "write_report", report)
        return None

    def _cost_curve_words(self, session: ToolSession, msg: Message) -> Reply | None:
        if not msg.has(COST_CURVE):
            return None
        fields = {k: v for k, v in find_params(msg.head).items() if k in ("dtype", "repeats")}
        return self._call(session, "measure_cost_curve", {**fields, **({"target": msg.target} if msg.target else {})})

    def _recall_words(self, session: ToolSession, msg: Message) -> Reply | None:
        if (msg.methods or msg.target) and (msg.has(FIGURES) or msg.has(RUNS_QUESTION)):  # stored runs, not memory
            return None
        if msg.has(GUIDE_WORDS) and msg.has(PARAM_WORDS) and not msg.has(PAST):  # "recommend parameters for my setup"
            return None
        if (msg.has(PACKAGE_PRESENCE) and known_packages(msg.head)) or msg.has(DEPS_WORDS):  # "before I try llama.cpp:
            return None  # is gguf here?", "an ImportError last time I tried EAGLE: what's missing?"
        if msg.has(RECALL_STRONG) or (msg.has(RECALL_WEAK) and not msg.methods and not msg.has(FIGURES)):
            return self._call(session, "recall", {"include_done_tasks": True})
        return None

    def _explicit_explain(self, session: ToolSession, msg: Message) -> Reply | None:
        topic = find_topic(msg.head) if EXPLAIN_VERB.search(msg.head) else None
        return self._explain(session, topic) if topic else None

    def _guidance_words(self, session: ToolSession, msg: Message) -> Reply | None:
        if RUN_WORDS.match(msg.text) or re.search(HOW_SPEEDS, msg.head, re.I):  # "run EAGLE with depth 8": a run
            return None  # (its prompt asked for), not advice; "how can lookahead speed anything up?": how it works
        about_values = msg.has(PARAM_WORDS) and not msg.has(PAST) and not msg.has(TRADEOFF_QUESTION)
        advice = msg.has(GUIDE_WORDS) or (about_values and (
            msg.has(STRONG_ADVICE) or (msg.has(ADVICE_QUESTION) and not msg.has(FIGURES) and
                                       not WHY_HOW.search(re.sub(r",?\s*and why\W*$", " ", msg.head, flags=re.I)))))
        if not advice:
            return None
        named = find_methods(DRAFT_SIZES.sub(" ", msg.head)) or msg.methods  # "draft sizes for prompt lookup": ngram
        method = next((m for m in named if m in ACCELERATED), None) or method_of_words(msg.head)
        return self._guidance(session, method, msg.target, guidance_fields(msg.head), words=msg.head)

    def _explain_words(self, session: ToolSession, msg: Message) -> Reply | None:
        if not msg.has(EXPLAIN_WORDS) or msg.has(FIGURES):
            return None
        if WITHOUT_DRAFT.search(msg.head):  # "how can lookahead speed anything up without a draft model?": lookahead's
            msg = dataclasses.replace(msg, head=WITHOUT_DRAFT.sub(" ", msg.head),
                                      methods=named_methods(WITHOUT_DRAFT.sub(" ", msg.head)))
        several = len([m for m in msg.methods if m != "baseline"]) >= 2 and not explained_topic(msg.head)
        led = EXPLAIN_LEAD.match(msg.head)  # "what is EAGLE and how is it ...", not "what's the difference between ..."
        first_words = " ".join(msg.head[led.end():].split()[:2]) if led else ""
        lead = explained_topic(msg.head) if led and explained_topic(first_words) else None
        one = [m for m in msg.methods if m != "baseline"]
        single = one[0] if len(one) == 1 and not msg.has(COMPARE) else None  # "the catch with lookahead": lookahead's
        several = several or bool(re.search(r"\btrade-?offs? (?:between|among|across|of) (?:the |these |those |all )?"
                                            r"(?:approaches|methods|techniques|them|options)\b", msg.head, re.I))
        topic = lead or ("tradeoffs" if several or (msg.has(TRADEOFF_QUESTION) and not single)
                         else explained_topic(msg.head) or single or find_topic(msg.head))
        return self._explain(session, topic) if topic else None

    def _deps_words(self, session: ToolSession, msg: Message) -> Reply | None:
        if not (msg.has(DEPS_WORDS) or (msg.has(PACKAGE_PRESENCE) and known_packages(msg.head))):
            return None
        return self._call(session, "check_deps", {"method": find_method(msg.head) or find_method(msg.text) or "all"})

    def _lookup_words(self, session: ToolSession, msg: Message) -> Reply | None:
        asking = msg.has(ASKING) or msg.head.rstrip().endswith("?") or (msg.has(FIGURES) and (
            msg.has(RUNS_QUESTION) or newest_n(msg.head) or re.search(r"\b(?:i|we) (?:got|saw|measured)\b", msg.head,
                                                                     re.I))) or \
            re.match(r"\W*(?:any|all|my)?\s*runs (?:with|on|for|where)\b", msg.head, re.I)  # "any runs with X in it"
        if RUN_WORDS.match(msg.text) and not msg.has(PAST) and not RUN_ID.search(msg.text.lower()):
            return None  # "try ngram on my prompt and tell me the speedup": a run, its prompt asked for
        if RUN_ID.search(msg.text.lower()) or ((msg.has(FIGURES) or msg.has(RUNS_QUESTION)) and asking):
            return self._lookup(session, msg.text)
        return None

    def _run_words(self, session: ToolSession, msg: Message) -> Reply | None:
        if not msg.has(RUN_LOOSE):
            return None
        method = msg.methods[0] if msg.methods else None
        return self._run(session, method, msg.prompt, again=msg.has(AGAIN), target=msg.target,
                         options=find_params(msg.head))

    def _not_understood(self, session: ToolSession, msg: Message) -> Reply:
        """A request no rule read: said so in a few lines, with what this machine measured so far and how to
        measure (the full list of what the planner does is /help)."""
        best = max((r for r in session.store.find_runs(limit=200) if r.get("speedup") is not None),
                   key=lambda r: r["speedup"], default=None)
        measured = f"Best measured here so far: {statement(best)}." if best else "Nothing is measured on this machine yet."
        hint = f"{measured}\nTry 'compare draft and ngram on <your prompt>' (measures both here), or /help for everything I do."
        if IN_SCOPE.search(msg.text):
            return Reply(f"I did not map that onto anything I can do.\n{hint}",
                         not_done="the request was not understood by the rule planner")
        return Reply("I did not map that onto anything I can do: it looks outside what specpilot does (measuring "
                     f"speculative decoding on this machine).\n{hint}", not_done="outside specpilot's scope")

    # ---- workflows -----------------------------------------------------------------------

    def plan_deployment(self, session: ToolSession, request: str) -> Reply:
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

    def _call(self, session: ToolSession, name: str, tool_input: dict) -> Reply:
        if name in APPROVED_TOOLS and self.approval:  # the gate checks the id is for exactly this
            tool_input = {**tool_input, "approval_id": self.approval}
        result = session.call_tool(name, tool_input)
        return Reply(format_result(result), data=[result])

    def _ask(self, tool: str, tool_input: dict, missing: str, question: str) -> Reply:
        self.pending = {"tool": tool, "input": tool_input, "missing": missing, "question": question}
        return Reply(question, awaiting=question)

    def _complete(self, session: ToolSession, pending: dict, answer: str) -> Reply:
        tool_input = dict(pending["input"])
        missing, tool = pending["missing"], pending["tool"]
        if missing == "method":
            method = find_method(answer)
            if method is None:
                return self._ask(tool, tool_input, "method", "Please name a method: "
                                 f"{', '.join(ACCELERATED)} or baseline.")
            if tool == "guidance":
                return self._guidance(session, method, tool_input.get("target"))
            if tool == "save_params":
                return self._save(session, method, tool_input["params"], tool_input.get("make_default", False))
            return self._run(session, method, tool_input.get("prompt"), again=tool_input.get("again", False),
                             target=tool_input.get("target"), options=tool_input.get("options"))
        if missing == "prompt":
            prompt = SHORT_PROMPT if ANY_PROMPT_ANSWER.match(answer) else unquote(answer)
            if tool == "compare_methods":
                return self._compare(session, tool_input["methods"], prompt, tool_input.get("target"))
            return self._run(session, tool_input.get("method"), prompt, again=tool_input.get("again", False),
                             target=tool_input.get("target"), options=tool_input.get("options"))
        if missing == "destination":
            return self._share(session, answer.strip(), tool_input)
        if missing == "packages":
            return self._install(session, find_packages("install " + answer))
        return Reply(f"I was waiting for {missing}; let us start over.\n{HELP}")

    def _default_method(self, session: ToolSession) -> str | None:
        return session.store.get_answer("default_method")

    def _run(self, session: ToolSession, method: str | None, prompt: str | None, again: bool = False,
             target: str | None = None, options: dict | None = None) -> Reply:
        method = method or self._default_method(session)
        keep = {"again": again, "target": target, "options": options or {}}
        if method is None:
            return self._ask("run_method", {"prompt": prompt, **keep}, "method",
                             "Which method should I run: draft (a draft model), medusa, lookahead, eagle or ngram "
                             "(prompt lookup)?")
        if not prompt:
            return self._ask("run_method", {"method": method, **keep}, "prompt",
                             f"Which prompt should I run with {method}? (say 'any' for a short one)")
        problem = None if (options or {}).get("draft") else self._draft_problem(session, [method], target)
        if problem:
            return Reply(problem, not_done=problem)
        if not again:
            earlier = self._already_measured(session, method, prompt, target)
            if earlier is not None:
                return Reply(f"This was already measured, so I did not run it again (say 'run it again' to "
                             f"measure anew):\n{earlier}")
        session.last_prompt = prompt
        return self._call(session, "run_method", run_input(method, prompt, target, options or {}))

    def _draft_problem(self, session: ToolSession, methods: list[str], target: str | None) -> str | None:
        """Why the draft method cannot run on ``target`` (no smaller built-in model shares its tokenizer
        and no draft is saved), or None."""
        if target not in BUILTIN_MODELS or not any(METHODS[m].needs_draft for m in methods if m in METHODS):
            return None  # a model of the user's own: the tool finds out whether a draft fits it
        saved = session.store.get_params("draft") or {}
        if builtin_draft_for(target) or (saved.get("draft") and saved.get("target") == target):
            return None
        return (f"{target} has no built-in draft model: no smaller built-in model shares its tokenizer, and a "
                "draft as large as the target measures nothing useful. Save one with '/save draft draft=REF "
                f"target={target}', or use a method without a draft (lookahead, ngram).")

    def _compare(self, session: ToolSession, named: list[str], prompt: str | None, target: str | None = None,
                 options: dict | None = None) -> Reply:
        """Compare the named methods (all when none is) with the baseline on ``prompt``; each method's
        parameters are left to the tool, which takes those saved in memory."""
        methods = compare_list(named)
        if not prompt:
            shown = ", ".join(methods[1:]) if len(methods) < len(compare_list([])) else "all methods"
            return self._ask("compare_methods", {"methods": methods, "target": target}, "prompt",
                             f"Which prompt should I compare {shown} on (beside the baseline)? Say 'any' for a short "
                             "one; for how they differ in principle, ask 'what are the trade-offs?'.")
        note = self._draft_problem(session, methods, target)
        if note:
            methods = [m for m in methods if not METHODS[m].needs_draft]
        session.last_prompt = prompt
        tool_input = {"prompt": prompt, "methods": methods, **(options or {}), **({"target": target} if target else {})}
        reply = self._call(session, "compare_methods", tool_input)
        if prompt == SHORT_PROMPT:
            reply.text = f"(On a short prompt I picked: {prompt!r}.)\n{reply.text}"
        if note:
            reply.text = f"Draft left out: {note}\n{reply.text}"
        return reply

    def _already_measured(self, session: ToolSession, method: str, prompt: str, target: str | None = None) -> str | None:
        saved = session.store.get_params(method) or {}
        for run in session.store.find_runs(method=method, prompt=prompt, limit=5):
            if (target or saved.get("target", run.get("target"))) == run.get("target"):
                return statement(run)
        return None

    def _lookup(self, session: ToolSession, text: str, one_method_only: bool = False) -> Reply:
        """Restate stored runs; ``one_method_only``: filter by method only when the message names one."""
        newest, target = newest_n(text), find_target(text)
        tool_input: dict[str, Any] = {"limit": min(newest, 50)} if newest else {}
        if target:
            tool_input["target"] = target
        run_id = RUN_ID.search(text.lower())
        if run_id:
            tool_input["run_id"] = run_id.group(0)
        else:
            named = find_methods(text)
            method = named[0] if named and (len(named) == 1 or not one_method_only) else None
            if method:
                tool_input["method"] = method
            tool_input |= prompt_filter(text, session.last_prompt)
        return self._call(session, "lookup_runs", tool_input)

    def _guidance(self, session: ToolSession, method: str | None, target: str | None = None,
                  fields: dict | None = None, words: str = "") -> Reply:
        """Guidance for the method the user named; where they named none, the choice between methods (for
        the kind of work their ``words`` name, when they name one), never the saved default method's advice."""
        tool_input = {**(fields or {}), **({"target": target} if target else {})}
        if method is None or method == "baseline":
            task = category_of(words)
            return self._call(session, "guidance", {**tool_input, **({"task": task} if task else {})})
        return self._call(session, "guidance", {"method": method, **tool_input})

    def _save(self, session: ToolSession, method: str | None, params: dict, make_default: bool | None,
              replace: bool = False) -> Reply:
        """``make_default`` None: the user said not to make it the default method."""
        method = method or self._default_method(session)
        if method is None:
            shown = ", ".join(f"{k}={v}" for k, v in params.items())
            return self._ask("save_params", {"params": params, "make_default": make_default}, "method",
                             f"For which method should I save {shown}: {', '.join(ACCELERATED)} or baseline?")
        make_default = make_default is not None and (make_default or self._default_method(session) is None)
        return self._call(session, "save_params", {"method": method, "params": params, "make_default": make_default,
                                                   **({"replace": True} if replace else {})})

    def _explain(self, session: ToolSession, topic: str | None) -> Reply:
        if topic is None:
            return Reply("I can explain: draft (draft-model speculative decoding), medusa, lookahead, eagle, "
                         "tradeoffs.")
        return self._call(session, "explain", {"topic": topic})

    def _install(self, session: ToolSession, packages: list[str], upgrade: bool = False) -> Reply:
        if not packages:
            return self._ask("install_packages", {}, "packages", "Which packages should I install (PyPI names)?")
        return self._call(session, "install_packages", {"packages": packages, **({"upgrade": True} if upgrade else {})})

    def _train(self, session: ToolSession, target: str | None, sizes: dict | None = None) -> Reply:
        saved = session.store.get_params("medusa") or {}
        target = target or saved.get("target")
        sizes = dict(sizes or {})
        if target and target in sizes.get("data_files", []):  # "no heads for the checkpoint in ./m": the model, no data
            sizes["data_files"] = [f for f in sizes["data_files"] if f != target] or None
            sizes = {k: v for k, v in sizes.items() if v}
        return self._call(session, "train_medusa", {**({"target": target} if target else {}), **(sizes or {})})

    def _share(self, session: ToolSession, destination: str | None, report: dict | None = None) -> Reply:
        if not destination:
            return self._ask("share_results", dict(report or {}), "destination",
                             "Where should the report go (an http(s) URL or a folder outside this machine)? "
                             "Sharing asks for your approval first. To keep it local, say 'write a report'.")
        destination = destination.rstrip(".,;:!?)'\"") if re.search(r"[\w/]", destination[:-1]) else destination
        return self._call(session, "share_results", {"destination": destination, **(report or {})})


def asked_one(msg: Message) -> str | None:
    """The one method the sentences that ask name, where the others name more ("My advisor says medusa wins over
    lookahead. Can you run lookahead on ...?"), and those sentences compare nothing; else None."""
    if msg.request == msg.head or COMPARE.search(msg.request):
        return None
    named = [m for m in named_methods(msg.request) if m != "baseline"]
    return named[0] if len(named) == 1 and len([m for m in msg.methods if m != "baseline"]) >= 2 else None


SLASH = {
    "help": lambda self, session, rest, args: Reply(HELP),
    "params": lambda self, session, rest, args: self._call(session, "recall", {}),
    "memory": lambda self, session, rest, args: self._call(session, "recall", {}),
    "saved": lambda self, session, rest, args: self._call(session, "recall", {}),
    "tasks": lambda self, session, rest, args: self._call(session, "recall", {"include_done_tasks": True}),
    "runs": OfflineBrain._slash_runs,
    "lookup": lambda self, session, rest, args: self._call(session, "lookup_runs", {"run_id": args[0]} if args else {}),
    "run": OfflineBrain._slash_run,
    "compare": OfflineBrain._slash_compare,
    "deps": lambda self, session, rest, args: self._call(session, "check_deps", {"method": find_method(rest) or "all"}),
    "guide": lambda self, session, rest, args: self._guidance(session, find_method(rest), find_target(rest), words=rest),
    "explain": lambda self, session, rest, args: self._explain(session, find_topic(rest) if rest else None),
    "install": lambda self, session, rest, args: self._install(session, args),
    "train": lambda self, session, rest, args: self._train(session, args[0] if args else None),
    "report": lambda self, session, rest, args: self._call(session, "write_report", {}),
    "share": lambda self, session, rest, args: self._share(session, rest or None),
    "save": OfflineBrain._slash_save,
    "measure": OfflineBrain._slash_measure,
    "details": OfflineBrain._slash_details,
}
SLASH.update({"dependencies": SLASH["deps"], "guidance": SLASH["guide"], "suggest": SLASH["guide"]})
