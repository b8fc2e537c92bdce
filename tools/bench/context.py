"""What a measurement runs on, loaded once and shared by run, compare, bench, tune and the demo: the
models (each loaded once per process, on the engine asked for), the Medusa heads, the prompt ids, the
stop tokens, the generation settings, and the engine's own peers timed beside our methods.

Two engines (``backend``): transformers (the default; a GGUF file is dequantised) and llama.cpp
(tools.engine.llamacpp: the GGUF file of a built-in model, as `specpilot models fetch` put it in
tools.models.models_dir(), or a given .gguf file, run with its own quantized weights). On llama.cpp
the prompt is tokenized by the tokenizer transformers would use for the same reference, so both
engines feed a prompt the same ids; Medusa does not run there (llama.cpp exposes no hidden states).
"""

from __future__ import annotations

import gc
import logging
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel

from memory import Store
from tools import models
from tools.bench import llamacpp_server, peers, upstream
from tools.bench.prompt_sets import prompt_ids_for
from tools.bench.protocol import Runner
from tools.bench.machine_cost import machine_cost, measure_curve, prefer_gguf
from tools.bench.sizing import SizedParam, Sizing, size_params
from tools.engine import cpu_gemm, quantize
from tools.engine.gguf_requant import FAST_DTYPE, fast_copy
from tools.engine.llamacpp import LlamaCppBackend, LlamaCppModel, LlamaReference, as_loaded, draft_generate, load_gguf
from tools.engine.methods import METHODS, MethodContext, parse_params, run
from tools.engine.types import DecodeResult, GenerationSettings
from tools.errors import ModelNotFoundError, ParameterError, SpecpilotError, StoreError
from tools.medusa.checkpoint import default_medusa_heads_path, load_medusa_heads
from tools.medusa.eagle_train import load_eagle_for

log = logging.getLogger(__name__)

LLAMACPP_CONTEXT = 4096  # prompt + new tokens a llama.cpp model is loaded for ...
LLAMACPP_STEP_ROOM = 256  # ... and KV cells above that for the tokens of a verification step
NO_HIDDEN_STATES = ("the llama.cpp backend does not expose the final hidden states that Medusa and EAGLE heads read (llama.cpp "
                    "gives them only in embeddings mode)")
NO_HIDDEN_HINT = "run medusa and eagle with --backend transformers (the default); on llamacpp use baseline, draft, lookahead or ngram"
NOT_ON_LLAMACPP = f"no hidden states on llama.cpp: {NO_HIDDEN_STATES}; {NO_HIDDEN_HINT}"

_LOADED: dict[tuple, models.LoadedModel | LlamaCppModel] = {}
_PEER_ENGINES: dict[tuple, LlamaReference] = {}  # llama-cpp-python Llama objects of the llama.cpp peers


def load_cached(ref: str, dtype: str, device_map: str | None, threads: int | None = None,
                backend: str = "transformers", role: str = "target", file: Path | None = None
                ) -> models.LoadedModel | LlamaCppModel:
    """Load a model once per process (compare and bench reuse it across methods). On llama.cpp the target
    and the draft are two backends even for one file (a backend holds one KV cache at a time); ``file``: another
    GGUF file of the same model to run (a re-quantized copy)."""
    key = ("llamacpp", role, ref, threads, file) if backend == "llamacpp" else (ref, dtype, device_map)
    if key not in _LOADED:
        _LOADED[key] = (load_llamacpp(ref, threads, tokenizer=role != "draft", file=file) if backend == "llamacpp"
                        else models.load(ref, dtype=dtype, device_map=device_map, threads=threads))
        loaded = _LOADED[key]
        if (backend != "llamacpp" and device_map in (None, "cpu")  # accelerate's placement (offload) left as it is
                and cpu_gemm.wanted(loaded.device, getattr(loaded.model, "dtype", None))):
            cpu_gemm.use_onednn(loaded.model)  # passes over a few tokens through oneDNN (tools.engine.cpu_gemm)
    return _LOADED[key]


