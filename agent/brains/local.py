"""The local brain: a local instruct model with tool calling, no network and no key; no word rules.

Every turn, a tool classifier learned from the labelled chat requests (agent.brains.classifier; make_brain
gives the shipped one) picks the tool or an answer in words, and the model writes that call's arguments in
one constrained decode (agent.brains.constrained) of ``{"name": ..., "arguments": {...}}`` after a cached
prefix that shows typical labelled requests of every tool (agent.brains.examples). Without a classifier the
model also chooses the name: one of the registry's tools or ``reply`` (an answer in words: a question, a
refusal, a greeting). The arguments follow the tool's argument grammar (agent.brains.tool_grammar), and the
call is validated with the tool's pydantic model; one that does not validate is decoded once more with the
error in the conversation. A prompt or destination the user never wrote is asked for, not invented; an
optional filter they never wrote is dropped. The tool's result is answered with the formatter
(agent.replies: exact figures and their source), so the model writes only what it must.

Speed: a built-in model runs its GGUF file on llama.cpp (tools.engine.llamacpp; transformers
otherwise). The system prompt and tool list are a fixed prefix whose KV cache is computed once and
saved beside the model (``<models>/<name>/local-brain/``; other models: the specpilot home), keyed
by a hash of the model files, the runner and the prefix, so later turns and later ``ask`` processes
run only their new tokens. Model: the constructor's ``model``, else ``SPECPILOT_LOCAL_MODEL``, else
:data:`DEFAULT_LOCAL_MODEL` (the most accurate built-in model in benchmarks/scripts/conversation.py).
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.metadata
import json
import logging
import math
import os
import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from agent.brains import local_prompt, tool_grammar
from agent.brains.base import QUOTED, Reply
from agent.brains.classifier import MAX_CHARS as CLASSIFIER_MAX_CHARS
from agent.brains.classifier import NUMBER as CLASSIFIER_NUMBER
from agent.brains.classifier import _numbers as classifier_numbers
from agent.brains.classifier import (ABSENT, MORE_LIKELY, NO_FIELD, NO_TOOL, TOKEN, WORD_EDGES, ToolClassifier,
                                     default_classifier, spelled_out)
from agent.brains.constrained import ConstrainedLM
from agent.brains.examples import NEAREST, default_index, typical_examples
from agent.commands import question_for
from agent.replies import format_result

from memory.helpers import home_dir
from tools import models
from tools.agent_tools import registry
from tools.agent_tools.policy import REFUSAL, check_content
from tools.agent_tools.saved_params import validate_saved_params
from tools.engine import llamacpp
from tools.engine.cpu_info import cpu_name
from tools.errors import ParameterError

log = logging.getLogger(__name__)

MODEL_ENV = "SPECPILOT_LOCAL_MODEL"
BACKEND_ENV = "SPECPILOT_LOCAL_BACKEND"  # auto (llama.cpp for a built-in model when installed) or transformers
THREADS_ENV = "SPECPILOT_BRAIN_THREADS"
N_CTX = 8192  # llama.cpp context: prefix (~1.3k tokens) + history + a pasted prompt
DEFAULT_LOCAL_MODEL = "qwen2.5-coder-1.5b-instruct"
CACHE_FORMAT = 1  # bump when the saved prefix layout changes
KEPT_PREFIXES = 3  # saved prompts kept per model state (about 120 MB each for the built-in model)
MAX_TEXT_CHARS = 240  # a text answer is a sentence or two
MAX_CALL_TOKENS = 400  # a call with a pasted prompt copied into it
HISTORY_CHARS = 3000  # conversation kept in the context (older turns are dropped)
SURE = 0.8  # the classifier's pick is taken as it is from this probability on
PLAUSIBLE = 0.05  # below it, a class is no candidate for the model to choose
OFFERED = 0.01  # an optional choice its head would leave out is offered with its likeliest value from this on
MAX_CANDIDATES = 4
MAX_SPAN = 16  # the most values a list of two written ends may be read as (a range: "k from 1 to 4")
TYPICAL_PER_TOOL = 3  # worked examples per tool in the classifier mode's cached prefix
NUMBER = re.compile(r"-?\d+(?:\.\d+)?|-?\.\d+")
SENTENCE_END = re.compile(r"[.!?](?=\s)|\n")  # where a prompt may end before the settings written after it
KEYED = re.compile(r"(?<![\w.-])([A-Za-z]+(?:_[A-Za-z]+)+)\s*[=:]?\s*(\d)")  # max_new_tokens=64
KIND_NEIGHBOURS = 5  # labelled answers in words that vote on a reply's kind (chosen leaving whole sets out)
KEYED_TEXT = re.compile(r"(?<![\w.-])([A-Za-z]+(?:_[A-Za-z]+)*)=(\S+)")  # target=./models/x

_ENGINES: dict[str, ConstrainedLM] = {}
_QUIET = None  # llama.cpp's log callback, kept alive while it is installed


def local_model_ref() -> str:
    return os.environ.get(MODEL_ENV) or DEFAULT_LOCAL_MODEL


def local_model_available(ref: str | None = None) -> bool:
    """Whether the local brain's model is on this machine (fetched built-in model or local folder)."""
    ref = ref or local_model_ref()
    if ref.lower() in models.BUILTIN_MODELS:
        return any(r.name == ref.lower() and (r.converted or r.gguf) for r in models.list_models())
    return Path(ref).expanduser().exists()


