"""What a measurement runs on, loaded once and shared by run, compare, bench, tune and the demo: the
models (each loaded once per process), the Medusa heads, the prompt ids, the stop tokens, the
generation settings, and the transformers peers timed beside our methods.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel

from memory import Store
from tools import models
from tools.bench import peers
from tools.bench.protocol import Runner
from tools.bench.machine_cost import machine_cost
from tools.bench.sizing import Sizing, size_params
from tools.engine import quantize
from tools.engine.methods import METHODS, MethodContext, parse_params
from tools.engine.types import GenerationSettings
from tools.errors import ParameterError, SpecpilotError, StoreError
from tools.medusa.checkpoint import default_medusa_heads_path, load_medusa_heads

_LOADED: dict[tuple, models.LoadedModel] = {}


def load_cached(ref: str, dtype: str, device_map: str | None, threads: int | None = None) -> models.LoadedModel:
    """Load a model once per process (compare and bench reuse it across methods)."""
    key = (ref, dtype, device_map)
    if key not in _LOADED:
        _LOADED[key] = models.load(ref, dtype=dtype, device_map=device_map, threads=threads)
    return _LOADED[key]


def read_prompt_file(path: str | Path, what: str = "prompt file") -> str:
    """The text of a prompt file (UTF-8, a byte-order mark dropped); a SpecpilotError naming the file
    when it is missing, unreadable or not UTF-8."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise ParameterError(f"{what} {file} does not exist", hint="check the path")
    try:
        data = file.read_bytes()
    except OSError as exc:
        raise ParameterError(f"cannot read {what} {file}: {exc.strerror or exc}",
                             hint="check the file's permissions") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ParameterError(
            f"{what} {file} is not UTF-8 text: byte 0x{data[exc.start]:02x} at offset {exc.start} ({exc.reason})",
            hint=f"save it as UTF-8, e.g. `iconv -f latin1 -t utf-8 {file} > prompt-utf8.txt`, and pass that file",
        ) from None


def prompt_ids_for(tokenizer, prompt: str, chat: bool) -> list[int]:
    """The exact ids fed to the model: the chat template applied unless ``chat`` is False."""
    if chat and getattr(tokenizer, "chat_template", None):
        ids = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=True, return_dict=False
        )
        if isinstance(ids, dict) or hasattr(ids, "keys"):
            ids = ids["input_ids"]
        return [int(t) for t in ids]
    ids = tokenizer(prompt, add_special_tokens=True)["input_ids"]
    if not ids:
        raise ParameterError("the prompt gives no tokens", hint="give a non-empty prompt")
    return [int(t) for t in ids]


# transformers' "no limit" for a tokenizer's model_max_length is int(1e30): a length above this is no limit
NO_LIMIT = 10**9


def context_length(loaded: models.LoadedModel) -> tuple[int | None, str]:
    """The model's context in tokens and where it was read: the config's max_position_embeddings, else
    the tokenizer's model_max_length; (None, "") when neither holds a real limit."""
    config = getattr(loaded.model, "config", None)
    for value, source in ((getattr(config, "max_position_embeddings", None), "max_position_embeddings in its config"),
                          (getattr(loaded.tokenizer, "model_max_length", None), "model_max_length of its tokenizer")):
        if isinstance(value, int) and not isinstance(value, bool) and 0 < value < NO_LIMIT:
            return value, source
    return None, ""


def check_fits_context(loaded: models.LoadedModel, prompt_tokens: int, max_new_tokens: int) -> None:
    """Raise ParameterError, naming both numbers and the limit, when the prompt's tokens plus
    ``max_new_tokens`` do not fit the model's context (a longer run would be silent garbage)."""
    limit, source = context_length(loaded)
    if limit is None or prompt_tokens + max_new_tokens <= limit:
        return
    ways = [f"shorten the prompt to at most {limit - max_new_tokens} tokens" if limit > max_new_tokens else "",
             f"lower max_new_tokens (--max-new-tokens) to {limit - prompt_tokens} or less"
             if limit > prompt_tokens else ""]
    raise ParameterError(
        f"the prompt is {prompt_tokens} tokens and max_new_tokens is {max_new_tokens}: {prompt_tokens + max_new_tokens}"
        f" tokens, more than the {limit}-token context of {loaded.ref} ({source})",
        hint=" or ".join(w for w in ways if w)
        or f"shorten the prompt and lower max_new_tokens so that together they fit in {limit} tokens")