def release_models() -> None:
    """Free every model this process loaded (a comparison on two engines frees the first one's models
    before it loads the second's: one pair of models in memory at a time)."""
    for loaded in _LOADED.values():
        if isinstance(loaded.model, LlamaCppBackend):
            loaded.model.close()
    for engine in _PEER_ENGINES.values():
        engine.llm.close()
    _LOADED.clear()
    _PEER_ENGINES.clear()
    gc.collect()


def backend_of(ctx: MethodContext) -> str:
    """The engine the context's target runs on: "llamacpp" or "transformers"."""
    model = getattr(ctx.target.model, "inner", ctx.target.model)  # a RecordingBackend wraps the real one
    return "llamacpp" if isinstance(model, LlamaCppBackend) else "transformers"


# ---------------------------------------------------------------------------- llama.cpp models
def gguf_file(ref: str) -> Path:
    """The GGUF file the llama.cpp backend runs for a model reference: a built-in model's fetched file or a
    .gguf path (a transformers folder or hub id is a ParameterError saying what to give instead)."""
    if ref.lower() in models.BUILTIN_MODELS:
        model = models.BUILTIN_MODELS[ref.lower()]
        path = models.gguf_path(model)
        if not path.is_file():
            raise ModelNotFoundError(f"the GGUF file of {model.name} is not on this machine ({path})",
                                     hint=f"run `specpilot models fetch {model.name}` (no model hub needed)")
        return path
    path = Path(ref).expanduser()
    if path.suffix != ".gguf":
        raise ParameterError(f"the llama.cpp backend runs GGUF files, and {ref} is not one",
                             hint=f"give a built-in model ({', '.join(models.BUILTIN_MODELS)}) or a .gguf file, "
                                  "or use --backend transformers")
    if not path.is_file():
        raise ModelNotFoundError(f"GGUF file {path} does not exist", hint="check the path")
    return path


def gguf_tokenizer(ref: str, backend: LlamaCppBackend):
    """The tokenizer transformers uses for ``ref`` (tools.models.resolve_ref: a built-in model's converted
    folder, else the GGUF file), so both engines give a prompt the same ids and chat template; llama.cpp's
    own tokenizer (no chat template) when transformers cannot read it."""
    try:
        from transformers import AutoTokenizer  # slow to import: only when a llama.cpp model is loaded

        where, name = models.resolve_ref(ref)
        return AutoTokenizer.from_pretrained(str(where), **({"gguf_file": name} if name else {}))
    except Exception as exc:  # noqa: BLE001 - any failure to read it leaves llama.cpp's own tokenizer
        log.warning("transformers cannot read the tokenizer of %s (%s): using llama.cpp's, without a chat template",
                    ref, exc)
        return backend.tokenizer


def load_llamacpp(ref: str, threads: int | None = None, tokenizer: bool = True, file: Path | None = None
                  ) -> LlamaCppModel:
    """A GGUF model on the llama.cpp backend (not dequantised), with the tokenizer of :func:`gguf_tokenizer`
    (``tokenizer`` False: llama.cpp's own, enough for a draft model); ``file`` instead of ``ref``'s own GGUF file."""
    path = file or gguf_file(ref)
    backend = load_gguf(path, n_ctx=LLAMACPP_CONTEXT + LLAMACPP_STEP_ROOM, n_threads=threads)
    loaded = as_loaded(backend, ref, tokenizer=gguf_tokenizer(ref, backend) if tokenizer else None)
    loaded.dtype_reason = f"llama.cpp runs the GGUF file's own quantized weights ({path.name}), not dequantised"
    return loaded


def backend_refusal(method: str, backend: str) -> str | None:
    """Why ``method`` cannot run on ``backend`` (None when it can)."""
    return NOT_ON_LLAMACPP if backend == "llamacpp" and METHODS[method].needs_features else None


def check_backend(method: str, backend: str) -> None:
    """ParameterError, saying what to do, when ``method`` cannot run on ``backend``."""
    if backend_refusal(method, backend):
        raise ParameterError(f"{method} cannot run on the llama.cpp backend: {NO_HIDDEN_STATES}", hint=NO_HIDDEN_HINT)


