"""The local brain: a local instruct model with tool calling, no network and no key.

Each turn, one constrained decode (agent.brains.constrained) over the conversation decides between
a short text answer and one tool call whose name is a registry tool and whose arguments follow the
tool's argument grammar (agent.brains.tool_grammar); the arguments are then validated with the
tool's pydantic model, and a call that does not validate is decoded once more with the error in
the conversation. A prompt or destination the user never wrote is not invented: the brain asks for
it. The tool's result is answered with the same formatter as the rule planner (exact figures, their
source), so the model writes only what it must: a choice, arguments, or a short sentence.

Speed: the system prompt and tool list are a fixed prefix whose KV cache is computed once and saved
under the specpilot home (``cache/local-brain/``, keyed by a hash of the model and the prefix), so
later turns and later processes only run the new tokens. Model: ``SPECPILOT_LOCAL_MODEL`` or the
constructor's ``model``; default :data:`DEFAULT_LOCAL_MODEL` (chosen by benchmarks/conversation.py).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.brains import local_prompt, tool_grammar
from agent.brains.base import Reply
from agent.brains.constrained import ConstrainedLM
from agent.brains.format import format_result
from memory.helpers import home_dir
from tools import models
from tools.agent_tools import registry
from tools.agent_tools.saved_params import validate_saved_params
from tools.errors import ParameterError

log = logging.getLogger(__name__)

MODEL_ENV = "SPECPILOT_LOCAL_MODEL"
DEFAULT_LOCAL_MODEL = "qwen2.5-coder-1.5b-instruct"
CACHE_FORMAT = 1  # bump when the saved prefix layout changes
MAX_TEXT_TOKENS = 40  # a text answer is a sentence or two
HISTORY_CHARS = 3000  # conversation kept in the context (older turns are dropped)
GROUNDED = ("prompt", "destination", "prompt_contains", "run_id")  # string arguments that must come from the user

_ENGINES: dict[str, ConstrainedLM] = {}


def local_model_ref() -> str:
    return os.environ.get(MODEL_ENV) or DEFAULT_LOCAL_MODEL


def local_model_available(ref: str | None = None) -> bool:
    """Whether the local brain's model is on this machine (fetched built-in model or local folder)."""
    ref = ref or local_model_ref()
    if ref.lower() in models.BUILTIN_MODELS:
        return any(r.name == ref.lower() and (r.converted or r.gguf) for r in models.list_models())
    return Path(ref).expanduser().exists()