def checked_prompt_ids(inp: BaseModel, ctx: MethodContext, prompt: str) -> list[int]:
    """The prompt's ids (:func:`prompt_ids_for`), checked to fit the target's context with
    ``inp.max_new_tokens`` before any measuring (ParameterError otherwise)."""
    ids = prompt_ids_for(ctx.target.tokenizer, prompt, inp.chat)
    check_fits_context(ctx.target, len(ids), inp.max_new_tokens)
    return ids


def eos_ids_for(loaded: models.LoadedModel) -> list[int]:
    """Stop tokens: the generation config's EOS ids and the tokenizer's EOS."""
    ids: list[int] = []
    gen = getattr(loaded.model, "generation_config", None)
    eos = getattr(gen, "eos_token_id", None) if gen is not None else None
    for value in (eos if isinstance(eos, list) else [eos]) + [loaded.tokenizer.eos_token_id]:
        if value is not None and int(value) not in ids:
            ids.append(int(value))
    return ids


def generation_settings(inp: BaseModel, ctx: MethodContext) -> GenerationSettings:
    """The generation settings every method runs with (EOS ids from the target)."""
    return GenerationSettings(max_new_tokens=inp.max_new_tokens, temperature=inp.temperature, top_p=inp.top_p,
                              top_k=inp.top_k, seed=inp.seed, eos_token_ids=eos_ids_for(ctx.target))


# ---------------------------------------------------------------------------- Medusa heads
def trained_heads_path(store, target: str) -> str | None:
    """Heads trained here for ``target`` (recorded by the train tool), if the folder still exists."""
    path = store.trained_heads_path(target)
    return path if path and Path(path).is_dir() else None


def medusa_heads_for(store, target: str, given: str | None) -> str | None:
    """The Medusa heads to use: the given folder, else heads trained here, else the shipped ones."""
    if given:
        return given
    shipped = default_medusa_heads_path(target)
    return trained_heads_path(store, target) or (str(shipped) if shipped else None)


# ---------------------------------------------------------------------------- models
@dataclass
class Prepared:
    """Loaded models and what could not be loaded."""

    ctx: MethodContext
    unavailable: dict[str, str]  # method -> reason it cannot run here
    heads_path: str | None


def prepare(inp: BaseModel, methods: list[str], heads_path: str | None, progress=None,
            strict: bool = False) -> Prepared:
    """Load the target (errors propagate), the draft when a method needs it or peers are asked (the
    given draft, else the built-in one), and the Medusa heads when a method needs them.

    A draft or heads that cannot be loaded make the methods needing them "not run" (``unavailable``),
    or, with ``strict`` (a single run), raise. Without ``heads_path`` a strict load tries the shipped
    heads. A draft wanted only for the peers never raises: the assisted peer is then left out.
    """
    if progress:
        progress(f"loading target {inp.target}")
    target = load_cached(inp.target, inp.dtype, inp.device_map, inp.threads)
    ctx = MethodContext(target=target)
    unavailable: dict[str, str] = {}
    draft_methods = [m for m in methods if METHODS[m].needs_draft]
    if draft_methods or getattr(inp, "peers", False):
        ref = inp.draft or models.DEFAULT_DRAFT
        if progress:
            progress(f"loading draft {ref}")
        try:
            ctx.draft = load_cached(ref, inp.dtype, inp.device_map, inp.threads)
        except SpecpilotError as exc:
            if strict and draft_methods:
                raise
            for method in draft_methods:
                unavailable[method] = f"draft model not available: {ref}: {exc.user_message()}"
    for method in (m for m in methods if METHODS[m].needs_heads):
        if heads_path is None and not strict:
            unavailable[method] = (f"no Medusa heads for this target: train them with `specpilot medusa train "
                                   f"--target {inp.target}` (asks first) or pass --medusa-heads PATH")
            continue
        if progress and heads_path:
            progress(f"loading Medusa heads {heads_path}")
        try:
            ctx.medusa_heads = load_medusa_heads(target, heads_path)
        except SpecpilotError as exc:
            if strict:
                raise
            unavailable[method] = f"Medusa heads unusable: {heads_path}: {exc.user_message()}"
    return Prepared(ctx=ctx, unavailable=unavailable, heads_path=heads_path)