def run_on(method: str, ctx: MethodContext, prompt_ids: list[int], settings: GenerationSettings,
           params: BaseModel) -> DecodeResult:
    """Run one method on the context's engine (tools.engine.methods.run; on llama.cpp the draft method runs
    with both models on llama.cpp, tools.engine.llamacpp.draft_generate)."""
    if method == "draft" and backend_of(ctx) == "llamacpp":
        return draft_generate(ctx.target.model, ctx.draft.model, prompt_ids, settings, params)
    return run(method, ctx, prompt_ids, settings, params)


# transformers' "no limit" for a tokenizer's model_max_length is int(1e30): a length above this is no limit
NO_LIMIT = 10**9


def context_length(loaded: models.LoadedModel) -> tuple[int | None, str]:
    """The model's context in tokens and where it was read: the config's max_position_embeddings, else
    the tokenizer's model_max_length; (None, "") when neither holds a real limit. On llama.cpp: the
    context the backend was loaded with (less the room of a verification step), at most the trained one."""
    if isinstance(loaded.model, LlamaCppBackend):
        backend = loaded.model
        loaded_for = backend.n_ctx - LLAMACPP_STEP_ROOM
        if 0 < backend.n_ctx_train < loaded_for:
            return backend.n_ctx_train, "the context it was trained for (its GGUF metadata)"
        return loaded_for, "the context the llama.cpp backend is loaded with"
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


def checked_prompt_ids(inp: BaseModel, ctx: MethodContext, prompt: str, ids: list[int] | None = None) -> list[int]:
    """The prompt's ids (:func:`prompt_ids_for`, or ``ids`` as given: another engine's ids of the same
    prompt), checked to fit the target's context with ``inp.max_new_tokens`` before any measuring
    (ParameterError otherwise)."""
    ids = list(ids) if ids is not None else prompt_ids_for(ctx.target.tokenizer, prompt, inp.chat)
    check_fits_context(ctx.target, len(ids), inp.max_new_tokens)
    return ids


def eos_ids_for(loaded: models.LoadedModel) -> list[int]:
    """Stop tokens: the generation config's EOS ids and the tokenizer's EOS (on llama.cpp: the tokenizer's
    and the GGUF file's EOS)."""
    ids: list[int] = []
    gen = getattr(loaded.model, "generation_config", None)
    eos = getattr(gen, "eos_token_id", None) if gen is not None else None
    if isinstance(loaded.model, LlamaCppBackend):
        eos = loaded.model.tokenizer.eos_token_id
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
    """The Medusa heads to use: the given folder, else the one saved in memory for medusa (``medusa_heads``
    in its saved parameters: used even where it is gone, so the run names it rather than loading others),
    else heads trained here, else the shipped ones."""
    if given:
        return given
    saved = (store.get_params("medusa") or {}).get("medusa_heads") if store is not None else None
    if saved:
        return str(saved)
    shipped = default_medusa_heads_path(target)
    return (trained_heads_path(store, target) if store is not None else None) or (str(shipped) if shipped else None)


# ---------------------------------------------------------------------------- models
@dataclass
class Prepared:
    """Loaded models and what could not be loaded."""

    ctx: MethodContext
    unavailable: dict[str, str]  # method -> reason it cannot run here
    heads_path: str | None


def prepare(inp: BaseModel, methods: list[str], heads_path: str | None, progress=None,
            strict: bool = False, store=None) -> Prepared:
    """Load the target (errors propagate) on ``inp.backend``, the draft when a method needs it or
    transformers peers are asked (the given draft, else the built-in one), the Medusa heads when a
    method needs them, and EAGLE's head: the folder given in the parameters, else the one saved in
    ``store`` for eagle (what the run's sizing reads from it too), else the shipped one.

    A draft or heads that cannot be loaded, or a method the backend cannot run, make the methods "not
    run" (``unavailable``), or, with ``strict`` (a single run), raise. Without ``heads_path`` a strict
    load tries the shipped heads. A draft wanted only for the peers never raises: the assisted peer is
    then left out.
    """
    backend = getattr(inp, "backend", "transformers")
    if strict:
        for method in methods:
            check_backend(method, backend)
    if progress:
        progress(f"loading target {inp.target}" + (" on llama.cpp" if backend == "llamacpp" else ""))
    target = load_cached(inp.target, inp.dtype, inp.device_map, inp.threads, backend)
    ctx = MethodContext(target=target)
    refusals = {m: backend_refusal(m, backend) for m in methods}
    unavailable: dict[str, str] = {m: reason for m, reason in refusals.items() if reason}
    draft_methods = [m for m in methods if METHODS[m].needs_draft]
    if draft_methods or (getattr(inp, "peers", False) and backend == "transformers"):
        ctx.draft = load_draft(inp, target, draft_methods, unavailable, strict, progress)
        ctx.gguf_draft = load_gguf_draft(inp, ctx.draft, draft_methods, progress, store)
    for method in (m for m in methods if METHODS[m].needs_heads and m not in unavailable):
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
    if "eagle" in methods and "eagle" not in unavailable:
        try:
            ctx.eagle_head = load_eagle_for(target, eagle_heads_for(inp, store))
        except SpecpilotError as exc:
            if strict:
                raise
            unavailable["eagle"] = f"no usable EAGLE head: {exc.user_message()}"
    return Prepared(ctx=ctx, unavailable=unavailable, heads_path=heads_path)


