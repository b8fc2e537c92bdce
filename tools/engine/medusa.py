"""Medusa decoding (Cai et al. 2024, arXiv 2401.10774): extra heads on the target propose a tree of
candidates that the target verifies in one forward pass with tree attention.

Head k (0-based) reads the target's last hidden state at position t and predicts the token at
t + k + 2; the target's own LM head predicts t + 1 (the *root*). Each head is ``num_layers``
ResBlocks (x + SiLU(Linear(x)), weight zero-initialised) followed by a projection to the
vocabulary: its own (upstream format) or the target's lm_head shared by all heads (compact format,
computed as one matmul so the projection weights are read once per step).

One step, with the root r already chosen and the prefix of length L in the KV cache:

1. the heads' top-k tokens (from the hidden state of the last accepted token) fill the tree nodes
   (``build_tree_buffers``: node 0 is r, a node at depth d holds head d-1's top-k token);
2. the target runs once over the n tree tokens at positions L + depth with a 4-D mask in which
   each node sees the prefix, its ancestors and itself (a ``visible`` pattern, tools.engine.backend);
3. acceptance picks the longest accepted root-to-leaf path; the KV cache keeps only that path
   (``Backend.keep_positions``); the target's token after the path becomes the next
   root, and the hidden state of the path's last node feeds the heads for the next step.

Acceptance:

- greedy (temperature 0): a candidate is accepted when it equals the target's argmax at its
  parent, so the output is exactly the target's greedy output;
- typical (temperature > 0): candidate x under parent distribution p is accepted when
  p(x) > min(posterior_threshold, posterior_alpha * exp(-H(p))), p being the target's warped
  distribution (temperature, top-k, top-p); among the longest accepted paths the most likely one
  wins. The token the target adds after the path (and the first token) is sampled from p cut to
  that same typical set. Typical acceptance is lossy by design: the output does not follow the
  target's sampling distribution exactly (the result says so in ``extra``).

Cost gate (``MedusaParams.pass_costs``, set by the sizing from this machine's cost curve;
tools.engine.gate.StepGate): a step is plain (the root alone, the heads not run) while the recent tree
steps gave fewer tokens than their pass and the heads' reads cost, a tree step again every 16; none at
all where even a fully accepted tree could not gain 25%. Its record starts from the fitted tree's tokens
per step where the tree is that one or a part of it (``fitted_prior``), else from a trial of full steps.
The output is the same either way.

Counters: per step the *proposed path length* is the tree depth used that step and the *accepted
candidate tokens* are the accepted path's length without the root; ``tokens_drafted`` and
``tokens_accepted`` sum them over steps, so the acceptance rate (accepted candidate tokens /
proposed path length, summed over steps) is ``tokens_accepted / tokens_drafted``. Each step adds
accepted + 1 tokens.

Hidden states come from ``Backend.hidden`` (for transformers the base model's ``last_hidden_state``,
after the final norm) and ``Backend.lm_head`` gives the logits; in transformers 5.24
``output_hidden_states=True`` also ties ``hidden_states[-1]`` to that post-norm state, but it
materialises every layer's output.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from tools.engine import cpu_gemm
from tools.engine.backend import Backend, as_backend
from tools.engine.gate import StepGate, weights_ratio
from tools.engine.lookup_branch import LookupBranch, graft_paths, path_children, shared_prefix
from tools.engine.loop import DecodeStep, as_input_ids, decode, sync
from tools.engine.medusa_trees import AUTO, resolve_tree, validate_choices
from tools.engine.sampling import greedy_tokens, make_generator, sample, warp_probs
from tools.engine.types import DecodeResult, GenerationSettings, StepTally
from tools.engine.params import MedusaParams  # noqa: F401  (re-exported: part of this module's API)
from tools.engine.upstream_status import upstream_backend_status
from tools.errors import DependencyError, ParameterError, VocabularyMismatchError

TYPICAL_NOTE = (
    "typical acceptance is lossy by design: tokens are accepted when the target finds them typical "
    "(p > min(threshold, alpha*exp(-entropy))), so the output does not follow the target's sampling "
    "distribution exactly; use temperature 0 for output identical to the baseline"
)




# ---------------------------------------------------------------------------------------- heads
class ResBlock(nn.Module):
    """x + SiLU(Linear(x)); the weight starts at zero so a fresh block is the identity plus SiLU(bias)."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.linear = nn.Linear(hidden_size, hidden_size)
        nn.init.zeros_(self.linear.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + F.silu(self.linear(x))


class MedusaHeads(nn.Module):
    """``num_heads`` Medusa heads of ``num_layers`` ResBlocks each, then a vocabulary projection.

    With ``shared_projection`` the heads use the target's lm_head (``attach(model)`` binds it; its
    weights are not part of this module's state); otherwise each head has its own bias-free
    Linear(hidden_size, vocab_size) as in upstream checkpoints.
    """

    def __init__(self, hidden_size: int, vocab_size: int, num_heads: int, num_layers: int = 1,
                 shared_projection: bool = True):
        super().__init__()
        for name, value, low in (("hidden_size", hidden_size, 1), ("vocab_size", vocab_size, 1),
                                 ("num_heads", num_heads, 1), ("num_layers", num_layers, 0)):
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ParameterError(f"Medusa heads need an integer {name} >= {low}, got {value!r}")
        self.hidden_size, self.vocab_size = hidden_size, vocab_size
        self.num_heads, self.num_layers = num_heads, num_layers
        self.shared_projection = shared_projection
        self.blocks = nn.ModuleList(
            nn.Sequential(*[ResBlock(hidden_size) for _ in range(num_layers)]) for _ in range(num_heads)
        )
        self.projections = None if shared_projection else nn.ModuleList(
            nn.Linear(hidden_size, vocab_size, bias=False) for _ in range(num_heads)
        )
        self._base: tuple = ()  # (the target's lm_head,) once attached; a tuple keeps it out of state_dict
        self.tree_choices: list[list[int]] | None = None  # a tree fitted to these heads, if the checkpoint has one
        self.tree_tokens: float | None = None  # tokens a step of that tree gave on the prompts it was fitted on

    def attach(self, model) -> "MedusaHeads":
        """Check the heads fit ``model`` (hidden size, vocabulary) and bind its lm_head; return self."""
        head = model.get_output_embeddings()
        rows, cols = cpu_gemm.weight_shape(head)
        hidden = getattr(model.config, "hidden_size", cols)
        if hidden != self.hidden_size or cols != self.hidden_size:
            raise ParameterError(
                f"the Medusa heads expect hidden size {self.hidden_size}, the model has {hidden}",
                hint="use heads trained for this target model (`specpilot medusa train`)",
            )
        if rows != self.vocab_size:
            raise VocabularyMismatchError(
                f"the Medusa heads project to {self.vocab_size} tokens, the model's lm_head has {rows}",
                hint="use heads trained for this target model",
            )
        self._base = (head,)
        return self

    @property
    def base_head(self) -> nn.Module:
        if not self._base:
            raise ParameterError("these Medusa heads share the target's lm_head: call heads.attach(model) first")
        return self._base[0]

    def features(self, hidden: torch.Tensor, num_heads: int | None = None) -> torch.Tensor:
        """ResBlock outputs of the first ``num_heads`` heads, stacked: [heads, *hidden.shape]."""
        n = self.num_heads if num_heads is None else num_heads
        if self.num_layers:
            w = self.blocks[0][0].linear.weight
            x = hidden.to(device=w.device, dtype=w.dtype)  # a model spread over devices ends elsewhere
        else:
            x = hidden
        return torch.stack([self.blocks[h](x) for h in range(n)])

    def forward(self, hidden: torch.Tensor, num_heads: int | None = None) -> torch.Tensor:
        """Logits of the first ``num_heads`` heads: [heads, *hidden.shape[:-1], vocab]."""
        feats = self.features(hidden, num_heads)
        if self.shared_projection:
            head = self.base_head
            return head(feats.to(cpu_gemm.weight_dtype(head)))  # one matmul for all heads: weights read once
        return torch.stack([self.projections[h](feats[h].to(self.projections[h].weight.dtype))
                            for h in range(feats.shape[0])])

    def topk(self, hidden: torch.Tensor, depth: int, k: int) -> torch.Tensor:
        """Top-k token ids of the first ``depth`` heads for one hidden state [hidden]: LongTensor [depth, k]."""
        if depth == 0:
            return torch.empty(0, k, dtype=torch.long, device=hidden.device)
        return torch.topk(self(hidden, depth), k, dim=-1).indices


# ---------------------------------------------------------------------------------------- tree
@dataclass(frozen=True)
class TreeBuffers:
    """The fixed tensors of one tree; n = number of choices + 1 (the root), D = depth.

    - ``visible`` bool [n, n]: node i sees node j (j is i or an ancestor of i; everyone sees the root);
    - ``tree_indices`` long [n]: where each node's token comes from in the candidate vector
      ``[root, head0 top-k ..., head1 top-k ..., ...]`` (``1 + (depth-1) * topk + rank``; 0 for the root);
    - ``position_ids`` long [n]: depth of each node (added to the prefix length);
    - ``retrieve_indices`` long [paths, D + 1]: node indices of each root-to-leaf path, padded with -1.
    """

    choices: list
    visible: torch.Tensor
    tree_indices: torch.Tensor
    position_ids: torch.Tensor
    retrieve_indices: torch.Tensor
    topk: int
    depth: int

    @property
    def n(self) -> int:
        return int(self.visible.shape[0])

    def to(self, device) -> "TreeBuffers":
        return replace(self, visible=self.visible.to(device), tree_indices=self.tree_indices.to(device),
                       position_ids=self.position_ids.to(device), retrieve_indices=self.retrieve_indices.to(device))


def build_tree_buffers(choices) -> TreeBuffers:
    """Build the tree buffers from a prefix-closed list of choices (see TreeBuffers). Nodes are
    ordered by (depth, ranks), so an ancestor always has a lower index than its descendants. An
    empty list gives the root alone (one plain decoding step)."""
    nodes = sorted(validate_choices(choices), key=lambda c: (len(c), c))
    index = {tuple(c): i + 1 for i, c in enumerate(nodes)}
    n = len(nodes) + 1
    depth = max((len(c) for c in nodes), default=0)
    topk = max((r for c in nodes for r in c), default=0) + 1

    visible = torch.eye(n, dtype=torch.bool)
    visible[:, 0] = True
    tree_indices = torch.zeros(n, dtype=torch.long)
    position_ids = torch.zeros(n, dtype=torch.long)
    for i, c in enumerate(nodes, start=1):
        for d in range(1, len(c)):
            visible[i, index[tuple(c[:d])]] = True
        tree_indices[i] = 1 + (len(c) - 1) * topk + c[-1]
        position_ids[i] = len(c)

    parents = {tuple(c[:-1]) for c in nodes}
    paths = [[0] + [index[tuple(c[:d])] for d in range(1, len(c) + 1)] for c in nodes if tuple(c) not in parents]
    paths = [p + [-1] * (depth + 1 - len(p)) for p in paths] or [[0]]
    return TreeBuffers(nodes, visible, tree_indices, position_ids, torch.tensor(paths, dtype=torch.long), topk, depth)


# ---------------------------------------------------------------------------------------- acceptance
def _path_tokens(tree_tokens: torch.Tensor, retrieve: torch.Tensor):
    """(valid [P, D], child node [P, D], parent node [P, D], child token [P, D]) for every path."""
    child = retrieve[:, 1:]
    valid = child >= 0
    child = child.clamp_min(0)
    parent = retrieve[:, :-1].clamp_min(0)
    return valid, child, parent, tree_tokens[child]


def accept_greedy_tree(tree_tokens: torch.Tensor, target_next: torch.Tensor, retrieve: torch.Tensor) -> tuple[int, int]:
    """Greedy acceptance: return (best path index, accepted candidate tokens on it).

    ``tree_tokens`` [n] node tokens, ``target_next`` [n] the target's argmax after each node,
    ``retrieve`` [paths, D + 1] from TreeBuffers. A node is accepted when its token equals the
    target's choice at its parent and all its ancestors were accepted.
    """
    valid, _, parent, tokens = _path_tokens(tree_tokens, retrieve)
    match = valid & (tokens == target_next[parent])
    accepted = match.long().cumprod(dim=1).sum(dim=1)
    best = int(accepted.argmax())
    return best, int(accepted[best])


def typical_thresholds(probs: torch.Tensor, posterior_threshold: float, posterior_alpha: float) -> torch.Tensor:
    """Per-row acceptance threshold min(threshold, alpha * exp(-H(p))) for probabilities [rows, vocab]."""
    entropy = torch.special.entr(probs.float()).sum(dim=-1)
    return torch.clamp(posterior_alpha * torch.exp(-entropy), max=posterior_threshold)


def accept_typical_tree(tree_tokens: torch.Tensor, probs: torch.Tensor, retrieve: torch.Tensor,
                        posterior_threshold: float, posterior_alpha: float) -> tuple[int, int]:
    """Typical acceptance: return (best path index, accepted candidate tokens on it).

    ``probs`` [n, vocab] is the target's distribution after each node. A node is accepted when
    p_parent(token) > min(threshold, alpha * exp(-H(p_parent))) and its ancestors were accepted;
    the longest accepted path wins, ties broken by the highest likelihood of the accepted tokens.
    """
    valid, _, parent, tokens = _path_tokens(tree_tokens, retrieve)
    thresholds = typical_thresholds(probs, posterior_threshold, posterior_alpha)
    cand_p = probs[parent, tokens].float()
    match = valid & (cand_p > thresholds[parent])
    accepted = match.long().cumprod(dim=1).sum(dim=1)
    longest = int(accepted.max()) if accepted.numel() else 0
    if longest == 0:
        return 0, 0
    ties = torch.nonzero(accepted == longest).flatten()
    likelihood = torch.log(cand_p[ties, :longest]).sum(dim=1)
    return int(ties[likelihood.argmax()]), longest


def pick_token(logits: torch.Tensor, settings: GenerationSettings, params: MedusaParams, generator) -> int:
    """The target's own next token from one row of logits: argmax when greedy, else a sample from
    the warped distribution cut to the typical set (the tokens typical acceptance would accept)."""
    if settings.greedy:
        return int(greedy_tokens(logits))
    p = warp_probs(logits, settings)
    thr = typical_thresholds(p[None], params.posterior_threshold, params.posterior_alpha)[0]
    typical = torch.where(p > thr, p, torch.zeros_like(p))
    return int(sample(typical if float(typical.sum()) > 0 else p, generator))


# ---------------------------------------------------------------------------------------- decoding
def verify_tree(backend, tree: TreeBuffers, tree_tokens: torch.Tensor, cache) -> tuple[torch.Tensor, torch.Tensor]:
    """One target forward over the tree tokens [n] after the cached prefix; return (hidden [n, h], logits [n, vocab])."""
    backend = as_backend(backend)
    positions = (tree.position_ids + backend.cache_length(cache))[None]
    hidden = backend.hidden(tree_tokens[None], cache, positions, tree.visible)
    return hidden, backend.lm_head(hidden)


def medusa_step(backend, heads: MedusaHeads, tree: TreeBuffers, root: int, hidden_last: torch.Tensor, cache,
                settings: GenerationSettings, params: MedusaParams, generator, extend=None):
    """One Medusa step: propose, verify, accept, keep the accepted path in the cache.

    ``extend(tree, tree_tokens) -> (tree, tree_tokens)`` may add nodes to the proposed tree (a lookup branch).
    Returns (new tokens = accepted candidates + the next root, accepted count, hidden state of the
    last accepted node).
    """
    backend = as_backend(backend)
    device = hidden_last.device
    proposals = heads.topk(hidden_last, tree.depth, tree.topk).flatten().to(device)  # none for a root-only tree
    candidates = torch.cat([torch.tensor([root], device=device), proposals])
    tree_tokens = candidates[tree.tree_indices]
    if extend is not None:
        tree, tree_tokens = extend(tree, tree_tokens)
    prefix = backend.cache_length(cache)
    hidden, logits = verify_tree(backend, tree, tree_tokens, cache)
    if settings.greedy:
        best, accepted = accept_greedy_tree(tree_tokens, greedy_tokens(logits), tree.retrieve_indices)
    else:
        probs = warp_probs(logits, settings)
        best, accepted = accept_typical_tree(tree_tokens, probs, tree.retrieve_indices,
                                             params.posterior_threshold, params.posterior_alpha)
    path = tree.retrieve_indices[best, : accepted + 1]
    last = int(path[-1])
    following = pick_token(logits[last], settings, params, generator)
    backend.keep_positions(cache, prefix, path)
    return tree_tokens[path[1:]].tolist() + [following], accepted, hidden[last]


def heads_overhead(heads: MedusaHeads, backend: Backend) -> float:
    """What the heads read per step against a target pass: their own weights, and the shared projection
    once (the heads' logits are one matmul against the target's lm_head)."""
    extra = sum(p.numel() for p in heads.parameters())
    if heads.shared_projection:
        extra += heads.vocab_size * heads.hidden_size
    return weights_ratio(extra, getattr(backend, "model", None))


def fitted_prior(heads: MedusaHeads, choices: list[list[int]]) -> float | None:
    """Tokens a step of the tree ``choices`` is expected to give, from the tree fitted to the heads: that tree's
    own figure when ``choices`` is it, and the same figure as an upper bound when ``choices`` is part of it (the
    sizing cuts it where multi-token passes cost more: a part accepts no more than the whole); else None."""
    fitted, tokens = getattr(heads, "tree_choices", None), getattr(heads, "tree_tokens", None)
    if not fitted or tokens is None:
        return None
    whole = {tuple(c) for c in fitted}
    return tokens if all(tuple(c) in whole for c in choices) else None


class MedusaStep(DecodeStep):
    """Medusa's state: the tree (cut to the budget near the end), the cache and the last hidden state."""

    def __init__(self, backend: Backend, heads: MedusaHeads, settings: GenerationSettings, params: MedusaParams):
        self.backend, self.heads, self.settings, self.params = backend, heads, settings, params
        device = backend.device
        self.tree_name, self.choices = resolve_tree(params.tree, heads.num_heads, device.type,
                                                    getattr(heads, "tree_choices", None))
        self.full = build_tree_buffers(self.choices).to(device)
        self.trees = {self.full.depth: self.full}
        self.positions = self.full.depth
        self.generator = make_generator(settings, device)
        self.cache = self.hidden = None
        fitted = fitted_prior(heads, self.choices)
        self.overhead = heads_overhead(heads, backend) if params.pass_costs else 0.0
        self.gate = (StepGate(params.pass_costs, self.full.depth + 1, self.full.n, self.overhead,
                              prior_tokens=fitted) if params.pass_costs else None)
        self.expected = fitted or 1.0  # tokens a step of the heads' tree is expected to give (for the lookup branch)
        self.branch = LookupBranch(params.medusa_lookup, params.pass_costs)
        self.host: dict[int, tuple] = {}  # each tree's node children and buffers on the host, by its depth
        self.text: list[int] = []  # prompt and output so far (what the branch searches)

    def prefill(self, input_ids: torch.Tensor) -> int:
        self.cache = self.backend.new_cache()
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)[None]
        self.hidden = self.backend.hidden(input_ids, self.cache, positions)[-1]
        first = pick_token(self.backend.lm_head(self.hidden[None])[0], self.settings, self.params, self.generator)
        self.text = input_ids[0].tolist() + [first]
        return first

    def step(self, out: list[int], remaining: int) -> tuple[list[int], int, range]:
        depth = min(self.full.depth, remaining - 1)  # never propose past the budget
        full = depth > 0 and (self.gate is None or self.gate.take_full())
        depth = depth if full else 0  # declined: the root alone, a plain one-token step
        if depth not in self.trees:
            self.trees[depth] = build_tree_buffers([c for c in self.choices if len(c) <= depth]).to(self.backend.device)
        tree, grafted = self.trees[depth], []
        extend = partial(self._graft, depth=depth, full=full, room=remaining - 1, grafted=grafted)
        new, accepted, self.hidden = medusa_step(self.backend, self.heads, tree, out[-1], self.hidden, self.cache,
                                                 self.settings, self.params, self.generator, extend)
        self.text.extend(new)
        n_match, draft, shared, size = grafted[0] if grafted else (0, [], 0, tree.n)
        if draft:
            self.branch.record(n_match, draft, shared, new[:-1])
        if full and self.gate is not None:
            self.gate.record(len(new), size)
        elif draft and self.gate is not None:
            self.gate.untimed()  # a declined step that verified the branch: neither a plain step nor a tree step
        return new, accepted, range(1, max(tree.depth, len(draft)) + 1)  # the proposed paths' depths

    def _graft(self, tree: TreeBuffers, tree_tokens: torch.Tensor, depth: int, full: bool, room: int,
               grafted: list) -> tuple[TreeBuffers, torch.Tensor]:
        """The tree with the lookup branch merged in, cut to what pays (``grafted`` gets (match length, the tokens
        merged, how many of them the tree held, the tree's new size)); the tree as it was without a branch."""
        if self.gate is not None and self.gate.timing:  # the plain step the gate times: nothing else in it
            return tree, tree_tokens
        n_match, draft = self.branch.draft(self.text, room)
        if not draft:
            return tree, tree_tokens
        tokens = tree_tokens.tolist()
        if depth not in self.host:  # the tree's buffers are fixed: read them back from the device once
            retrieve = tree.retrieve_indices.cpu()
            self.host[depth] = (path_children(retrieve, tree.n), tree.visible.cpu(), tree.position_ids.tolist(),
                                retrieve)
        children, *buffers = self.host[depth]
        shared = shared_prefix(children.__getitem__, tokens.__getitem__, draft)
        expect, overhead = (self.expected, self.overhead) if full else (1.0, 0.0)
        draft = draft[: self.branch.length(draft, n_match, shared, expect, tree.n, overhead)]
        if not draft:
            return tree, tree_tokens
        visible, positions, retrieve, new = graft_paths(buffers[0], buffers[1], buffers[2], tokens, children, draft,
                                                        tree_tokens.device)
        grafted.append((n_match, draft, shared, tree.n + len(new)))
        if not new:
            return tree, tree_tokens
        tree = replace(tree, visible=visible, position_ids=positions, retrieve_indices=retrieve,
                       depth=retrieve.shape[1] - 1)
        return tree, torch.cat([tree_tokens, torch.tensor(new, dtype=tree_tokens.dtype, device=tree_tokens.device)])

    def extra(self, out: list[int], tally: StepTally, stopped: str) -> dict:
        heads, params, lossy = self.heads, self.params, not self.settings.greedy
        extra = {
            "tree": self.tree_name, "tree_nodes": self.full.n, "tree_depth": self.full.depth,
            "num_heads": heads.num_heads, "num_layers": heads.num_layers, "shared_projection": heads.shared_projection,
            "backend": "builtin", "acceptance": "typical" if lossy else "greedy", "lossy": lossy,
            "posterior_threshold": params.posterior_threshold, "posterior_alpha": params.posterior_alpha,
            "pass_costs": params.pass_costs, "declined_steps": self.gate.declined if self.gate is not None else 0,
            "medusa_lookup": params.medusa_lookup, "lookup_steps": self.branch.steps,
            "looked_up": self.branch.looked_up,
        }
        if lossy:
            extra["note"] = TYPICAL_NOTE
        return extra