# ---------------------------------------------------------------------------- parameters
def sized_params(methods: list[str], given: dict[str, dict], store, ctx: MethodContext, allow_measure: bool = True,
                 progress=None) -> dict[str, Sizing]:
    """Each method's parameters, field by field: given > saved in memory > sized to this machine's
    cost curve (tools.bench.sizing: read from memory, else measured once and stored when
    ``allow_measure``, else a conservative CPU curve) > default. Returns {method: Sizing} (its
    ``params``, ``source``, ``reasons()`` for the run record and ``lines()`` to print); the baseline
    has none. Bad given or saved values raise ParameterError naming the field."""
    wanted = [m for m in dict.fromkeys(methods) if m != "baseline"]
    if not wanted:
        return {}
    saved = {m: (store.get_params(m) or {}) if store is not None else {} for m in wanted}
    chosen = {m: {**saved[m], **(given.get(m) or {})} for m in wanted}
    needs_draft = [m for m in wanted if METHODS[m].needs_draft and ctx.draft is not None]
    quant = next((chosen[m].get("draft_quant") for m in needs_draft if chosen[m].get("draft_quant")), "auto")
    machine = machine_cost(store, ctx.target, ctx.draft if needs_draft else None, quant, allow_measure, progress)
    heads = ctx.medusa_heads
    return {m: size_params(m, machine, given.get(m), saved[m], num_heads=getattr(heads, "num_heads", None),
                           heads_tree=getattr(heads, "tree_choices", None)) for m in wanted}


def sized_run_params(inp: BaseModel, ctx: MethodContext, store=None, allow_measure: bool = True,
                     progress=None) -> Sizing | None:
    """The parameters of one run (tools.bench.run.run_method): ``inp.params`` as given, the rest from
    memory or sized to this machine (:func:`sized_params`); None for the baseline. A memory database
    that cannot be opened leaves memory out (the curve is then measured, or the CPU fallback used)."""
    if inp.method == "baseline":
        return None
    if store is None:
        try:
            store = Store()
        except StoreError:
            store = None
    return sized_params([inp.method], {inp.method: dict(inp.params)}, store, ctx, allow_measure, progress)[inp.method]


def size_candidates(candidates: list, given: dict[str, dict], store, ctx: MethodContext, allow_measure: bool = True,
                    progress=None) -> dict[str, Sizing]:
    """Re-resolve the parameters of compare/bench candidates (tools.bench.run.Candidate) whose source
    is given, memory or default with :func:`sized_params`, in place (params and source); sweeps and
    relabelled candidates keep theirs. Returns {method: Sizing} of those re-resolved."""
    todo = [c for c in candidates if c.method != "baseline" and c.source in ("given", "memory", "default")]
    sizings = sized_params([c.method for c in todo], given, store, ctx, allow_measure, progress)
    for cand in todo:
        sizing = sizings[cand.method]
        cand.params = parse_params(cand.method, sizing.params)
        cand.source = sizing.source
    return sizings


# ---------------------------------------------------------------------------- peers
def uses_int8_draft(method: str, params: BaseModel, ctx: MethodContext) -> bool:
    """Whether ``method`` drafts with the int8 copy of the draft model (draft_quant resolved here)."""
    return (METHODS[method].needs_draft and ctx.draft is not None
            and quantize.resolve(params.draft_quant, ctx.draft.device) == "int8")


def peer_runners(ctx: MethodContext, prompt_ids: list[int], int8_draft: bool = False) -> dict[str, Runner]:
    """transformers' assisted generation (when a draft is loaded; also with the int8 copy of the draft
    when ``int8_draft``, the same one our decoder uses, so the comparison is like for like) and
    prompt lookup."""
    out: dict[str, Runner] = {}
    if ctx.draft is not None:
        out["hf_assisted"] = lambda s: peers.hf_assisted(ctx.target.model, ctx.draft.model, prompt_ids, s)
        if int8_draft:
            q = quantize.int8_draft(ctx.draft.model)
            out["hf_assisted_int8"] = lambda s: peers.hf_assisted(ctx.target.model, q, prompt_ids, s)
    out["hf_prompt_lookup"] = lambda s: peers.hf_prompt_lookup(ctx.target.model, prompt_ids, s)
    return out
