"""The methods' parameter models and THE method table, with no torch import: the CLI builds its options
and the tools their schemas from here without loading a model library. Defaults are defined here once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tools.engine.medusa_trees import AUTO
from tools.errors import ParameterError

def shown_value(value) -> str:
    """A parameter's value as one short piece of a line: a list of numbers (pass costs, priors) by its first
    values, a list of lists (a tree's choices) by its size."""
    if isinstance(value, list) and value and all(isinstance(v, (int, float)) for v in value):
        return "[" + ", ".join(f"{v:g}" for v in value[:4]) + (f", ... {len(value)} values]" if len(value) > 4 else "]")
    if isinstance(value, list):
        return f"<tree of {len(value)} nodes>"
    return str(value)


MAX_STEP_TOKENS = 512  # tokens in one forward pass (1 + lookahead branch + verification branch)
MAX_CANDIDATE_TOKENS = 64
MAX_CANDIDATES = 16
# prompt lookup's per-token acceptance of a draft whose occurrence matches the last 1, 2, ..., 8 or more
# tokens, before a run has seen its own: fitted on the fit half of the Spec-Bench prompts
# (benchmarks/scripts/ngram_policy.py)
ACCEPTANCE_PRIOR = (0.30, 0.58, 0.56, 0.55, 0.55, 0.55, 0.55, 0.59)
PRIOR_WEIGHT = 4.0  # how many draft tokens of this run's own outcome weigh as much as the prior
# draft-model decoding's per-token acceptance before a run has seen its own (benchmarks/scripts/draft.py on coding/math:
# 73-77% of drafted tokens kept), and a draft token's cost relative to a target token where none is known
DRAFT_ACCEPTANCE_PRIOR = 0.8
DRAFT_COST_ASSUMED = 0.25
# lookahead's tokens per full step (accepted guesses + the target's own token) before a run has seen its own, by
# (W, N, G, prompt-lookup drafts): fitted on the fit half of the Spec-Bench prompts (one per category, greedy,
# 64 new tokens, every step a full one: benchmarks/scripts/acceptance_halves.py --methods lookahead --halves fit), for
# the settings sized for a 2-core AVX2 CPU in float32 (a 2-token pass at 2.06x one, and at 1.91x); the cost
# gate starts from it instead of trial steps. Other settings have no prior and take the trial.
LOOKAHEAD_STEP_PRIOR = {(3, 3, 1, 0): 1.25, (3, 4, 1, 0): 1.28}


PassCosts = list[Annotated[float, Field(gt=0)]] | None


def pass_costs_field(effect: str):
    """The ``pass_costs`` field of a method with a cost gate (tools.engine.gate); ``effect``: what it does."""
    return Field(None, min_length=1,
                 description="cost of a target pass over 1, 2, 3, ... tokens relative to one token (this machine's "
                             f"cost curve; run and compare set it from the curve). With it {effect}")


class BaselineParams(BaseModel):
    """The baseline has no parameters of its own."""

    model_config = ConfigDict(extra="forbid")


class DraftParams(BaseModel):
    """Draft-model speculative decoding parameters (the ``draft`` method of tools.engine.methods).

    Defaults chosen from a sweep on a 2-core CPU with the default pair (benchmarks/scripts/draft.py): start
    at K=8, adapt K up to 16, stop a draft early when the draft's top probability is below 0.4, and
    draft with an int8 copy of the draft model on a CPU. None of them changes the output. The field
    names are SpeculativeDecoder's keyword arguments (whose own defaults are the Lugh API's: k=4, no
    adaptation, no confidence cut, no quantization).
    """

    model_config = ConfigDict(extra="forbid")

    k: int = Field(8, ge=1, le=16, description="draft tokens per step (the starting K when adaptive)")
    adaptive_k: bool = Field(True, description="grow K after a fully accepted step, shrink it after a rejection, "
                                               "and with pass_costs draft what this machine's costs pay for (no "
                                               "draft when a plain step is cheaper); off: K tokens every step")
    k_max: int | None = Field(16, ge=1, le=16, description="upper bound for adaptive K (None: 2k)")
    draft_confidence: float | None = Field(
        0.4, ge=0.0, lt=1.0, description="stop drafting when the draft's top probability falls below this"
    )
    draft_quant: Literal["auto", "none", "int8", "gguf"] = Field(
        "auto", description="a cheaper draft on CPUs: int8 (an int8 copy) or gguf (the draft's GGUF file on llama.cpp, "
                            "its own quantized weights); auto: on a CPU the one this machine runs faster (gguf where "
                            "llama-cpp-python and the file are here), none on a GPU; output unchanged")
    draft_vocab: int | None = Field(
        None, ge=1, description="draft over the N lowest token ids only (output unchanged; cheaper draft LM head)"
    )
    gguf_draft_until: float | None = Field(
        None, gt=0, description="with draft_quant gguf: a prompt longer than this many tokens per new token asked for "
                                "is drafted by the int8 copy instead (llama.cpp reads prompts slower than it and "
                                "drafts faster; sized from both measured costs); None: llama.cpp whatever the prompt")
    draft_lookup: int = Field(
        4, ge=0, le=16, description="greedy: each draft forward also checks up to N tokens that followed the text's "
                                    "last words earlier in it, and keeps those the draft itself would have proposed "
                                    "(the same draft in fewer forwards; 0: off)")
    draft_tree: int = Field(
        16, ge=0, le=32, description="draft trees: up to N of the draft's other likely tokens (its top 6 at every "
                                     "slot of the chain and where a confidence cut stopped it) verified beside the "
                                     "chain in the same target pass, the most likely first, the 4 most likely "
                                     "continued by the draft (one batched draft forward per depth); with pass_costs "
                                     "only as many as this machine's pass costs pay for, else grown to the chain's "
                                     "length (0: the chain alone; output unchanged either way)")
    tree_lookup: int = Field(10, ge=0, le=16, description="draft trees: up to N tokens that followed the text's last "
                                                          "3, 2 or 1 tokens earlier in the prompt or output merged into "
                                                          "each step's tree as one more branch (with pass_costs only as "
                                                          "many as are expected to pay for the longer pass); 0: off")
    pass_costs: PassCosts = pass_costs_field(
        "each step drafts the length with the most expected tokens per unit of cost, and none (a plain step) "
        "when a plain step is cheaper; None drafts K tokens every step")
    draft_cost: float | None = Field(
        None, gt=0, description="one draft token's cost relative to one target token (with pass_costs; this "
                                f"machine's, measured; None: {DRAFT_COST_ASSUMED})")


class MedusaParams(BaseModel):
    """Medusa's own parameters (temperature, top-p, top-k and seed come from GenerationSettings)."""

    model_config = ConfigDict(extra="forbid")

    posterior_threshold: float = Field(0.09, gt=0.0, le=1.0, description="typical acceptance: upper bound on the needed p(x)")
    posterior_alpha: float = Field(0.3, gt=0.0, le=1.0, description="typical acceptance: scale of exp(-entropy)")
    tree: str | list[list[int]] = Field(
        AUTO, description="tree name (auto, chain3, chain4, cpu8, cpu16, mc_sim_7b_63), JSON file, or list of choices"
    )
    pass_costs: PassCosts = pass_costs_field(
        "a step is plain (the root alone, no heads) while the recent tree steps gave fewer tokens than their "
        "passes and the heads cost, a tree step again after 16 (waits doubling to 64 while those do not pay); "
        "None verifies the tree every step")
    medusa_lookup: int = Field(10, ge=0, le=32, description="prompt lookup inside Medusa: up to this many tokens that "
                                                            "followed the text's last 3, 2 or 1 tokens earlier in the "
                                                            "prompt or output are merged into each step's tree as one "
                                                            "more path (with pass_costs only as many as are expected "
                                                            "to pay for the longer pass; a step the gate declines "
                                                            "verifies that path alone); 0: the heads' tree alone")


class EagleParams(BaseModel):
    """EAGLE's draft tree (EAGLE-2's dynamic tree): how deep the head drafts, how many nodes it
    expands per depth, and how many drafted nodes the target verifies in its one pass."""

    model_config = ConfigDict(extra="forbid")

    depth: int = Field(5, ge=1, le=12, description="draft depth: the longest path the head proposes per step")
    topk: int = Field(4, ge=1, le=16, description="children drafted per expanded node and nodes expanded per depth")
    tree_nodes: int = Field(10, ge=1, le=128, description="drafted nodes verified per step (the most probable paths)")
    eagle_heads: str | None = Field(None, description="EAGLE head folder: a specpilot head or an upstream EAGLE-1/EAGLE-2 "
                                                          "checkpoint (default: the one shipped for the target)")
    pass_costs: PassCosts = pass_costs_field(
        "a step is plain (one token, no drafting) while the recent tree steps gave fewer tokens than their "
        "passes and the head cost, a tree step again after 16 (waits doubling to 64 while those do not pay); "
        "None verifies a tree every step")
    trim: bool = Field(True, description="with pass_costs: each step drafts a depth further only while the nodes it "
                                         "can add are expected to give more tokens than the head's pass costs, and "
                                         "verifies only as many of the tree_nodes as are expected to pay for the longer "
                                         "target pass (the head's path probabilities, scaled by what this run's "
                                         "steps accepted against them); False always drafts depth and verifies "
                                         "tree_nodes")
    eagle_lookup: int = Field(10, ge=0, le=32, description="prompt lookup inside EAGLE: up to this many tokens that "
                                                           "followed the text's last 3, 2 or 1 tokens earlier in the "
                                                           "prompt or output are merged into each step's tree as one "
                                                           "more branch (with pass_costs and trim only as many as are "
                                                           "expected to pay for the longer pass); 0: the head's tree "
                                                           "alone")


class PromptLookupParams(BaseModel):
    """Prompt lookup parameters: n-gram sizes to match, the draft length and the drafts per step."""

    model_config = ConfigDict(extra="forbid")

    max_ngram_size: int = Field(3, description="longest suffix n-gram searched for earlier in the text")
    min_ngram_size: int = Field(1, description="shortest suffix n-gram tried before giving up on a draft")
    num_candidate_tokens: int = Field(10, description="tokens copied after the match as a draft")
    num_candidates: int = Field(3, description="different drafts (from different matches) verified per step")
    max_candidate_tokens: int = Field(20, description="a fully accepted draft doubles the next one's length, "
                                                      "up to this (copying runs on)")
    max_draft_tokens: int = Field(31, description="draft tokens verified per step at most (later drafts are "
                                                  "cut to fit; ~32 tokens per pass is nearly free on a CPU)")
    pass_costs: list[float] | None = Field(
        None, description="cost of a forward pass over 1, 2, 3, ... tokens relative to one token (this machine's "
                          "cost curve; run and compare set it from the curve). With it each draft is cut to the "
                          "length with the most expected tokens per unit of pass cost, and dropped when a plain "
                          "one-token step is cheaper; None verifies whatever matches")
    acceptance_prior: list[float] = Field(
        default_factory=lambda: list(ACCEPTANCE_PRIOR),
        description="per-token acceptance assumed for a draft whose occurrence matches the last 1, 2, ..., 8 or "
                    "more tokens, before this run has seen its own (fitted on the fit half of the Spec-Bench "
                    "prompts); only with pass_costs")

    def check(self) -> PromptLookupParams:
        """Return self, or raise ParameterError naming the parameter to change."""
        if self.min_ngram_size < 1:
            raise ParameterError(f"min_ngram_size must be at least 1, got {self.min_ngram_size}",
                                 hint="try min_ngram_size=1")
        if self.max_ngram_size < self.min_ngram_size:
            raise ParameterError(
                f"max_ngram_size ({self.max_ngram_size}) is below min_ngram_size ({self.min_ngram_size})",
                hint="raise max_ngram_size or lower min_ngram_size (defaults 3 and 1)")
        if not 1 <= self.num_candidate_tokens <= MAX_CANDIDATE_TOKENS:
            raise ParameterError(
                f"num_candidate_tokens must be from 1 to {MAX_CANDIDATE_TOKENS}, got {self.num_candidate_tokens}",
                hint="try num_candidate_tokens=10")
        if not self.num_candidate_tokens <= self.max_candidate_tokens <= MAX_CANDIDATE_TOKENS:
            raise ParameterError(
                f"max_candidate_tokens must be from num_candidate_tokens ({self.num_candidate_tokens}) to "
                f"{MAX_CANDIDATE_TOKENS}, got {self.max_candidate_tokens}",
                hint="set it equal to num_candidate_tokens for a fixed draft length")
        if self.pass_costs is not None and (not self.pass_costs or self.pass_costs[0] <= 0
                                            or any(c <= 0 for c in self.pass_costs)):
            raise ParameterError("pass_costs must be positive relative costs of passes over 1, 2, ... tokens",
                                 hint="leave it out: run and compare set it from this machine's cost curve")
        if not self.acceptance_prior or any(not 0.0 <= a < 1.0 for a in self.acceptance_prior):
            raise ParameterError("acceptance_prior must be per-token acceptance rates in [0, 1), one per match size",
                                 hint="leave it out to use the fitted values")
        if self.max_draft_tokens < 1:
            raise ParameterError(f"max_draft_tokens must be at least 1, got {self.max_draft_tokens}",
                                 hint="try max_draft_tokens=31")
        if not 1 <= self.num_candidates <= MAX_CANDIDATES:
            raise ParameterError(
                f"num_candidates must be from 1 to {MAX_CANDIDATES}, got {self.num_candidates}",
                hint="try num_candidates=3 (1 verifies a single draft, as transformers does)")
        return self


class LookaheadParams(BaseModel):
    """Lookahead decoding parameters: window W, n-gram size N, guess set size G."""

    model_config = ConfigDict(extra="forbid")

    window: int = Field(15, description="W: columns of the lookahead window (parallel Jacobi trajectories)")
    ngram: int = Field(5, description="N: n-gram size; the window has N-1 levels, candidates N-1 tokens")
    guess: int = Field(5, description="G: n-grams kept per first token and verified per step at most")
    pool_from_prompt: bool = Field(False, description="also seed the n-gram pool from the prompt and the output")
    prompt_lookup: int = Field(2, description="prompt-lookup drafts (3-gram match, up to 10 tokens) verified "
                                              "with the pool's n-grams each step; with pass_costs one draft, cut each "
                                              "step to the length that pays; 0 for lookahead alone")
    pass_costs: PassCosts = pass_costs_field(
        "a step is plain (one token, no window, no drafts) while the method's recent full steps gave fewer "
        "tokens than their passes cost, a full step again after 16 (waits doubling to 64 while those do not pay); "
        "None takes full steps only")

    @property
    def step_prior(self) -> float | None:
        """Tokens a full step is expected to give (LOOKAHEAD_STEP_PRIOR), None where these settings were not fitted."""
        if self.pool_from_prompt:
            return None
        # with pass costs the prompt-lookup draft is cut to what pays: the window's own figure stands for the step
        drafts = 0 if self.pass_costs else self.prompt_lookup
        return LOOKAHEAD_STEP_PRIOR.get((self.window, self.ngram, self.guess, drafts))

    def lookup_params(self) -> PromptLookupParams | None:
        """The prompt-lookup matcher used for the extra drafts (None when ``prompt_lookup`` is 0)."""
        return PromptLookupParams(num_candidates=self.prompt_lookup) if self.prompt_lookup else None

    @property
    def lookup_tokens(self) -> int:
        """The prompt-lookup drafts' tokens in a step at most (with pass costs one draft, cut to what pays)."""
        drafts = min(self.prompt_lookup, 1) if self.pass_costs else self.prompt_lookup
        return drafts * PromptLookupParams().num_candidate_tokens

    @property
    def tokens_per_step(self) -> int:
        """Tokens in one step's forward pass at most: 1 + (N-1)*W + G*(N-1) + the prompt-lookup drafts."""
        return 1 + (self.ngram - 1) * self.window + self.guess * (self.ngram - 1) + self.lookup_tokens

    def check(self) -> LookaheadParams:
        """Return self, or raise ParameterError naming the parameter to change."""
        if self.ngram < 2:
            raise ParameterError(f"ngram (N) must be at least 2, got {self.ngram}", hint="try ngram=5 (the default)")
        if self.window < 1:
            raise ParameterError(f"window (W) must be at least 1, got {self.window}", hint="try window=15")
        if self.guess < 0:
            raise ParameterError(f"guess (G) must be 0 or more, got {self.guess}", hint="try guess=5")
        if not 0 <= self.prompt_lookup <= MAX_CANDIDATES:
            raise ParameterError(f"prompt_lookup must be from 0 to {MAX_CANDIDATES}, got {self.prompt_lookup}",
                                 hint="try prompt_lookup=2, or 0 for lookahead alone")
        if self.tokens_per_step > MAX_STEP_TOKENS:
            raise ParameterError(
                f"W={self.window}, N={self.ngram}, G={self.guess} put 1 + (N-1)*W + G*(N-1) (+ drafts) = "
                f"{self.tokens_per_step} tokens in each forward pass; the limit is {MAX_STEP_TOKENS}",
                hint="lower window or guess (or ngram, which multiplies both)",
            )
        return self


@dataclass(frozen=True)
class MethodSpec:
    """Everything specpilot knows about one method, in one place: the CLI options, the tool schemas,
    the report colours and the dependency check are all read from ``METHODS``."""

    name: str
    params: type[BaseModel]
    description: str
    colour: str  # chart colour
    lossless: str  # what stays exact, in words
    needs_draft: bool = False
    needs_heads: bool = False  # Medusa heads
    needs_features: bool = False  # reads the target's final hidden states (not on llama.cpp)
    training: str = "none"  # what has to be trained before the method can run
    revision: int = 0  # raised when the method's code changes its figures at the same parameters: runs stored by an
    # older revision are measured again, not reused (tools.bench.compare.run_key)


METHODS: dict[str, MethodSpec] = {spec.name: spec for spec in (
    MethodSpec("baseline", BaselineParams, "plain KV-cached autoregressive generation", "#7f7f7f", "reference"),
    MethodSpec("draft", DraftParams, "draft-model speculative decoding (rejection sampling, exact)", "#1f77b4",
               "greedy: identical; sampling: lossless (rejection sampling)", needs_draft=True,
               revision=2),  # 1: draft trees grow branches; 2: a depth grown only where it can raise the rate
    MethodSpec("medusa", MedusaParams, "Medusa heads with tree attention (greedy exact; typical acceptance lossy)",
               "#d62728", "greedy: identical; typical acceptance: lossy by design", needs_heads=True, needs_features=True,
               training="Medusa heads"),
    MethodSpec("lookahead", LookaheadParams, "lookahead decoding: Jacobi iteration + n-gram pool verification (exact)",
               "#2ca02c", "greedy: identical; sampling: lossless"),
    MethodSpec("eagle", EagleParams, "EAGLE: a one-layer draft head over the target's features, dynamic draft tree "
               "(exact)", "#ff7f0e", "greedy: identical; sampling: lossless", needs_features=True,
               training="EAGLE head"),
    MethodSpec("ngram", PromptLookupParams, "prompt lookup: n-gram candidates copied from the prompt/output (exact)",
               "#9467bd", "greedy: identical; sampling: lossless"),
)}
METHOD_NAMES = tuple(METHODS)
ACCELERATED = tuple(name for name in METHOD_NAMES if name != "baseline")  # the methods that speed up decoding
MethodName = Literal[METHOD_NAMES]  # type: ignore[valid-type]  (the schema's enum, built from the table)
AcceleratedName = Literal[ACCELERATED]  # type: ignore[valid-type]
AUTO = "auto"  # run and bench: the method predicted fastest for each prompt (tools.bench.auto)
RunMethodName = Literal[(*METHOD_NAMES, AUTO)]  # type: ignore[valid-type]
PARAM_MODELS: dict[str, type[BaseModel]] = {name: spec.params for name, spec in METHODS.items()}
DESCRIPTIONS = {name: spec.description for name, spec in METHODS.items()}


# the parameters the machine sizes (tools.bench.sizing) when neither given nor saved
SIZED_FIELDS = {"lookahead": ("window", "ngram", "guess", "prompt_lookup", "pass_costs"), "medusa": ("tree", "pass_costs"),
                "draft": ("k", "k_max", "pass_costs", "draft_cost"), "eagle": ("tree_nodes", "depth", "topk", "pass_costs"),
                "ngram": ("max_draft_tokens", "num_candidate_tokens", "max_candidate_tokens", "num_candidates",
                          "pass_costs")}


def parse_params(method: str, params: dict | None) -> BaseModel:
    """Validate a method's parameters; raise ParameterError naming the bad field."""
    if method not in PARAM_MODELS:
        raise ParameterError(f"unknown method {method!r}", hint=f"choose one of: {', '.join(METHOD_NAMES)}")
    clean = {k: v for k, v in (params or {}).items() if v is not None}
    try:
        model = PARAM_MODELS[method](**clean)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(x) for x in err["loc"])
        allowed = ", ".join(PARAM_MODELS[method].model_fields)
        raise ParameterError(
            f"bad {method} parameter {field}: {err['msg']}", hint=f"{method} takes: {allowed or 'no parameters'}"
        ) from None
    check = getattr(model, "check", None)
    if callable(check):
        check()
    return model