def load_draft(inp: BaseModel, target, draft_methods: list[str], unavailable: dict[str, str], strict: bool,
               progress=None):
    """The draft for ``draft_methods`` and the assisted peer: the given one, else the built-in one. Wanted
    only by the peer, it is skipped for a target whose family has no smaller built-in model (smollm2)
    and dropped when its vocabulary is not the target's: the assisted peer is then left out."""
    peer_only = not draft_methods
    family = models.model_family(inp.target)
    family_draft = models.builtin_draft_for(inp.target) if family else None
    ref = inp.draft or family_draft or models.DEFAULT_DRAFT
    if peer_only and not inp.draft and family and family_draft is None:
        log.info("no built-in draft shares %s's tokenizer: transformers' assisted generation is not a peer", inp.target)
        return None
    if progress:
        progress(f"loading draft {ref}")
    try:
        draft = load_cached(ref, inp.dtype, inp.device_map, inp.threads, getattr(inp, "backend", "transformers"),
                            role="draft")
    except SpecpilotError as exc:
        if strict and draft_methods:
            raise
        for method in draft_methods:
            unavailable[method] = f"draft model not available: {ref}: {exc.user_message()}"
        return None
    if peer_only and getattr(draft, "vocab_size", None) != getattr(target, "vocab_size", None):
        log.info("draft %s does not share %s's vocabulary: transformers' assisted generation is not a peer",
                 ref, inp.target)
        return None
    return draft


def load_gguf_draft(inp: BaseModel, draft, draft_methods: list[str], progress=None,
                    store=None) -> LlamaCppModel | None:
    """The draft again on llama.cpp for draft_quant "gguf" (auto picks it where the sizing times it cheaper than the
    int8 copy), for the draft methods of a transformers target on a CPU, from a .gguf given or a built-in draft's
    Q4_0 copy (tools.engine.gguf_requant); None where llama-cpp-python or a GGUF file is missing."""
    if (not draft_methods or draft is None or getattr(inp, "backend", "transformers") != "transformers"
            or str(draft.device) != "cpu" or all(_chosen_quant(inp, m, store) not in ("auto", "gguf")
                                                 for m in draft_methods)):
        return None
    ref = inp.draft or draft.ref
    try:
        path = gguf_file(ref)
        fast = fast_copy(path, inp.threads) if ref.lower() in models.BUILTIN_MODELS else None  # Q4_0: faster here
        if progress:
            progress(f"loading draft {ref} on llama.cpp too ({(fast or path).name})")
        loaded = load_cached(ref, "gguf", None, inp.threads, "llamacpp", role="gguf_draft", file=fast)
        if fast is not None:
            loaded.dtype = FAST_DTYPE  # its cost is timed and stored apart from the file it was made from
        return loaded
    except SpecpilotError as exc:
        log.info("the draft %s does not run on llama.cpp here (%s): int8 or its own dtype", ref, exc.user_message())
        return None


def eagle_heads_for(inp: BaseModel, store=None) -> str | None:
    """The EAGLE head folder a run or compare of ``inp`` uses: the one given in its parameters, else the one
    saved in memory for eagle (:func:`chosen_params`, as the run's sizing records it), else None (the
    shipped head)."""
    return chosen_params("eagle", _given(inp, "eagle"), _saved(store, "eagle")).get("eagle_heads")