def prefix_cache_path(ref: str, model: Any, prefix: str) -> Path:
    """Where the prefix KV cache of ``model`` for ``prefix`` is saved: beside a built-in model (in the
    models folder), else in the specpilot home; named by a hash of everything that decides its values."""
    import transformers  # noqa: PLC0415  (third-party, loaded with the model already)

    where, gguf = models.resolve_ref(ref)
    weights = sorted(Path(where).glob("*.safetensors")) if isinstance(where, Path) else []
    stamp = [(p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in weights]
    key = json.dumps([CACHE_FORMAT, str(where), gguf, stamp, model.config.to_json_string(), str(model.dtype),
                      transformers.__version__, prefix], default=str)
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    if ref.lower() in models.BUILTIN_MODELS:
        return models.models_dir() / ref.lower() / "local-brain" / f"prefix-{digest}.pt"
    return home_dir() / "cache" / "local-brain" / f"{Path(ref).name[:40]}-{digest}.pt"


def stop_ids(tokenizer) -> list[int]:
    ids = {tokenizer.eos_token_id}
    ids |= {tokenizer.convert_tokens_to_ids(t) for t in (local_prompt.IM_END, "<|endoftext|>")
            if t in tokenizer.get_vocab()}
    return sorted(i for i in ids if isinstance(i, int))


def load_engine(ref: str) -> ConstrainedLM:
    """The model ``ref`` behind a ConstrainedLM with the prefix in its cache (loaded once per process)."""
    if ref not in _ENGINES:
        loaded = models.load(ref, dtype="auto")
        lm = ConstrainedLM(loaded.model, loaded.tokenizer, stop_ids(loaded.tokenizer))
        prefix = local_prompt.prefix_text(registry.load_tools())
        path = prefix_cache_path(ref, loaded.model, prefix)
        if not (path.exists() and lm.load_prefix(path, prefix)):
            lm.set_prefix(prefix)
            try:
                lm.save_prefix(path)
                for stale in path.parent.glob(path.name.rsplit("-", 1)[0] + "-*.pt"):
                    if stale != path:  # a prefix of an older prompt or model
                        stale.unlink(missing_ok=True)
            except OSError as exc:
                log.warning("could not save the prefix cache to %s: %s", path, exc)
        _ENGINES[ref] = lm
    return _ENGINES[ref]


@dataclass
class Decision:
    """What the model decided for one turn: a text answer, or a tool call (name and arguments)."""

    text: str = ""
    name: str | None = None
    arguments: dict = field(default_factory=dict)
    error: str | None = None  # the validation error of the last attempt, when no attempt validated


class LocalBrain:
    """A local instruct model choosing specpilot's tools; keeps the conversation across turns."""

    name = "local"

    def __init__(self, model: str | None = None, max_text_tokens: int = MAX_TEXT_TOKENS):
        self.model = model or local_model_ref()
        self.max_text_tokens = max_text_tokens
        self.history: list[str] = []  # past exchanges, as chat markup
        self.last_turn: dict = {}  # seconds, forward passes and tokens of the last turn

    def engine(self) -> ConstrainedLM:
        return load_engine(self.model)

    def respond(self, session: Any, text: str) -> Reply:
        start = time.perf_counter()
        lm = self.engine()
        passes, fed = lm.passes, lm.fed
        decision = self.decide(text)
        reply = self._act(session, text, decision)
        self.last_turn = {"seconds": time.perf_counter() - start, "passes": lm.passes - passes,
                          "tokens": lm.fed - fed, "tool": decision.name, "arguments": decision.arguments}
        return reply

    # ---- deciding -------------------------------------------------------------------------------------

    def decide(self, text: str) -> Decision:
        """One constrained decode; a call whose arguments do not validate is decoded once more with the
        validation error shown to the model."""
        tools = registry.load_tools()
        context = self._context() + local_prompt.user_turn(text)
        said = " ".join([*self.history, text])
        decision = self._decode(context, tools, said)
        if decision.error is None:
            return decision
        retry = (context + local_prompt.call_text(decision.name, decision.arguments) + local_prompt.IM_END + "\n"
                 + local_prompt.user_turn(f"<tool_response>\nerror: {decision.error}\n</tool_response>"))
        return self._decode(retry, tools, said)

    def _decode(self, context: str, tools: dict, said: str) -> Decision:
        lm = self.engine()
        lm.begin(context)
        names = [*tools, local_prompt.REPLY]
        lm.text += local_prompt.CALL_OPEN
        name = names[lm.choose(names)]
        lm.text += local_prompt.ARGS_OPEN
        if name == local_prompt.REPLY:
            lm.text += '{"text": "'
            return Decision(text=_clean(tool_grammar.decode_string(lm, self.max_text_tokens)))
        tool = tools[name]
        arguments = tool_grammar.decode_arguments(lm, tool, said)
        try:
            registry.parse_input(tool, arguments)
            if isinstance(arguments.get("params"), dict) and arguments.get("method"):
                validate_saved_params(arguments["method"], arguments["params"])
        except ParameterError as exc:
            return Decision(name=tool.name, arguments=arguments, error=exc.user_message())
        return Decision(name=tool.name, arguments=arguments)

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
        if decision.name is None:
            answer = decision.text or "Could you say that in other words?"
            self.history.append(turn + local_prompt.reply_call(answer) + local_prompt.IM_END + "\n")
            return Reply(answer)
        missing = self._ungrounded(session, text, decision)
        if missing:
            question = (f"Which {missing} should I use for {decision.name}? Please give it in quotes, "
                        "and I will run it on this machine.")
            self.history.append(turn + local_prompt.reply_call(question) + local_prompt.IM_END + "\n")
            return Reply(question, awaiting=f"the {missing} for {decision.name}")
        if decision.error is not None:
            answer = f"I could not form a valid {decision.name} call: {decision.error}"
            self.history.append(turn + local_prompt.reply_call(answer) + local_prompt.IM_END + "\n")
            return Reply(answer, unfinished=f"no valid {decision.name} call: {decision.error}")
        result = session.call_tool(decision.name, decision.arguments)
        answer = _answer(result)
        summary = answer.strip().splitlines()[0][:200] if answer.strip() else "done"
        self.history.append(turn + local_prompt.call_text(decision.name, decision.arguments) + local_prompt.IM_END
                            + f"\n{local_prompt.IM_START}user\n<tool_response>\n{summary}\n</tool_response>"
                            + local_prompt.IM_END + "\n")
        return Reply(answer)

    def _ungrounded(self, session: Any, text: str, decision: Decision) -> str | None:
        """The first argument that should be the user's own words but is not in what they wrote."""
        said = " ".join([text, *self.history, str(getattr(session, "last_prompt", None) or "")]).casefold()
        for key in GROUNDED:
            value = decision.arguments.get(key)
            if isinstance(value, str) and _squash(value) not in _squash(said):
                return key
        return None


def _answer(result: Any) -> str:
    """The formatted tool result; a result without the usual fields (a call listed but not executed)
    as its JSON."""
    try:
        return format_result(result)
    except (KeyError, TypeError, AttributeError):
        return json.dumps(result.content, indent=2, ensure_ascii=False, default=str)


def _squash(text: str) -> str:
    return " ".join(text.casefold().split())


def _clean(text: str) -> str:
    """A text answer without chat markup or a started tool call."""
    for marker in ("<tool_call>", local_prompt.IM_END, local_prompt.IM_START):
        text = text.split(marker)[0]
    return text.strip()

