"""The local brain's prompt: a short system text, the tools in one line each, and worked examples.

It is the fixed prefix whose KV cache is kept (and saved to disk), so it holds nothing that changes
between turns. The examples are written for this prompt (not taken from any evaluation set) and
show each kind of request once: a tool call with its key arguments, or a short answer where the
right thing is to ask or decline. Chat markup is ChatML (Qwen2.5, SmolLM2).
"""

from __future__ import annotations

import json

from agent.brains.tool_grammar import in_order, signature
from agent.replies import DEPLOY_SCOPE
from tools.agent_tools.explain import SENTENCE_END, SUMMARY, TOPICS, prompt_text
from tools.agent_tools import registry
from tools.agent_tools.registry import Tool

IM_START, IM_END = "<|im_start|>", "<|im_end|>"
CALL_OPEN = '{"name": "'
ARGS_OPEN = '", "arguments": '
CALL_CLOSE = "}"
MAX_NOTE_CHARS = 200  # an argument's description in a note
ASSISTANT_OPEN = f"{IM_START}assistant\n"  # where the model's turn begins
REPLY = "reply"  # the pseudo-tool of an answer in words
REPLY_LINE = f"{REPLY}(text*: text) - answer in words: ask for what is missing, decline, greet or say goodbye"

SYSTEM = """You are specpilot. You measure speculative decoding methods on this machine (see # Methods). Call \
one tool when a tool serves the request; otherwise call reply with one short sentence.
Rules:
- Figures come only from runs measured here. For other hardware (another GPU or computer) call no tool: say that \
specpilot measures only this machine and will not estimate, and offer to run it here.
- Running or comparing needs the user's own prompt text. If none is given, ask for it.
- Deploying a model for others and topics other than decoding speed are out of scope: say so briefly. Measuring \
on a local vLLM server (measure_serving) is a measurement, not a deployment."""

# The answers in words, by kind (the labelled requests answered in words carry theirs): what is said (None: a
# question for what the likeliest tool needs and the request does not give) and why nothing is served (the task's
# note; None: served). An answer in words never states a figure or claims an action: figures and actions come from
# tools. The deploy kind also asks for approval before any planning (Reply.deploy, agent.loop).
ANSWERS: dict[str, tuple[str | None, str | None]] = {
    "ask": (None, None),
    "elsewhere": ("specpilot measures only the machine it runs on ({machine}); it does not estimate figures for other "
                  "hardware, because speedups depend on the machine. Run specpilot on that machine, or measure here: "
                  '/compare draft ngram "YOUR PROMPT".', "declined: figures for other hardware are not estimated"),
    "outside": ("That is outside what specpilot does: it measures, compares and explains speculative decoding methods "
                "on this machine and trains Medusa and EAGLE heads for them. /help lists what it can do.",
                "declined: outside what specpilot does"),
    "fine_tune": ("specpilot trains only draft heads (Medusa, EAGLE) on a frozen target; fine-tuning, quantizing or "
                  "publishing the model itself is outside what it does.",
                  "declined: changing the target is outside specpilot"),
    "train_eagle": ("An EAGLE head is trained from the terminal, behind an approval: `specpilot eagle train --target "
                    "TARGET --out FOLDER` (hours on a CPU); then run eagle with eagle_heads=FOLDER.",
                    "declined: EAGLE heads are trained from the terminal"),
    "deploy": (DEPLOY_SCOPE, "out of scope: deploying or serving"),
    "delete": ("specpilot does not delete stored runs or memory from the chat: they are kept in {home}. To start "
               "afresh, set SPECPILOT_HOME to a new folder.",
               "declined: stored runs and memory are not deleted from the chat"),
    "harmful": ("I will not do that, nor generate text for such a prompt, not even to time it. Give me another prompt "
                "to measure.", "declined: the request asks for harmful content"),
    "thanks": ("You're welcome. Ask for a run or a comparison whenever you like.", None),
    "help": ("I measure how much speculative decoding (draft model, Medusa, lookahead, EAGLE, prompt lookup) speeds up "
             "generation on this machine ({machine}) against plain generation on the same prompt, compare the methods, "
             "explain them and remember what was measured. Try: compare draft and ngram on \"YOUR PROMPT\"; "
             "or ask which method suits summaries; /help lists the commands.", None),
    "hello": ('Hello! I measure how much speculative decoding speeds up generation on this machine: try compare draft '
              'and ngram on "YOUR PROMPT", or /help.', None),
    "unclear": ('I did not understand that. /help lists what I can do; for example: run ngram on "YOUR PROMPT".',
                "not understood"),
}

# one line per tool (the registry's own descriptions are written for larger models)
SHORT = {
    "run_method": "measure how much faster one method is than plain generation, on the user's prompt",
    "compare_methods": "measure two or more methods side by side on the user's prompt",
    "measure_serving": "measure vLLM's speculative modes against speculation off at given concurrency levels",
    "choose_method": "say which method suits a kind of request (summarization, coding, ...), from what was measured",
    "lookup_runs": "restate figures of runs already stored (past results, speedups, acceptance)",
    "recall": "read memory: saved parameters, unfinished and earlier tasks, recent runs",
    "save_params": "save a method's parameters as the user's defaults",
    "guidance": "suggest starting parameters for a method",
    "measure_cost_curve": "measure the target's forward-pass cost curve on this machine",
    "explain": "explain how a method works and why its output stays the same, or the trade-offs between methods",
    "check_deps": "check the Python packages a method needs",
    "install_packages": "install Python packages with pip (asks the user first)",
    "train_medusa": "train Medusa heads for the target (asks the user first)",
    "write_report": "write a report of stored runs on this machine",
    "share_results": "send a report to a URL or folder outside this machine (asks the user first)",
}

