"""The command brain (``--brain offline``): what answers with no model and no key, and every brain's slash commands.

It reads commands only, parsed from the tools' own schemas (agent.commands): no word lists. The chat's short
commands name a tool and, for some, the field their trailing text fills::

    /run [METHOD] [key=value ...] PROMPT        run_method (k=4 and other method settings go into params)
    /compare [METHODS ...] [key=value ...] PROMPT   compare_methods

Leading words that are values of a field's schema (``draft``, ``ngram``) fill that field. A required field left
open is asked for, and the next message answers it. Any tool also runs as ``/TOOL key=value ...`` (agent.loop).
Free text gets one message: which brains read words, and what each needs.
"""

from __future__ import annotations

from agent.brains.base import Reply, ToolSession, command_name, is_known_command
from agent.replies import format_details, format_result
from agent.commands import allowed, question_for, read_arguments, unquote
from tools.agent_tools import registry
from tools.errors import ParameterError

# chat command -> (tool, fixed arguments, the field its trailing text fills)
SHORTCUTS: dict[str, tuple[str, dict, str | None]] = {
    "params": ("recall", {}, None), "memory": ("recall", {}, None), "saved": ("recall", {}, None),
    "tasks": ("recall", {"include_done_tasks": True}, None),
    "runs": ("lookup_runs", {"limit": 10}, None), "lookup": ("lookup_runs", {}, "run_id"),
    "run": ("run_method", {}, "prompt"), "compare": ("compare_methods", {}, "prompt"),
    "deps": ("check_deps", {}, None), "dependencies": ("check_deps", {}, None),
    "guide": ("guidance", {}, "task"), "guidance": ("guidance", {}, "task"), "suggest": ("guidance", {}, "task"),
    "explain": ("explain", {}, None), "install": ("install_packages", {}, None), "train": ("train_medusa", {}, "target"),
    "report": ("write_report", {}, None), "share": ("share_results", {}, "destination"),
    "save": ("save_params", {}, None), "measure": ("measure_cost_curve", {}, "target"),
}
DEFAULT_METHOD = ("run_method", "save_params")  # tools whose method is the saved default when not given

HELP = """Commands (any brain; with no model and no key, the only way in):
  /run [METHOD] [k=v ...] PROMPT       run a method beside plain generation      /run draft k=4 Write a haiku
  /compare [METHODS ...] PROMPT        compare methods on one prompt             /compare draft ngram 'def fib(n):'
  /runs [METHOD]   /lookup RUN_ID      stored runs and their figures
  /params   /tasks                     saved parameters; tasks, done and not done
  /save METHOD k=v ...                 save parameters                           /save draft k=6
  /guide [METHOD] [KIND OF WORK]       sized parameters, or which method         /guide summarization
  /measure [TARGET]                    this machine's cost curve
  /explain TOPIC                       draft, medusa, lookahead, eagle, ngram, tradeoffs
  /deps [METHOD]   /install PKG ...    dependencies; install (asks first)
  /train [TARGET]   /report   /share DEST   train Medusa heads, write or share a report (share and train ask first)
  /details                             the whole of the last answer
  /TOOL key=value ...                  any tool by its name, e.g. /measure_serving concurrency=1,8
Settings go as key=value or --key value (the CLI's names)."""


class OfflineBrain:
    """Commands only; keeps one pending question (a required field left open) between messages."""

    name = "offline"

    def __init__(self, fallback_reason: str | None = None):
        self.pending: tuple[str, dict, str, str] | None = None  # (tool, arguments, field, text field)
        self.fallback_reason = fallback_reason  # why a brain that reads words is not in use (None: chosen)

    def respond(self, session: ToolSession, text: str) -> Reply:
        """Run a command; answer a pending question; say what free text needs."""
        text = text.strip()
        if self.pending is not None and not is_known_command(text):
            (tool, arguments, field, text_field), self.pending = self.pending, None
            return self._complete(session, tool, arguments, field, text, text_field or None)
        name = command_name(text)
        if name is None:
            return self.free_text()
        rest = text[len(name) + 1:].strip()
        if name == "help":
            return Reply(HELP)
        if name == "details":
            return self._details(session)
        if name not in SHORTCUTS:
            return Reply(f"Unknown command /{name}.\n{HELP}", not_done=f"unknown command /{name}")
        tool, fixed, text_field = SHORTCUTS[name]
        try:
            arguments = {**fixed, **read_arguments(rest, registry.load_tools()[tool], text_field)}
        except ParameterError as exc:
            return Reply(exc.user_message(), not_done=f"/{name} did not parse")
        return self._call(session, tool, arguments, text_field)

    def free_text(self) -> Reply:
        """The one message free text gets: this brain reads commands only, and which brains read words."""
        why = self.fallback_reason or "you chose the offline brain"
        return Reply(f"I read commands only ({why}). To talk in plain words, use the local brain "
                     "(`specpilot models fetch qwen2.5-coder-1.5b-instruct`, then `--brain local`: runs here, no key) "
                     "or Claude (set ANTHROPIC_API_KEY, then `--brain anthropic`). Commands work now, e.g. "
                     "`/run draft Write a haiku about autumn` or `/compare draft ngram PROMPT`; /help lists them.",
                     not_done="free text needs a brain that reads words")

    def _call(self, session: ToolSession, tool: str, arguments: dict, text_field: str | None) -> Reply:
        """Call ``tool`` when every required field is given (a method from the saved default), else ask."""
        spec = registry.load_tools()[tool]
        schema = spec.input_schema()
        if tool in DEFAULT_METHOD and "method" not in arguments:
            default = session.store.get_answer("default_method")
            if default and default in allowed(schema["properties"]["method"]):
                arguments["method"] = default
        missing = [f for f in schema.get("required", ()) if f not in arguments]
        if missing:
            return self._ask(tool, arguments, missing[0], text_field, schema["properties"].get(missing[0], {}))
        try:
            registry.parse_input(spec, arguments)
        except ParameterError as exc:
            return Reply(exc.user_message(), not_done=f"{tool} did not validate")
        result = session.call_tool(tool, arguments)
        return Reply(format_result(result), data=[result])

    def _ask(self, tool: str, arguments: dict, field: str, text_field: str | None, prop: dict) -> Reply:
        question = question_for(tool, arguments, field, prop, text_field)
        self.pending = (tool, arguments, field, text_field or "")
        return Reply(question, awaiting=question)

    def _complete(self, session: ToolSession, tool: str, arguments: dict, field: str, answer: str,
                  text_field: str | None) -> Reply:
        """The pending call with ``answer`` as ``field``: a text field's answer whole (one pair of quotes
        stripped), any other read by the field's type."""
        spec = registry.load_tools()[tool]
        prop = spec.input_schema()["properties"].get(field, {})
        answer = answer.strip()
        try:
            if field == text_field:
                given = {field: unquote(answer)} if answer else {}
            elif "=" in answer:  # "k=6" for params
                given = read_arguments(answer, spec)
            elif prop.get("type") == "array":  # "gguf lade" for packages
                given = read_arguments(" ".join(f"{field}={_quoted(w)}" for w in answer.replace(",", " ").split()), spec)
            else:
                given = read_arguments(f"{field}={_quoted(answer)}", spec)
        except ParameterError as exc:
            return Reply(exc.user_message(), not_done=f"the answer for {field} did not parse")
        return self._call(session, tool, {**arguments, **given}, text_field)

    def _details(self, session: ToolSession) -> Reply:
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


def _quoted(text: str) -> str:
    return "'" + text.strip().replace("'", "'\"'\"'") + "'"