def prefix_cache_path(ref: str, runner: str, prefix: str) -> Path:
    """Where the prefix KV cache of ``ref`` run by ``runner`` for ``prefix`` is saved: beside a built-in
    model (in the models folder), else in the specpilot home; named by a hash of the model's files, the
    runner and the libraries (its state) and one of the prompt: ``NAME-STATE-PROMPT.pt``."""
    where, gguf = models.resolve_ref(ref)
    files = sorted(Path(where).glob("*.safetensors")) if isinstance(where, Path) else []
    if ref.lower() in models.BUILTIN_MODELS:
        files.append(models.gguf_path(models.builtin(ref.lower())))
    elif gguf:
        files.append(Path(where) / gguf)
    stamp = [(p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in files if p.is_file()]
    versions = [_version(package) for package in ("transformers", "llama-cpp-python")]  # read, not imported
    state = hashlib.sha256(json.dumps([CACHE_FORMAT, str(where), gguf, stamp, runner, versions],
                                      default=str).encode()).hexdigest()[:10]
    digest = f"{state}-{hashlib.sha256(prefix.encode()).hexdigest()[:10]}"
    if ref.lower() in models.BUILTIN_MODELS:
        return brain_folder(ref) / f"prefix-{digest}.pt"
    return brain_folder(ref) / f"{Path(ref).name[:40].replace('-', '_')}-{digest}.pt"


def brain_folder(ref: str | None = None) -> Path:
    """Where the local brain keeps what it computes once: beside a built-in model ``ref`` (in the models
    folder), else in the specpilot home."""
    if ref is not None and ref.lower() in models.BUILTIN_MODELS:
        return models.models_dir() / ref.lower() / "local-brain"
    return home_dir() / "cache" / "local-brain"


def stale_prefixes(path: Path, keep: int = KEPT_PREFIXES) -> list[Path]:
    """The saved prefixes beside ``path`` to remove once it is saved: those of another state of the model
    (its files, runner or libraries changed), and beyond the ``keep`` newest of other prompts of the same
    state (the brain's prompt and the plain one of the slow tests and the grammar benchmark live side by side);
    and the saved token pieces of a state no prefix left in the folder has."""
    name, state, _ = path.stem.split("-")
    others = sorted((p for p in path.parent.glob(f"{name}-*.pt") if p != path),
                    key=lambda p: p.stat().st_mtime, reverse=True)
    same = [p for p in others if p.stem.count("-") == 2 and p.stem.split("-")[1] == state]
    stale = [p for p in others if p not in same] + same[keep - 1:]  # an older layout's name is another state
    kept = {p.stem.split("-")[1] for p in path.parent.glob("*.pt") if p not in stale and p.stem.count("-") == 2}
    return stale + [p for p in path.parent.glob("pieces-*.npz") if p.stem.split("-", 1)[1] not in kept]


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def stop_ids(tokenizer) -> list[int]:
    if hasattr(tokenizer, "stop_ids"):  # llama.cpp's tokenizer of a GGUF file knows its end-of-generation tokens
        return sorted(tokenizer.stop_ids())
    fast = getattr(tokenizer, "backend_tokenizer", None)  # a lookup, not the whole vocabulary (0.25 s) built
    find = fast.token_to_id if fast is not None else tokenizer.get_vocab().get
    return sorted(i for i in {tokenizer.eos_token_id, *(find(t) for t in (local_prompt.IM_END, "<|endoftext|>"))}
                  if isinstance(i, int))


def brain_threads() -> int:
    """CPU threads for llama.cpp: the cores other processes leave free now (at least one). llama.cpp's
    threads wait for each other at every layer, so on a busy machine fewer threads run faster. "Now" is a
    short sample of the machine's idle time where /proc/stat has it; the load average, a minute's mean that
    counts this process's own last turns, only where it does not."""
    if os.environ.get(THREADS_ENV):
        return max(1, int(os.environ[THREADS_ENV]))
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    idle = idle_share()
    if idle is not None:
        busy = (1.0 - idle) * (os.cpu_count() or cores)
    else:
        busy = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    return max(1, min(cores, round(cores - busy)))


def idle_share(seconds: float = 0.1) -> float | None:
    """The share of all CPUs' time spent idle over the next ``seconds`` (from /proc/stat), or None."""
    def read() -> tuple[int, int]:
        with open("/proc/stat", encoding="ascii") as f:
            values = [int(v) for v in f.readline().split()[1:]]
        return values[3] + (values[4] if len(values) > 4 else 0), sum(values)

    try:
        idle0, total0 = read()
        time.sleep(seconds)
        idle1, total1 = read()
    except (OSError, ValueError, IndexError):
        return None
    return (idle1 - idle0) / (total1 - total0) if total1 > total0 else None


def open_model(ref: str) -> tuple[Any, Any, str]:
    """(model or backend, tokenizer, how it runs) for ``ref``: a built-in model's GGUF file through
    llama.cpp (tools.engine.llamacpp) when llama-cpp-python is installed, with the tokenizer of the same
    model as transformers builds it, saved once beside the prefix cache and read without transformers
    (tools.models.saved_tokenizer); a ``.gguf`` file through llama.cpp with llama.cpp's tokenizer of the file;
    otherwise transformers (dtype auto)."""
    name = ref.lower()
    kind = os.environ.get(BACKEND_ENV, "auto")
    file = Path(ref).expanduser()
    if kind != "transformers" and file.suffix.lower() == ".gguf" and file.is_file() and _llamacpp_installed():
        _quiet_llamacpp()  # a GGUF file the user points to: llama.cpp runs it, with its own tokenizer
        backend = llamacpp.load_gguf(file, n_ctx=N_CTX, n_threads=brain_threads())
        log.info("local brain: %s on llama.cpp, %d threads", file, backend.n_threads)
        return backend, backend.tokenizer, "llama.cpp"
    if kind != "transformers" and name in models.BUILTIN_MODELS:
        model = models.builtin(name)
        hf = models.converted_path(model)
        if models.gguf_path(model).is_file() and (hf / "tokenizer.json").is_file() and _llamacpp_installed():
            _quiet_llamacpp()
            saved = brain_folder(name) / f"tokenizer-{_version('transformers')}.json"
            with ThreadPoolExecutor(1) as pool:  # llama.cpp loads (in C) while the tokenizer is read
                loading = pool.submit(llamacpp.load_gguf, models.gguf_path(model), n_ctx=N_CTX, n_threads=brain_threads())
                tokenizer = models.saved_tokenizer(hf, saved)
                backend = loading.result()
            log.info("local brain: %s on llama.cpp, %d threads", ref, backend.n_threads)
            return backend, tokenizer, "llama.cpp"
    loaded = models.load(ref, dtype="auto")
    log.info("local brain: %s on transformers, %s (%s)", ref, loaded.dtype, loaded.dtype_reason)
    return loaded.model, loaded.tokenizer, f"transformers {loaded.dtype}"


def _quiet_llamacpp() -> None:
    """Keep llama.cpp's own log lines (printed by its C code) out of the conversation."""
    import llama_cpp

    global _QUIET
    if _QUIET is None:
        _QUIET = llama_cpp.llama_log_callback(lambda level, text, data: None)
        llama_cpp.llama_log_set(_QUIET, ctypes.c_void_p(0))


def _llamacpp_installed() -> bool:
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        return False
    return True


def prepare(ref: str | None = None) -> None:
    """Compute and save the cached prefix the default brain (with the shipped classifier) reads, so that the
    first ``ask`` or chat turn loads it instead of computing it (tens of seconds on a 2-core CPU); on llama.cpp
    also the token pieces the grammar reads."""
    lm = LocalBrain(ref, classifier=default_classifier()).engine()
    if isinstance(lm.backend, llamacpp.LlamaCppBackend):
        lm.backend.tokenizer.pieces(lm.saved_pieces)


def load_engine(ref: str, prefix: str | None = None) -> ConstrainedLM:
    """The model ``ref`` behind a ConstrainedLM with ``prefix`` (default: the brain's own
    prompt) in its cache (loaded once per process and prefix)."""
    prefix = prefix or local_prompt.prefix_text(registry.load_tools())
    key = f"{ref}\0{hashlib.sha256(prefix.encode()).hexdigest()[:12]}"
    if key not in _ENGINES:
        model, tokenizer, how = open_model(ref)
        lm = ConstrainedLM(model, tokenizer, stop_ids(tokenizer))
        path = prefix_cache_path(ref, how, prefix)
        lm.saved_pieces = path.with_name(f"pieces-{path.stem.split('-')[-2]}.npz")  # the model's state, any prompt
        if not (path.exists() and lm.load_prefix(path, prefix)):
            lm.set_prefix(prefix)
            try:
                lm.save_prefix(path)
                for stale in stale_prefixes(path):
                    stale.unlink(missing_ok=True)
            except OSError as exc:
                log.warning("could not save the prefix cache to %s: %s", path, exc)
        _ENGINES[key] = lm
    return _ENGINES[key]


@dataclass
class Decision:
    """What the model decided for one turn: a text answer, or a tool call (name and arguments)."""

    text: str = ""
    name: str | None = None
    arguments: dict = field(default_factory=dict)
    error: str | None = None  # the validation error of the last attempt, when no attempt validated
    declined: str | None = None  # why a text answer serves nothing (Reply.not_done)
    ask: str | None = None  # the required argument to ask for, the call not made (an answer in words that asks)
    deploy: bool = False  # the answer in words is of the deploy kind: the loop asks for approval to plan it


class LocalBrain:
    """A local instruct model choosing specpilot's tools; keeps the conversation across turns."""

    name = "local"

    def __init__(self, model: str | None = None, max_tokens: int = MAX_CALL_TOKENS, examples: int = 0,
                 classifier: ToolClassifier | None = None):
        self.model = model or local_model_ref()
        self.classifier = classifier  # picks the tool (agent.brains.classifier); the model then writes its arguments
        self.examples = examples  # retrieved worked examples shown before each turn (agent.brains.examples)
        self.max_tokens = max_tokens  # a call that does not close within these tokens is no call
        self.history: list[str] = []  # past exchanges, as chat markup
        self.user_texts: list[str] = []  # what the user wrote (arguments are grounded in it)
        self.pending: tuple[Decision, str] | None = None  # a call waiting for the argument we asked for
        self.last_turn: dict = {}  # seconds, forward passes and tokens of the last turn
        self._prefix: str | None = None  # the cached prompt of the classifier mode (engine)

    def engine(self) -> ConstrainedLM:
        if self.classifier is None:
            return load_engine(self.model)
        # the model writes arguments for the tool the classifier picked: its prefix shows typical labelled
        # requests of every tool (chosen from the pool by agent.brains.examples, cached with the prefix); the
        # text is the same every turn, so it is built once
        if self._prefix is None:
            self._prefix = chat_prefix()
        return load_engine(self.model, self._prefix)

    def respond(self, session: Any, text: str) -> Reply:
        start = time.perf_counter()
        lm = self.engine()
        passes, fed = lm.passes, lm.fed
        decision = self._answered(text) or self.decide(text)
        reply = self._act(session, text, decision)
        self.last_turn = {"seconds": time.perf_counter() - start, "passes": lm.passes - passes,
                          "tokens": lm.fed - fed, "tool": decision.name, "arguments": decision.arguments}
        return reply

    def drop_question(self) -> None:
        """Forget the question waiting for its answer, and its turn in the history (another question replaced it)."""
        if self.pending is not None:
            self.pending = None
            if self.history:
                self.history.pop()  # the exchange that asked it is the newest: nothing reached this brain since

    # ---- deciding -------------------------------------------------------------------------------------

    def _answered(self, text: str) -> Decision | None:
        """The call we asked an argument for, completed with the quoted text of this answer (None when
        nothing was asked, or the answer quotes nothing: then the model reads it)."""
        pending, self.pending = self.pending, None
        quoted = QUOTED.search(text)
        if pending is None or quoted is None:
            return None
        decision, key = pending
        value: Any = next(g for g in quoted.groups() if g)
        tool = registry.load_tools().get(decision.name)
        prop = tool.input_schema().get("properties", {}).get(key, {}) if tool else {}
        if getattr(tool_grammar.arg_of(key, prop), "kind", None) == "string_list":
            value = [value]  # packages, files, run ids: one quoted answer is one item
        completed = Decision(name=decision.name, arguments={**decision.arguments, key: value})
        if tool is not None:
            try:
                registry.parse_input(tool, completed.arguments)
            except ParameterError as exc:
                completed.error = exc.user_message()
        return completed

    def decide(self, text: str) -> Decision:
        """One constrained decode; a call whose arguments do not validate is decoded once more with the
        validation error shown to the model. With a classifier, its pick is the call's name when it is sure;
        otherwise the model chooses among the classifier's likely candidates."""
        tools = registry.load_tools()
        self.read(text)
        names = self.candidates(text, tools)
        shown = ""
        if self.examples:
            only = None if len(names) != 1 else "" if names[0] == local_prompt.REPLY else names[0]
            shown = local_prompt.examples_text(reversed(default_index().nearest(text, self.examples, tool=only)))
        context = shown + self._context() + local_prompt.user_turn(text)
        said = " ".join(spelled_out(t) for t in [*self.user_texts, text])  # numbers in words count as written
        decision = self._decode(context, tools, said, names, text)
        if decision.name is None or decision.error is None or REFUSAL in decision.error:  # content policy: no retry
            return decision
        retry = (context + local_prompt.call_text(decision.name, decision.arguments) + local_prompt.IM_END + "\n"
                 + local_prompt.user_turn(f"<tool_response>\nerror: {decision.error}\n</tool_response>"))
        return self._decode(retry, tools, said, [decision.name], text)

    def read(self, text: str) -> None:
        """Give the classifier the model's reading of ``text`` (its hidden states over the turn, in the pass that
        feeds the turn) where its heads of the model's reading were fitted under this model and prompt; else
        its TF-IDF heads answer."""
        reading = getattr(self.classifier, "reading", None)
        if reading is None:
            return
        lm = self.engine()
        if reading.state != reading_state(self.model, self._prefix):
            self.classifier.read(text, None)
            return
        tokens = read_tokens(lm, text, every=True)
        self.classifier.read(text, None if tokens is None else tokens[0].mean(0),
                             None if tokens is None else tokens[1:])

    def candidates(self, text: str, tools: dict) -> list[str]:
        """The names the call may take: every tool and reply without a classifier; the classifier's pick when
        its probability is at least SURE; else the classes at least PLAUSIBLE (most probable first, at most
        MAX_CANDIDATES), for the model to choose among in the conversation's context."""
        every = [*tools, local_prompt.REPLY]
        if self.classifier is None:
            return every
        ranked = sorted(self.classifier.probabilities(text).items(), key=lambda kv: -kv[1])
        ranked = [(local_prompt.REPLY if label == NO_TOOL else label, p) for label, p in ranked]
        ranked = [(name, p) for name, p in ranked if name in every]
        if ranked[0][1] >= SURE:
            return [ranked[0][0]]
        return [name for name, p in ranked[:MAX_CANDIDATES] if p >= PLAUSIBLE] or [ranked[0][0]]

    def pick(self, lm: ConstrainedLM, text: str, names: list[str]) -> str:
        """The candidate most probable to the classifier and the model together (the product of the classifier's
        probability and the model's probability of writing the name after the conversation)."""
        probs = self.classifier.probabilities(text)
        return likeliest(lm, names, [probs.get(NO_TOOL if n == local_prompt.REPLY else n, 0.0) for n in names],
                         [f'{local_prompt.CALL_OPEN}{n}"' for n in names])

    def weigh(self, lm: ConstrainedLM, text: str, tool: Any, narrowed: dict[str, tuple[str, ...]]) -> dict[str, str]:
        """The value of each choice among ``narrowed`` whose head reads it as set but is unsure of the value,
        chosen as :meth:`pick` chooses the tool: the value most probable to the head and the model together (the
        model's probability of writing it as the call's first argument, after the conversation)."""
        out = {}
        for arg in tool_grammar.tool_args(tool) if self.classifier is not None else ():
            values = narrowed.get(arg.name, ())
            if arg.kind != "enum" or len(values) < 2:
                continue
            probs = self.classifier.argument(arg.name, text, tool.name)
            if max(probs, key=probs.get) == ABSENT:
                continue  # the model reads whether the user set it at all
            out[arg.name] = likeliest(lm, values, [probs.get(v, 0.0) for v in values],
                                      [f'{local_prompt.CALL_OPEN}{tool.name}{local_prompt.ARGS_OPEN}'
                                       f'{{"{arg.name}": "{v}"' for v in values])
        return out

    @staticmethod
    def spans(lm: ConstrainedLM, tool: Any, given: dict) -> dict[str, list[int]]:
        """A list of two whole numbers the heads placed ("k": [1, 4]) that may be the ends of a range the user swept
        ("k from 1 to 4"): the model chooses between the two numbers and the whole range, as the tool's name is
        chosen (its log-probability of writing each as the call's first argument, after the conversation)."""
        out = {}
        for arg in tool_grammar.tool_args(tool):
            ends = given.get(arg.name)
            if arg.kind != "number_list" or not isinstance(ends, list) or len(ends) != 2 \
                    or not all(isinstance(v, int) and not isinstance(v, bool) for v in ends):
                continue
            low, high = sorted(ends)
            if 2 <= high - low < MAX_SPAN:
                options = [ends, list(range(low, high + 1))]
                out[arg.name] = likeliest(lm, options, [1.0, 1.0], [
                    f'{local_prompt.CALL_OPEN}{tool.name}{local_prompt.ARGS_OPEN}{{"{arg.name}": {json.dumps(o)}'
                    for o in options])
        return out

    def choices(self, text: str, tool: Any) -> tuple[dict, frozenset[str], dict[str, tuple[str, ...]]]:
        """``tool``'s arguments as the classifier's heads read ``text``: (the values they give, the arguments
        they leave out, the choice arguments whose values the model chooses among a few); the model writes the
        rest. A choice argument (an enum, a boolean) takes its head's pick, or is left out, where the head is
        SURE, as the tool's pick is taken; else the model chooses among its values of at least PLAUSIBLE
        probability (at most MAX_CANDIDATES), or leaves an optional one out. An argument without a head is
        the model's to choose. An optional choice its head would leave out is offered with the head's likeliest
        value where the head gives that at least OFFERED: the model reads whether the user asked for it ("bf16"
        for bfloat16; a head reads one word among many). A schema value (its default too) that the user wrote
        out, before any prompt (quoted, or after a colon), is evidence the head cannot outweigh: an optional
        choice whose head would leave it out is offered with the values written (the model sets one or leaves it
        out), a choice the head reads as set but is unsure of takes the one value written, and a list of choices
        with a written value is narrowed to all its values, which makes the model write it
        (tool_grammar.arguments_schema)."""
        given, withheld, narrowed = {}, set(), {}
        said = written_words(text)
        settings = written_words(text.split(":", 1)[0])  # without a prompt given after a colon, or quoted
        named = named_fields(tool, text)
        for arg in tool_grammar.tool_args(tool) if self.classifier is not None else ():
            written = [v for v in arg.values if arg.kind in ("enum", "enum_list") and _bare(v) in settings]
            if arg.kind == "enum_list" and written and not arg.required:
                narrowed[arg.name] = arg.values
            if arg.kind not in ("enum", "bool"):
                continue
            probs = self.classifier.argument(arg.name, text, tool.name)
            allowed = {v: p for v, p in probs.items() if v in arg.values or (v == ABSENT and not arg.required)}
            if not allowed:
                continue
            total = sum(allowed.values())
            ranked = sorted(allowed, key=allowed.get, reverse=True)
            if allowed[ranked[0]] < SURE * total:
                plausible = [v for v in ranked if v != ABSENT and allowed[v] >= PLAUSIBLE * total][:MAX_CANDIDATES]
                # the one plausible value the user wrote out (outside quotes) is theirs; where the head reads the
                # argument as set, so is one written in the settings whatever its rank ("in float16")
                theirs = [v for v in dict.fromkeys(plausible + (written if ranked[0] != ABSENT else []))
                          if arg.kind == "enum" and _bare(v) in said]
                if len(theirs) == 1:
                    given[arg.name] = theirs[0]
                    continue
                plausible += [v for v in written if v not in plausible]  # a value the user wrote is a candidate
                if plausible:
                    narrowed[arg.name] = tuple(plausible)
                    continue
            if ranked[0] == ABSENT and written:  # the model may set what the user wrote, or leave it out
                narrowed[arg.name] = tuple(written)
            elif ranked[0] == ABSENT and len(ranked) > 1 and allowed[ranked[1]] >= OFFERED * total:
                narrowed[arg.name] = (ranked[1],)  # the model reads whether the user asked for it
            elif ranked[0] == ABSENT or allowed[ranked[0]] < SURE * total:
                withheld.add(arg.name)
            else:
                given[arg.name] = ranked[0] == "true" if arg.kind == "bool" else ranked[0]
        for name in named & withheld:  # a switch the user named is the model's to write (required: true or false)
            withheld.discard(name)
        for name in named & set(narrowed):
            narrowed[name] = ("true", "false")
        head = self._value_head("number", text)
        if head is not None:  # a written number goes where its head says; the model writes only those it is unsure of
            numbers, unsure = self.numbers(head, text, tool, given.get("method"))
            given |= {k: v for k, v in numbers.items() if k != "params"}
            if numbers.get("params"):
                given["params"] = numbers["params"]
            if not unsure:
                withheld |= {a.name for a in [*tool_grammar.tool_args(tool),
                                              *tool_grammar.param_args(given.get("method"))]
                              if a.kind in ("number", "number_list")}
        head = self._value_head("reference", text)
        if head is not None:  # so does a written model, file, folder, URL or run
            references, unsure = self.references(head, text, tool)
            given |= references
            if not unsure:
                withheld |= {a.name for a in tool_grammar.tool_args(tool)
                             if a.name in head.labels and a.name not in given and not a.required}
        return given, frozenset(withheld), narrowed

    def _value_head(self, kind: str, text: str) -> Any:
        """The classifier's head of written values of ``kind`` (number, reference) for ``text``: the head of the
        model's reading where the model read ``text`` (ToolClassifier.value_head)."""
        value_head = getattr(self.classifier, "value_head", None)
        return value_head(kind, text) if value_head else getattr(self.classifier, f"{kind}_head", None)

    @staticmethod
    def references(head: Any, text: str, tool: Any) -> tuple[dict, bool]:
        """The text arguments the written models, files, folders, URLs and runs of ``text`` set, as the
        reference head reads them, and whether it was unsure of any: a word goes to the argument it is more
        likely than not to set, the surest first, and one whose likeliest argument is taken by a surer word to
        the likeliest of those still free (:func:`assign`: "target X, drafter Y"); a list argument collects
        every such word. A word that is one of the schema's examples of exactly one of the tool's fields
        ("self-q4" for ``draft``) sets that field: the schema's evidence, which no head outweighs."""
        args = {a.name: a for a in tool_grammar.tool_args(tool)
                if a.kind in ("string", "string_list") and a.name != "prompt"}  # a prompt is a span: the model's
        properties = tool.input_schema().get("properties", {})
        # a field the model never writes (an approval id) is set only from the user's own words, here
        args |= {name: tool_grammar.Arg(name, "string", ()) for name in tool_grammar.HIDDEN if name in properties}
        out: dict = {}
        lists = {name for name, arg in args.items() if arg.kind == "string_list"}
        fields = head.fields(text, tool.name)
        for i, (raw, _) in enumerate(fields):
            fits = [name for name in args if _schema_word(raw, properties.get(name, {}))]
            if len(fits) == 1:
                fields[i] = (raw, {fits[0]: 1.0})
        keyed = {name: value for name, value in keyed_texts(text) if name in args}  # the command syntax: theirs
        fields = [(raw, {NO_FIELD: 1.0}) if raw.split("=", 1)[-1] in keyed.values() else (raw, probs)
                  for raw, probs in fields]
        placed, unsure = assign(fields, taken=set(keyed), lists=lists)
        for name, raw in [(name, fields[i][0]) for name, _, i in placed] + list(keyed.items()):
            if name not in args:
                continue
            if args[name].kind == "string_list":
                out.setdefault(name, [])
                if raw not in out[name]:
                    out[name].append(raw)
            else:
                out.setdefault(name, raw)
        return out, unsure

    @staticmethod
    def numbers(head: Any, text: str, tool: Any, method: str | None) -> tuple[dict, bool]:
        """The arguments the numbers written in ``text`` set, as the number head reads them, and whether it was
        unsure of any: each number goes to the argument it is more likely than not to set (:func:`assign`), at
        the top level where ``tool`` takes it, else among ``method``'s own parameters
        in ``params`` (for a comparison, under the one method that has that parameter)."""
        top = {a.name for a in tool_grammar.tool_args(tool) if a.kind in ("number", "number_list")}
        kinds = {a.name: a.kind for a in tool_grammar.tool_args(tool)}
        lists = {name for name in top if kinds[name] == "number_list"}  # concurrency levels: every number placed
        own = {a.name for a in tool_grammar.param_args(method) if a.kind == "number"} \
            if kinds.get("params") == "params" else set()
        owners: dict[str, list[str]] = {}  # per-method params (compare_methods): the methods taking each number
        for m in tool_grammar.PARAM_MODELS if kinds.get("params") == "method_params" else ():
            for arg in tool_grammar.param_args(m, settings=False):
                if arg.kind == "number":
                    owners.setdefault(arg.name, []).append(m)
        fields = head.fields(text, tool.name, frozenset(lists))
        keyed = keyed_numbers(text, top | own | set(owners))
        placed, unsure = assign([(raw, {NO_FIELD: 1.0}) if i in keyed.values() else (raw, probs)
                                 for i, (raw, probs) in enumerate(fields)], taken=set(keyed), lists=lists)
        placed += [(name, 1.0, i) for name, i in keyed.items() if i < len(fields)]
        # a number among the settings that the head reads as setting nothing, but gives an argument at least
        # OFFERED, may be a setting in words it has not learned ("32 tokns", "8 cores"): the model places it
        placed_at = {i for _, _, i in placed}
        unsure = unsure or any(max([p for k, p in fields[i][1].items() if k != NO_FIELD], default=0.0) >= OFFERED
                               for i in setting_numbers(text) - placed_at)
        out: dict = {}
        for name, _, i in placed:
            raw = fields[i][0]
            value = float(raw) if "." in raw else int(raw)
            if name in lists:
                values = out.setdefault(name, [])
                if value not in values:  # a level swept once
                    values.append(value)
            elif name in top:
                out[name] = value
            elif name in own:
                out.setdefault("params", {})[name] = value
            elif len(owners.get(name, ())) == 1:  # a parameter only one method has is that method's
                out.setdefault("params", {}).setdefault(owners[name][0], {})[name] = value
            elif name not in owners:  # read as another method's parameter ("guess 6" for draft): the model's to place
                unsure = True
        return out, unsure

    def _decode(self, context: str, tools: dict, said: str, names: list[str], text: str = "") -> Decision:
        """One call decoded after ``context`` under the schema of a call of one of ``names``, each tool's
        choice arguments read from ``text`` by the classifier's argument heads (tool_grammar.call_schema)."""
        lm = self.engine()
        lm.begin(context)
        if len(names) > 1 and self.classifier is not None:
            names = [self.pick(lm, text, names)]
        if names == [local_prompt.REPLY]:  # an answer in words: its kind from the labelled requests
            return self._in_words(text)
        schemas, per_method, unsure = {}, {}, {}
        for name in names:
            if name == local_prompt.REPLY:
                schemas[name] = {"type": "object", "required": ["text"], "additionalProperties": False,
                                 "properties": {"text": {"type": "string", "maxLength": MAX_TEXT_CHARS}}}
                continue
            given, withheld, narrowed = self.choices(text, tools[name])
            for arg, value in self.weigh(lm, text, tools[name], narrowed).items():
                given[arg] = value
                del narrowed[arg]
            given |= self.spans(lm, tools[name], given)
            answered = set(narrowed) & {a.name for a in tool_grammar.tool_args(tools[name])
                                        if a.kind == "bool" and not a.required}  # optional switches heads are unsure of
            if answered:  # their schema (copied per call) only when there are some
                properties = tools[name].input_schema().get("properties", {})
                unsure |= {k: properties[k] for k in answered if k in properties}
            if _params_kind(tools[name]) == "method_params":  # added after the model wrote the call (below)
                per_method[name] = given.pop("params", None)
            asked = named_switches(given.get("method"), text) if _params_kind(tools[name]) == "params" else set()
            asked |= named_fields(tools[name], text) if self.classifier is not None else set()
            asked |= answered  # the model answers each, true or false
            schemas[name] = tool_grammar.arguments_schema(tools[name], said, given, withheld, narrowed,
                                                          frozenset(asked))
        if unsure:  # what each optional switch the heads are unsure of does, from its schema: the model reads whether
            lm.begin(local_prompt.with_note(context, local_prompt.arguments_note(  # the user asked for it
                {k: prop.get("description", "") for k, prop in unsure.items()})))
        call = lm.decode_json(tool_grammar.call_schema(schemas), self.max_tokens)
        if call is None:
            return Decision(error=f"no call closed within {self.max_tokens} tokens")
        if call["name"] == local_prompt.REPLY:
            return self._in_words(text)
        tool, arguments = tools[call["name"]], call["arguments"]
        for key in [k for k in unsure if k in arguments and arguments[k] == unsure[k].get("default")]:
            del arguments[key]  # an unsure switch answered with its default: the call as the user wrote it
        for key, value in arguments.items():  # a list's items once each (the schema cannot say so to the grammar)
            if isinstance(value, list):
                arguments[key] = list(dict.fromkeys(value))
        if _params_kind(tool) == "method_params" and isinstance(arguments.get("params"), dict):
            compared = set(arguments.get("methods") or ())  # the model writes only the compared methods' parameters
            arguments["params"] = {m: own for m, own in arguments["params"].items() if m in compared and own}
        if per_method.get(tool.name):  # the heads' numbers join what the model wrote
            merged = arguments.setdefault("params", {})
            for method, own in per_method[tool.name].items():
                merged[method] = {**merged.get(method, {}), **own}
        if arguments.get("params") == {}:
            del arguments["params"]
        ground_params(arguments, said)
        params = arguments.get("params")
        if isinstance(params, dict) and arguments.get("method") in tool_grammar.PARAM_MODELS:
            # written before the method was chosen, some may be another method's: only the chosen one's stay
            takes = {*tool_grammar.PARAM_MODELS[arguments["method"]].model_fields,
                     *(a.name for a in tool_grammar.param_args(arguments["method"]))}
            arguments["params"] = {k: v for k, v in params.items() if k in takes}
            if not arguments["params"]:
                del arguments["params"]
        try:
            registry.parse_input(tool, arguments)
            if isinstance(arguments.get("params"), dict) and arguments.get("method") in tool_grammar.PARAM_MODELS:
                validate_saved_params(arguments["method"], arguments["params"])  # auto: its pick keeps its own
        except ParameterError as exc:
            return Decision(name=tool.name, arguments=arguments, error=exc.user_message())
        return Decision(name=tool.name, arguments=arguments)

    def _in_words(self, text: str) -> Decision:
        """An answer in words, of the kind the labelled requests nearest ``text`` answered in words have
        (answer_kind; harmful where the tools' content policy says so, and only there): a question for what the
        likeliest tool needs and the request does not give (asked as a missing argument is), or the product's
        statement of that kind."""
        kind = answer_kind(text)
        try:  # the tools' content policy holds whether a request is harmful, not the requests alike to it
            check_content("reply", "request", text)
            kind = "outside" if kind == "harmful" else kind
        except ParameterError:
            kind = "harmful"
        said, why = local_prompt.ANSWERS[kind]
        if said is None:
            asked = self._missing(text)
            if asked is not None:
                return asked
            said, why = local_prompt.ANSWERS["unclear"]
        return Decision(text=said.format(machine=cpu_name(), home=home_dir()), declined=why, deploy=kind == "deploy")

    def _missing(self, text: str) -> Decision | None:
        """The call of the tool the labelled requests most like ``text`` call (tool_alike), with the values the
        classifier's heads read, and the first required argument the request does not give (``ask``); None
        without a classifier, or where nothing is missing."""
        tools = registry.load_tools()
        name = tool_alike(text, tools)
        if name is None or self.classifier is None:
            return None
        given, _, _ = self.choices(text, tools[name])
        missing = [k for k in tools[name].input_schema().get("required", ()) if k not in given]
        return Decision(name=name, arguments=given, ask=missing[0]) if missing else None

    def _context(self) -> str:
        """The newest exchanges that fit in HISTORY_CHARS, oldest first."""
        kept, size = [], 0
        for exchange in reversed(self.history):
            size += len(exchange)
            if size > HISTORY_CHARS:
                break
            kept.append(exchange)
        return "".join(reversed(kept))

    # ---- acting ---------------------------------------------------------------------------------------

    def _act(self, session: Any, text: str, decision: Decision) -> Reply:
        turn = local_prompt.user_turn(text)
        self.user_texts.append(text)
        if decision.name is None:
            answer = decision.text or "Could you say that in other words?"
            self.history.append(turn + local_prompt.reply_call(answer) + local_prompt.IM_END + "\n")
            return Reply(answer, not_done=decision.declined if decision.text else decision.error
                         or "the model wrote no answer", deploy=decision.deploy)
        missing = decision.ask or self._ground(session, text, decision, registry.load_tools())
        if decision.error is None and isinstance(decision.arguments.get("prompt"), str):
            try:  # grounding may complete a prompt the model copied in part: the content policy reads the whole
                check_content(decision.name, "prompt", decision.arguments["prompt"])
            except ParameterError as exc:
                decision.error = exc.user_message()
        if missing:
            question = ask_for(decision, missing)
            self.pending = (decision, missing)
            self.history.append(turn + local_prompt.reply_call(question) + local_prompt.IM_END + "\n")
            return Reply(question, awaiting=f"the {missing} for {decision.name}")
        if decision.error is not None and REFUSAL in decision.error:  # the tools' content policy
            answer = "I will not generate text for that prompt, not even to time it. Give me another prompt to measure."
            self.history.append(turn + local_prompt.reply_call(answer) + local_prompt.IM_END + "\n")
            return Reply(answer, not_done="declined: the prompt asks for harmful content")
        if decision.error is not None:
            answer = f"I could not form a valid {decision.name} call: {decision.error}"
            self.history.append(turn + local_prompt.reply_call(answer) + local_prompt.IM_END + "\n")
            return Reply(answer, unfinished=f"no valid {decision.name} call: {decision.error}")
        result = session.call_tool(decision.name, decision.arguments)
        answer = _answer(result)
        summary = next((line.strip() for line in answer.splitlines() if len(line.strip()) > 8), "")[:200]
        self.history.append(turn + local_prompt.call_text(decision.name, decision.arguments) + local_prompt.IM_END
                            + f"\n{local_prompt.IM_START}user\n<tool_response>\n{summary}\n</tool_response>"
                            + local_prompt.IM_END + "\n")
        return Reply(answer)

    def _whole(self, value: str) -> str:
        """The user's whole quoted prompt that ``value`` begins (the model may stop copying early, or run out of
        its call's tokens), or that holds it where the user quoted it (the model may skip its first line), else
        ``value``."""
        start = _squash(value)
        for text in reversed(self.user_texts):
            quoted = quoted_spans(text)
            for part in quoted_parts(text):
                if len(part) > len(value) and (_squash(part).startswith(start)
                                               or (part in quoted and start in _squash(part))):
                    return part
        return value

    def _verbatim(self, value: str) -> str:
        """The user's own text that ``value`` copies, as they wrote it: a model copying a prompt may join its
        lines with spaces, or end it with a full stop or question mark the user did not write; ``value`` where
        the user wrote nothing it copies."""
        words = value.rstrip(" .?!").split()
        if not words:
            return value
        pattern = re.compile(r"(?<!\w)" + r"\s+".join(map(re.escape, words)) + r"(?!\w)[.?!]*", re.IGNORECASE)
        for text in reversed(self.user_texts):
            found = pattern.search(text)
            if found:
                return found.group(0)
        return value

    def _words_holding(self, value: str) -> list[str]:
        """The user's words (without quotes, brackets and closing punctuation) that hold ``value``, newest first."""
        return [w for text in reversed(self.user_texts) for w in bare_words(text) if value and value in w]

    def _path_word(self, value: str) -> str:
        """A path, file or URL the model copied in part ("home/ana/notes.txt"), completed to the user's whole
        word that holds it ("/home/ana/notes.txt"); any other value as it is."""
        if not _path_like(value):
            return value
        return next(iter(self._words_holding(value)), value)

    def _reference(self, value: str, prop: dict) -> str | None:
        """A model field's value as a model reference: one of the field's schema examples (a built-in name,
        self-q4), else the whole word of the user's that holds it when that word is a path, a .gguf file or a
        hub id (``owner/name``); None for anything else (a bare word such as "prompt" names no model)."""
        if value.strip().lower() in models.BUILTIN_MODELS or _schema_word(value, prop):
            return value.strip().lower()
        for word in self._words_holding(value) or [value.rstrip(".:!?")]:
            if "/" in word or "\\" in word or word.lower().endswith(".gguf"):
                return word
        return None

    def _ground(self, session: Any, text: str, decision: Decision, tools: dict) -> str | None:
        """Checks of a decoded call against the user's words and the tool's schema: a run setting put inside
        ``params`` that the tool takes beside it moves there; an optional text value the user never wrote is
        dropped (an invented filter is no filter; a built-in model's name is kept), and so is an optional number
        they never wrote, and an optional prompt that is the whole request; the first required text that is not in
        their words is returned (it is asked for, not invented)."""
        schema = tools[decision.name].input_schema() if decision.name in tools else {}
        properties, required = schema.get("properties", {}), set(schema.get("required", ()))
        hoist_settings(decision.arguments, properties)
        if isinstance(decision.arguments.get("prompt"), str):
            prompt = self._whole(self._verbatim(decision.arguments["prompt"]))
            prompt = decision.arguments["prompt"] = trim_prompt(prompt, text, decision.arguments)
            if "prompt" not in required and _squash(prompt).rstrip(" .?!") == _squash(text).rstrip(" .?!"):
                del decision.arguments["prompt"]  # the request itself copied: it asked for the call, it is no prompt
        for key in [k for k in tool_grammar.MODEL_FIELDS if isinstance(decision.arguments.get(k), str)]:
            reference = self._reference(decision.arguments[key], properties.get(key, {}))
            if reference is None and key not in required:
                del decision.arguments[key]
            elif reference is not None:
                decision.arguments[key] = reference
        said = _squash(" ".join([*self.user_texts, str(getattr(session, "last_prompt", None) or "")]))
        numbers = {float(n) for t in self.user_texts for n in NUMBER.findall(spelled_out(t))}
        kinds = {k: getattr(tool_grammar.arg_of(k, prop), "kind", None) for k, prop in properties.items()}
        free = {k for k, kind in kinds.items() if kind == "string"}
        for key in [k for k, kind in kinds.items() if kind == "string" and k != "prompt"]:
            if isinstance(decision.arguments.get(key), str):
                decision.arguments[key] = self._path_word(decision.arguments[key])
        for key in [k for k, kind in kinds.items() if kind == "string_list"]:  # run ids, files: only the user's
            value = decision.arguments.get(key)
            if isinstance(value, list):
                value = [self._path_word(v) if isinstance(v, str) else v for v in value]
                kept = [v for v in value if isinstance(v, str) and _squash(v) in said]
                if kept:
                    decision.arguments[key] = kept
                elif key in required:
                    return key
                else:
                    del decision.arguments[key]
        for key, value in list(decision.arguments.items()):
            if key in free and isinstance(value, str) and _squash(value) not in said \
                    and value.lower() not in models.BUILTIN_MODELS and not _schema_word(value, properties[key]):
                if key in required:
                    return key
                del decision.arguments[key]
            elif isinstance(value, (int, float)) and not isinstance(value, bool) and float(value) not in numbers \
                    and key not in required:
                del decision.arguments[key]
            elif kinds.get(key) == "number_list" and isinstance(value, list):  # only the levels the user wrote
                kept = [v for v in value if isinstance(v, (int, float)) and float(v) in numbers]
                if len(value) > 2 and all(type(v) is int for v in value) \
                        and value == list(range(value[0], value[0] + len(value))) \
                        and {float(value[0]), float(value[-1])} <= numbers:
                    kept = value  # a range between two numbers the user wrote ("K from 1 through 4")
                if kept:
                    decision.arguments[key] = kept
                elif key not in required:
                    del decision.arguments[key]
        return None


def answer_kind(text: str, nearest: int = KIND_NEIGHBOURS) -> str:
    """The kind of answer in words (local_prompt.ANSWERS) that the ``nearest`` labelled requests answered in words
    most like ``text`` were given; "unclear" where none is alike."""
    alike = default_index().scored(text, nearest, tool="")
    return _voted([(e.kind, s) for e, s in alike if e.kind in local_prompt.ANSWERS]) or "unclear"


def tool_alike(text: str, tools: dict, nearest: int = KIND_NEIGHBOURS) -> str | None:
    """The tool that the ``nearest`` labelled requests with a tool most like ``text`` call (what a request answered
    in words asks for would be done with); None where none is alike."""
    alike = [(e.tool, s) for e, s in default_index().scored(text, 8 * nearest) if e.tool in tools]
    return _voted(alike[:nearest])


def _voted(votes: list[tuple[str, float]]) -> str | None:
    """The label with the most similarity summed over ``votes`` (label, similarity), the nearer on a tie."""
    totals: dict[str, float] = {}
    for label, similarity in votes:
        totals[label] = totals.get(label, 0.0) + similarity
    return max(totals, key=totals.__getitem__) if totals else None


def likeliest(lm: ConstrainedLM, options, probs: list[float], continuations: list[str]):
    """The option most probable to a head and the model together: the highest sum of the head's log-probability
    (``probs``) and the model's log-probability of writing the option's continuation after the conversation."""
    scores = [math.log(max(p, 1e-9)) + m for p, m in zip(probs, lm.score(continuations))]
    return options[scores.index(max(scores))]


def read_tokens(lm: ConstrainedLM, text: str, every: bool = False) -> tuple[np.ndarray, ...] | None:
    """The model's reading of ``text`` as a user turn after the cached prompt: its hidden state at each token of
    the request (tokens x hidden size) and the characters of ``text`` each spans (tokens x 2); ``every``: the
    states of the whole turn first (their mean is the turn's reading). None where the model gives no hidden
    states (agent.brains.constrained.ConstrainedLM.read)."""
    text = text[:CLASSIFIER_MAX_CHARS]
    turn = local_prompt.user_turn(text)
    hidden = lm.read(turn)
    if hidden is None:
        return None
    start = local_prompt.user_turn("").index(local_prompt.IM_END)  # where the request begins in its turn
    offsets = np.asarray(lm.offsets(turn), dtype=np.int64).reshape(-1, 2) - start
    inside = (offsets[:, 0] >= 0) & (offsets[:, 1] <= len(text)) & (offsets[:, 1] > offsets[:, 0])
    return (hidden, hidden[inside], offsets[inside]) if every else (hidden[inside], offsets[inside])


def chat_prefix() -> str:
    """The cached prompt the model writes calls after: the system text, the tools and typical labelled requests
    of every tool (chosen from the pool once, kept in the brain's folder)."""
    return local_prompt.prefix_text(registry.load_tools(), typical_examples(TYPICAL_PER_TOOL, brain_folder()))


def reading_state(model: str, prefix: str | None) -> str:
    """What the model's reading of a request depends on: the model and the prompt it reads the request after."""
    return hashlib.sha256(f"{Path(model).name}\n{prefix}".encode()).hexdigest()[:16]


def trim_prompt(prompt: str, text: str, arguments: dict) -> str:
    """``prompt`` cut at the line or sentence end before a number that is also one of the call's own values
    and is written nowhere else in ``text``: the span ran on into the settings ("...palindrome. Use 256 new
    tokens." with max_new_tokens 256). Where that number is in the prompt's first sentence, the span is the
    settings themselves, and the lines of ``text`` after it are the prompt ("Run EAGLE with depth 7 on this
    prompt\\nExplain threads."). A prompt the user quoted is theirs as it is."""
    if prompt in quoted_spans(text):
        return prompt
    values: set[float] = set()

    def walk(node: Any) -> None:
        for value in (node.values() if isinstance(node, dict) else ()):
            if isinstance(value, dict):
                walk(value)
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                values.add(float(value))

    walk({k: v for k, v in arguments.items() if k != "prompt"})
    written = [float(n) for n in NUMBER.findall(text)]
    for match in NUMBER.finditer(prompt):
        if float(match.group()) in values and written.count(float(match.group())) == 1:
            ends = [m.end() for m in SENTENCE_END.finditer(prompt[:match.start()])]
            if ends and prompt[:ends[-1]].strip():
                return prompt[:ends[-1]].rstrip()
            rest = text.split(prompt, 1)[1] if prompt in text else ""
            return rest.strip() if rest.startswith("\n") and rest.strip() else prompt
    return prompt


def keyed_numbers(text: str, names: set[str]) -> dict[str, int]:
    """The numbers written as ``key=value`` (or ``key: value``, ``key value``) after one of ``names`` spelled as
    the schema spells it, an identifier with an underscore ("max_new_tokens 64", "num_candidates=2"): argument
    -> the number's index among the numbers of ``text`` (classifier.NUMBER). The command parser's syntax,
    read inside free text; a plain word ("window", "k") is left to the number head."""
    text = spelled_out(text[:CLASSIFIER_MAX_CHARS])  # as the number head reads it
    starts = {m.start(): i for i, m in enumerate(CLASSIFIER_NUMBER.finditer(text))}
    out: dict[str, int] = {}
    for match in KEYED.finditer(text):
        name = match.group(1).casefold()
        if name in names and match.start(2) in starts and name not in out:
            out[name] = starts[match.start(2)]
    return out


def keyed_texts(text: str) -> list[tuple[str, str]]:
    """The values written as ``key=value`` (the command parser's syntax, read inside free text): (key, the value
    without its quotes and closing punctuation), in the order written."""
    return [(m.group(1).casefold(), m.group(2).strip(WORD_EDGES).rstrip(".:!?")) for m in KEYED_TEXT.finditer(text)]


def setting_numbers(text: str) -> set[int]:
    """The numbers of ``text`` (their indices among the number head's values) written among its settings: outside
    its quoted spans and before a prompt given after a colon."""
    quoted = [m.span() for m in QUOTED.finditer(text)]
    colon = text.find(":") if ":" in text else len(text)
    return {i for i, (*_, (start, _)) in enumerate(classifier_numbers(text))
            if start < colon and not any(a <= start < b for a, b in quoted)}


def assign(fields: list[tuple[str, dict[str, float]]], taken: set[str] = frozenset(),
           lists: set[str] = frozenset()) -> tuple[list[tuple[str, float, int]], bool]:
    """Each written value's argument, from its head's probabilities: (argument, probability, the value's index in
    ``fields``) in the order written, and whether a value was left unplaced. The surest placement is made first;
    an argument takes one value (one of ``lists`` takes any number), so a value whose likeliest argument is taken is
    placed by its probabilities over the arguments still free (renormalised: "ngram 3 and guess 3" gives
    each 3 its own). A value is placed where that probability is at least MORE_LIKELY (NO_FIELD: it sets
    nothing); the others are unplaced. ``taken``: arguments set otherwise."""
    placed: list[tuple[str, float, int]] = []
    left = list(range(len(fields)))
    taken = set(taken)
    while left:
        best = None
        for i in left:
            probs = {k: p for k, p in fields[i][1].items() if k == NO_FIELD or k in lists or k not in taken}
            total = sum(probs.values()) or 1.0
            name = max(probs, key=probs.get)
            if best is None or probs[name] / total > best[0]:
                best = (probs[name] / total, i, name)
        p, i, name = best
        if p < MORE_LIKELY:
            return sorted(placed, key=lambda t: t[2]), True
        left.remove(i)
        if name != NO_FIELD:
            placed.append((name, p, i))
            taken.add(name)
    return sorted(placed, key=lambda t: t[2]), False


def ground_params(arguments: dict, said: str) -> None:
    """Inside ``params`` (one method's, or one per method for a comparison) the model keeps a text value only
    where it is one of the user's words, a path copied in part completed to theirs (a head folder, a tree
    file: :func:`user_word`), and a choice or switch only where the user
    wrote its value or named its parameter (the first five letters of each part of its name of three letters or
    more are in their words: "adapt" for adaptive_k), and a number only where the user wrote it (``said`` has
    numbers in words as digits: "k four"); anything else is the model's invention (a head folder, a
    quantisation, a switch the user never asked for, a depth of 1)."""
    params = arguments.get("params")
    if not isinstance(params, dict):
        return
    text = _squash(said)
    written = {float(n) for n in NUMBER.findall(spelled_out(said))}
    per_method = "method" not in arguments and all(isinstance(v, dict) for v in params.values())
    for method, own in list(params.items() if per_method else [(arguments.get("method"), params)]):
        kinds = {a.name: a.kind for a in tool_grammar.param_args(method)}
        for key, value in list(own.items()):
            if isinstance(value, bool) or kinds.get(key) in ("enum", "bool"):
                keep = names(key, text) or (isinstance(value, str) and _squash(value) in text)
            elif isinstance(value, str):
                word = user_word(value, said)
                keep = word is not None or value.lower() in models.BUILTIN_MODELS
                own[key] = word or value
            else:
                keep = float(value) in written if isinstance(value, (int, float)) else True
            if not keep:
                del own[key]
        if per_method and not own:
            del params[method]
    if not params:
        del arguments["params"]


def user_word(value: str, said: str) -> str | None:
    """The user's word that ``value`` is, or that a path, file or URL the model copied in part (it holds a
    separator or a point) completes to; a value of several words where ``said`` holds it; else None: a value
    inside a word ("llm" of "medusa-llm") is none the user gave."""
    if any(ch.isspace() for ch in value.strip()):
        return value if _squash(value) in _squash(said) else None
    for word in bare_words(said):
        if word.casefold() == value.casefold() or (value in word and _path_like(value)):
            return word
    return None


def bare_words(text: str) -> list[str]:
    """The words of ``text`` without the quotes, brackets and closing punctuation around them, and a ``key=``
    before a value."""
    return [(keyed.group(2) if (keyed := KEYED_TEXT.fullmatch(word)) else word).strip(WORD_EDGES).rstrip(".:!?")
            for word in text.split()]


def _path_like(value: str) -> bool:
    """Whether ``value`` may be a path, file or URL copied in part: one word with a separator or a point."""
    return bool(value) and not any(ch.isspace() for ch in value) and any(ch in value for ch in "/\\.")


def names(key: str, text: str) -> bool:
    """Whether ``text`` (squashed) names the parameter ``key``: the first five letters of each part of its name
    of three letters or more are in it ("adapt" for adaptive_k)."""
    return all(part[:5] in text for part in key.lower().split("_") if len(part) >= 3)


def named_switches(method: str | None, text: str) -> set[str]:
    """The switches (booleans) among ``method``'s own parameters that ``text`` names outside its quoted
    spans and a prompt after a colon: the model is made to write them ("adaptive K off" sets adaptive_k,
    true or false as the model reads it), which the fixed key order would otherwise let it pass by."""
    if method not in tool_grammar.PARAM_MODELS:
        return set()
    settings = _settings(text)
    return {a.name for a in tool_grammar.param_args(method, settings=False)
            if a.kind == "bool" and max(map(len, a.name.split("_"))) >= 3 and names(a.name, settings)}


def _settings(text: str) -> str:
    """A message's words outside its quoted spans and a prompt after a colon, squashed: where settings are named."""
    return _squash(QUOTED.sub(" ", text).split(":", 1)[0])


def named_fields(tool: Any, text: str) -> set[str]:
    """The optional switches (booleans) of ``tool`` itself that ``text`` names outside its quoted spans and a
    prompt after a colon ("w/ peers", "no chat template", "don't measure"): the model writes them, true or
    false as it reads the request, where a head would leave them out."""
    settings = _settings(text)
    return {a.name for a in tool_grammar.tool_args(tool) if a.kind == "bool" and not a.required
            and names(a.name, settings)}


def _bare(word: str) -> str:
    """A word without its points, dashes and underscores, lower-cased ("llama.cpp" -> "llamacpp")."""
    return word.lower().replace(".", "").replace("-", "").replace("_", "")


def written_words(text: str) -> set[str]:
    """The words of a message outside its quoted spans (a prompt's words are not settings), bare (:func:`_bare`)."""
    return {_bare(w) for w in TOKEN.findall(QUOTED.sub(" ", text).casefold())}


def _schema_word(value: str, prop: dict) -> bool:
    """Whether ``value`` is one of the values the field's own schema lists as examples (guidance's ``task``:
    the Spec-Bench categories): the schema's vocabulary, not a value invented from nothing."""
    return _squash(value) in {_squash(str(v)) for v in prop.get("examples") or ()}


def _params_kind(tool: Any) -> str | None:
    """The kind of ``tool``'s ``params`` argument (one method's, or one per method), if it has one."""
    return next((a.kind for a in tool_grammar.tool_args(tool) if a.name == "params"), None)


def hoist_settings(arguments: dict, properties: dict) -> None:
    """Move the run settings a model wrote inside ``params`` (max_new_tokens, dtype, ...) beside it where the
    tool's schema has them at the top level; a method's own parameters stay in ``params``."""
    params = arguments.get("params")
    if not isinstance(params, dict) or getattr(tool_grammar.arg_of("params", properties.get("params", {})),
                                               "kind", None) != "params":
        return  # none, or one method's parameters per key (compare_methods): nothing of the run inside
    for key in [k for k in params if k in properties and k not in ("params", "method", "methods")]:
        arguments.setdefault(key, params.pop(key))
    if not params:
        del arguments["params"]


def quoted_spans(text: str) -> list[str]:
    """The quoted texts of a message: in quotes, or in a fenced code block (its lines, without the fences)."""
    return [next(g for g in m.groups() if g) for m in QUOTED.finditer(text)]


def quoted_parts(text: str) -> list[str]:
    """The quoted texts of a message, and what follows its first colon (how users give a prompt)."""
    return quoted_spans(text) + ([text.split(":", 1)[1].strip()] if ":" in text else [])


def ask_for(decision: Decision, key: str) -> str:
    """The question for a required argument the user did not give (agent.commands.question_for)."""
    prop = registry.load_tools()[decision.name].input_schema().get("properties", {}).get(key, {})
    return question_for(decision.name, decision.arguments, key, prop)


def _answer(result: Any) -> str:
    """The formatted tool result; a result without the usual fields (a call listed but not executed)
    as its JSON."""
    try:
        return format_result(result)
    except (KeyError, TypeError, AttributeError):
        return json.dumps(result.content, indent=2, ensure_ascii=False, default=str)


def _squash(text: str) -> str:
    return " ".join(text.casefold().split())