EXAMPLES: list[tuple[str, str | tuple[str, dict]]] = [
    ("show me what you remember", ("recall", {})),
    ("keep guess=4 for lookahead from now on", ("save_params", {"method": "lookahead", "params": {"guess": 4}})),
    ('benchmark ngram on "Translate good morning to French"',
     ("run_method", {"method": "ngram", "prompt": "Translate good morning to French"})),
    ("race lookahead against ngram on 'Reverse a string in Go'",
     ("compare_methods", {"methods": ["lookahead", "ngram"], "prompt": "Reverse a string in Go"})),
    ("list my lookahead results", ("lookup_runs", {"method": "lookahead"})),
    ("which draft model and k suit me?", ("guidance", {"method": "draft"})),
    ("tell me how draft-model speculative decoding works", ("explain", {"topic": "draft"})),
    ("is everything installed for lookahead?", ("check_deps", {"method": "lookahead"})),
    ("pip install gguf", ("install_packages", {"packages": ["gguf"]})),
    ("send the results to https://example.com/hook", ("share_results", {"destination": "https://example.com/hook"})),
    ("run draft", "Which prompt should I run draft on? Please give it in quotes."),
    ("what speedup would lookahead get on an A100?",
     "specpilot measures only this machine and will not estimate other hardware. I can run lookahead here, "
     "or you can run specpilot on that machine."),
    ("write me a poem about cats", "That is outside what I do: I measure speculative decoding on this machine."),
    ("hello", "Hello! I can run, compare and explain speculative decoding methods on this machine. "
              "What would you like to do?"),
]


def methods_text(tools: dict[str, Tool]) -> str:
    """What each method is, one line each: its reference text's title and first sentence (prompts/), so a
    request that describes a method rather than naming it finds its name; baseline and auto from their schema."""
    lines = ["baseline: plain generation, one target forward pass per token (what every method is measured against)"]
    for topic, name in TOPICS.items():
        text = prompt_text(name)
        found = SUMMARY.search(text)
        if found and topic != "tradeoffs":
            title = text.splitlines()[0].lstrip("# ").strip()
            lines.append(f"{topic} ({title}): {SENTENCE_END.split(found.group(1))[0]}")
    run = tools["run_method"].input_schema()["properties"]["method"] if "run_method" in tools else {}
    auto = (run.get("description") or "").partition("auto: ")[2].split(" (")[0]
    if auto:
        lines.append(f"auto: {auto}")
    return "\n".join(lines)


def reply_call(text: str) -> str:
    return call_text(REPLY, {"text": text})


def call_text(name: str, arguments: dict) -> str:
    """A tool call as the model writes it."""
    return f"{CALL_OPEN}{name}{ARGS_OPEN}{json.dumps(arguments, ensure_ascii=False)}{CALL_CLOSE}"


def system_text(tools: dict[str, Tool], worked=None) -> str:
    """The system text; ``worked`` (agent.brains.examples.Example rows) replaces the hand-written examples."""
    lines = [signature(t, SHORT.get(name) or t.description.split(". ")[0][:160]) for name, t in tools.items()]
    examples = []
    pairs = EXAMPLES if worked is None else [
        (e.text, (e.tool, e.args) if e.tool else (e.reply or "Could you say more?")) for e in worked]
    for user, answer in pairs:
        if isinstance(answer, tuple) and answer[0] not in tools:
            continue
        shown = reply_call(answer) if isinstance(answer, str) else \
            call_text(answer[0], in_order(tools[answer[0]], answer[1]))
        examples.append(f"user: {user}\nassistant: {shown}")
    return (f"{SYSTEM}\n\n# Methods\n{methods_text(tools)}\n\n# Tools\n" + "\n".join([*lines, REPLY_LINE]) + "\n\n"
            f"Answer with one JSON object: {CALL_OPEN}NAME{ARGS_OPEN}{{...}}{CALL_CLOSE}\n\n# Examples\n"
            + "\n".join(examples))


def examples_text(examples) -> str:
    """Retrieved worked examples (agent.brains.examples) as a system message placed before this turn."""
    shown, tools = [], registry.load_tools()
    for e in examples:
        tool = tools.get(e.tool) if e.tool else None
        answer = call_text(e.tool, in_order(tool, e.args) if tool else e.args) if e.tool else \
            reply_call(e.reply or "Could you say more?")
        shown.append(f"user: {e.text}\nassistant: {answer}")
    if not shown:
        return ""
    return f"{IM_START}system\n# Similar requests\n" + "\n".join(shown) + f"{IM_END}\n"


def prefix_text(tools: dict[str, Tool], worked=None) -> str:
    """The fixed prefix: the system message (with ``worked`` examples in place of the hand-written ones)."""
    return f"{IM_START}system\n{system_text(tools, worked)}{IM_END}\n"


def arguments_note(descriptions: dict[str, str]) -> str:
    """A system message saying what the optional arguments the model may set or leave out do (their schema
    descriptions)."""
    lines = [f"- {name}: {text[:MAX_NOTE_CHARS]}" for name, text in descriptions.items() if text]
    if not lines:
        return ""
    return (f"{IM_START}system\nOptional arguments: set one only where the request asks for what it does.\n"
            + "\n".join(lines) + f"{IM_END}\n")


def with_note(context: str, note: str) -> str:
    """``context`` (ending with the assistant's turn opened by :func:`user_turn`) with ``note`` before that turn."""
    if not note or not context.endswith(ASSISTANT_OPEN):
        return context
    return context[: -len(ASSISTANT_OPEN)] + note + ASSISTANT_OPEN


def user_turn(text: str) -> str:
    """A user message and the start of the assistant's answer."""
    return f"{IM_START}user\n{text}{IM_END}\n{ASSISTANT_OPEN}"