def _chosen_quant(inp: BaseModel, method: str, store=None) -> str:
    """The draft_quant a run or compare of ``inp`` uses for ``method`` where given or saved (else "auto"); "auto"
    where the saved parameters are unreadable (the run then says why)."""
    try:
        return chosen_params(method, _given(inp, method), _saved(store, method)).get("draft_quant") or "auto"
    except ParameterError:
        return "auto"


def _given(inp: BaseModel, method: str) -> dict:
    """The parameters a run, compare or bench was given for ``method`` (a run of ``method``: ``params``; compare
    and bench: ``params[method]``); {} where none are."""
    params = getattr(inp, "params", None) or {}
    if isinstance(getattr(inp, "method", None), str):  # a run: its params are its own method's
        return params if inp.method == method and isinstance(params, dict) else {}
    own = params.get(method) if isinstance(params, dict) else None
    return own if isinstance(own, dict) else {}


def _saved(store, method: str) -> dict:
    """The parameters saved in memory for ``method`` ({} without a store)."""
    return (store.get_params(method) or {}) if store is not None else {}


def chosen_params(method: str, given: dict | None, saved: dict | None) -> dict:
    """``method``'s own parameters as given (a None value is not given), else as saved in memory, else the
    defaults: the one merge of saved parameters with given ones (tools.bench.sizing.size_params without a
    machine: given > memory, saved ones set aside where they do not fit the given ones), so that what a run
    loads before it is sized (the EAGLE head folder, the GGUF draft) is what its record shows. Fields the
    sizing sets to this machine hold their defaults here. ParameterError as size_params raises it."""
    return size_params(method, None, given, saved).params


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
    saved = {m: _saved(store, m) for m in wanted}
    chosen = {m: chosen_params(m, given.get(m), saved[m]) for m in wanted}
    needs_draft = [m for m in wanted if METHODS[m].needs_draft and ctx.draft is not None]
    quant = next((chosen[m].get("draft_quant") for m in needs_draft if chosen[m].get("draft_quant")), "auto")
    # a GGUF draft asked for is timed by prefer_gguf alone: no int8 copy to time first (of a self-draft, that copy
    # is the target's: three float32 copies of it in memory at once)
    timed = ctx.draft if needs_draft and not (quant == "gguf" and ctx.gguf_draft is not None) else None
    machine = machine_cost(store, ctx.target, timed, "auto" if quant == "gguf" else quant, allow_measure, progress)
    if needs_draft:
        prefer_gguf(machine, store, ctx.draft, ctx.gguf_draft, quant, allow_measure, progress)
    heads = ctx.medusa_heads
    sized = {m: size_params(m, machine, given.get(m), saved[m], num_heads=getattr(heads, "num_heads", None),
                            heads_tree=getattr(heads, "tree_choices", None)) for m in wanted}
    if backend_of(ctx) == "llamacpp" and "draft" in sized:
        gguf_draft(sized["draft"])
    return sized


def gguf_draft(sizing: Sizing) -> None:
    """On llama.cpp the draft runs its GGUF file's own quantized weights over the full vocabulary: draft_quant
    is "none" and draft_vocab None (a given int8 or draft_vocab is a ParameterError; saved ones are set aside)."""
    for name, value in (("draft_quant", "none"), ("draft_vocab", None)):
        field = sizing.fields[name]
        if field.source == "given" and field.value not in (value, "auto"):
            raise ParameterError(f"{name}={field.value} does not apply on the llama.cpp backend: the GGUF draft runs "
                                 "its own quantized weights over the full vocabulary",
                                 hint=f"leave out --{name.replace('_', '-')}, or use --backend transformers")
        sizing.fields[name] = SizedParam(value, "default", "the llama.cpp backend drafts with the GGUF draft's own "
                                                           "quantized weights over the full vocabulary")


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
    return (METHODS[method].needs_draft and ctx.draft is not None and backend_of(ctx) == "transformers"
            and params.draft_quant != "gguf" and quantize.resolve(params.draft_quant, ctx.draft.device) == "int8")