def generate(model, heads: MedusaHeads, prompt_ids, settings: GenerationSettings,
             params: MedusaParams | None = None) -> DecodeResult:
    """Generate with Medusa heads and tree attention; return a DecodeResult with method "medusa".

    ``model`` is a transformers causal LM, a LoadedModel or a TransformersBackend; ``heads`` is a
    MedusaHeads (see tools.medusa.checkpoint.load_heads). Greedy settings give exactly the baseline's
    output; temperature > 0 uses typical acceptance (lossy, marked in ``extra``).
    """
    params = params or MedusaParams()
    backend = as_backend(model)
    if heads.shared_projection:
        heads.attach(backend.model)  # the heads share the transformers model's lm_head module
    return decode(backend, prompt_ids, settings, MedusaStep(backend, heads, settings, params), "medusa")


# ---------------------------------------------------------------------------------------- upstream backend
def generate_upstream(heads_ref: str, prompt_ids, settings: GenerationSettings,
                      params: MedusaParams | None = None) -> DecodeResult:
    """Run upstream's ``medusa_generate`` (the ``--backend upstream`` path) for comparison.

    ``heads_ref`` is an upstream checkpoint (folder or hub id) naming its base model. Raises
    DependencyError with the reason when medusa-llm cannot run here.
    """
    ok, reason = upstream_backend_status()
    if not ok:
        raise DependencyError(f"the upstream Medusa backend is unavailable: {reason}",
                              hint="use the built-in backend (the default), which needs no extra package")
    params = params or MedusaParams()
    from medusa.model.medusa_model import MedusaModel  # noqa: PLC0415 (optional dependency)

    model = MedusaModel.from_pretrained(heads_ref)
    device = next(model.parameters()).device
    ids = as_input_ids(prompt_ids, device)
    choices = validate_choices(params.tree) if isinstance(params.tree, list) else None
    t0 = time.perf_counter()
    steps, text = 0, ""
    for steps, chunk in enumerate(model.medusa_generate(
            ids, temperature=settings.temperature, max_steps=settings.max_new_tokens, medusa_choices=choices,
            posterior_threshold=params.posterior_threshold, posterior_alpha=params.posterior_alpha), start=1):
        text = chunk["text"]
    sync(device)
    out = model.get_tokenizer()(text, add_special_tokens=False)["input_ids"][: settings.max_new_tokens]
    return DecodeResult(method="medusa", output_ids=out, prefill_s=0.0, decode_s=time.perf_counter() - t0,
                        steps=steps, target_forwards=steps + 1, text=text,
                        extra={"backend": "upstream", "lossy": settings.temperature > 0,
                               "note": "upstream returns text; token ids are re-tokenised and timings include prefill"})