def peer_runners(ctx: MethodContext, prompt_ids: list[int], int8_draft: bool = False,
                 max_new_tokens: int = LLAMACPP_CONTEXT, method_params: dict | None = None) -> dict[str, Runner]:
    """The engine's own generation beside ours. transformers: assisted generation (when a draft is loaded;
    also with the int8 copy of the draft when ``int8_draft``, the same one our decoder uses, so the
    comparison is like for like), prompt lookup, and the upstream packages of the methods in
    ``method_params`` (method -> params) whose venvs are set up (tools.bench.upstream). llama.cpp:
    :func:`llamacpp_peer_runners`."""
    if backend_of(ctx) == "llamacpp":
        return llamacpp_peer_runners(ctx, prompt_ids, max_new_tokens)
    out: dict[str, Runner] = {}
    if ctx.draft is not None:
        out["hf_assisted"] = lambda s: peers.hf_assisted(ctx.target.model, ctx.draft.model, prompt_ids, s)
        if int8_draft:
            q = quantize.int8_draft(ctx.draft.model)
            out["hf_assisted_int8"] = lambda s: peers.hf_assisted(ctx.target.model, q, prompt_ids, s)
    out["hf_prompt_lookup"] = lambda s: peers.hf_prompt_lookup(ctx.target.model, prompt_ids, s)
    out.update(upstream.upstream_runners(ctx, prompt_ids, method_params or {}))
    return out


def llamacpp_peer_runners(ctx: MethodContext, prompt_ids: list[int], max_new_tokens: int) -> dict[str, Runner]:
    """llama-cpp-python's ``Llama`` on the target's GGUF file: plain decoding and its prompt-lookup draft
    mode, each a ``Llama`` of its own made here (not while timed), with a context that holds the prompt
    and ``max_new_tokens`` (the draft mode keeps logits for every position of it); and llama.cpp's own
    modes in llama-server when it is built (tools.bench.llamacpp_server)."""
    backend = ctx.target.model
    need = len(prompt_ids) + max_new_tokens + 16
    out: dict[str, Runner] = {}
    for name, lookup in (("llamacpp_plain", None), ("llamacpp_prompt_lookup", peers.LLAMACPP_PROMPT_LOOKUP)):
        key = (str(backend.path), lookup, backend.n_threads)
        engine = _PEER_ENGINES.get(key)
        if engine is None or engine.n_ctx < need:
            if engine is not None:
                engine.llm.close()
            engine = _PEER_ENGINES[key] = LlamaReference(backend.path, n_ctx=256 * -(-need // 256),
                                                         n_threads=backend.n_threads, n_batch=backend.n_batch,
                                                         prompt_lookup=lookup)
        out[name] = (lambda n, e: lambda s: peers.llamacpp_generate(n, e, prompt_ids, s))(name, engine)
    out.update(llamacpp_server.server_runners(ctx, prompt_ids, n_ctx=256 * -(-need // 256)))
    return out


def engine_sizing(store, method: str, target: str, backend: str = "llamacpp", measure: bool = False,
                  draft: str | None = None, threads: int | None = None, repeats: int = 3, progress=None) -> dict:
    """``method``'s parameters sized to this machine's cost curve of ``target`` on ``backend`` (``specpilot
    guide --backend``): with ``measure`` the curve is measured now and stored (and a draft token's cost
    when the method drafts), else the stored one is read (the conservative CPU curve when none is)."""
    check_backend(method, backend)
    ctx = MethodContext(target=load_cached(target, "auto", None, threads, backend))
    if METHODS[method].needs_draft:
        ctx.draft = load_cached(draft or models.DEFAULT_DRAFT, "auto", None, threads, backend, role="draft")
    measured = None
    if measure:
        curve, source = measure_curve(store, ctx.target, progress, repeats)
        measured = {"curve_ms": {n: round(t * 1000, 2) for n, t in (curve or {}).items()}, "source": source}
    sizing = sized_params([method], {}, store, ctx, allow_measure=measure, progress=progress)[method]
    return {"method": method, "target": target, "backend": backend, "dtype": ctx.target.dtype,
            "measured": measured, "sizing": sizing.to_dict(), "lines": sizing.lines()}
