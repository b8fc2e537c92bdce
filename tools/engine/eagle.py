"""EAGLE: a one-layer draft head over the target's own features, a dynamic draft tree, one target pass.

EAGLE (Li et al., arXiv 2401.15077) drafts at the feature level: a small head reads the target's
final hidden state at position t together with the embedding of the token at t + 1 and predicts the
hidden state at t + 1; the target's own LM head (here only the rows of a reduced draft vocabulary)
turns that into draft tokens. EAGLE-2 (arXiv 2406.16858) grows the draft tree by the head's
confidence: at each depth the ``topk`` most likely frontier nodes are expanded by one batched head
pass, and the ``tree_nodes`` nodes with the highest path probability are verified. EAGLE-3 (arXiv
2503.01840) trains the head on its own predictions (training-time test); tools.medusa.eagle_train
does that for the first depths. A head may also fuse the states entering some inner layers of the
target with the final feature at real positions (EAGLE-3's low and middle layers, ``fuse_layers``);
the backend then returns them with each verification pass (``Backend.hidden_layers``).

Exactness does not depend on the head: the target verifies the tree in one forward pass under a
tree mask and only tokens the target itself picks are kept (greedy: the argmax path; sampling: the
drafted children are tried in order of the head's confidence, each kept with the target's
probability, rejected ones removed from p — lossless for any deterministic draft, see
tools.engine.draft_tree). The head's own KV cache holds one row per accepted position; tree rows
are dropped after each step.

A lookup branch (``EagleParams.eagle_lookup``): what followed the text's last 3, 2 or 1 tokens earlier in
the prompt or output (prompt lookup's search) is merged into the head's tree as one more deterministic
branch. With a priced pass it is cut to the length whose expected tokens (this run's acceptance of such
branches by match length, from prompt lookup's fitted prior) pay for the longer pass. The head is
calibrated on its own nodes only; the branch's tokens it did not draft are counted as ``looked_up``.
"""

from __future__ import annotations

import copy
import math
import os
import weakref
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from tools.engine import cpu_gemm
from tools.engine.backend import Backend, as_backend
from tools.engine.draft_tree import DraftTree, accept_greedy_tree, accept_sampling_tree, add_draft
from tools.engine.gate import StepGate, pass_cost, weights_ratio
from tools.engine.loop import DecodeStep, decode, next_token
from tools.engine.lookup_branch import LookupBranch, shared_prefix
from tools.engine.params import EagleParams
from tools.engine.sampling import make_generator, warp_probs
from tools.engine.types import DecodeResult, GenerationSettings, StepTally
from tools.errors import ParameterError


@dataclass(frozen=True)
class EagleConfig:
    """Shape of a draft head (the attention shape is the target's; the MLP may be narrower)."""

    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    rope_theta: float
    rms_eps: float
    draft_vocab: int
    fuse_layers: tuple[int, ...] = ()  # inner layers fused with the final feature at the root (EAGLE-3's idea)

    def __post_init__(self):
        object.__setattr__(self, "fuse_layers", tuple(int(i) for i in self.fuse_layers))


def config_for(target_config, draft_vocab: int, intermediate_size: int | None = None,
               fuse_layers: tuple[int, ...] = ()) -> EagleConfig:
    """A head shaped like one decoder layer of the target (``intermediate_size`` may be narrower)."""
    c = target_config
    heads = c.num_attention_heads
    rope = (getattr(c, "rope_parameters", None) or {}).get("rope_theta") or getattr(c, "rope_theta", None) or 10000.0
    return EagleConfig(hidden_size=c.hidden_size, num_heads=heads,
                       num_kv_heads=getattr(c, "num_key_value_heads", None) or heads,
                       head_dim=getattr(c, "head_dim", None) or c.hidden_size // heads,
                       intermediate_size=intermediate_size or c.intermediate_size, rope_theta=float(rope),
                       rms_eps=float(getattr(c, "rms_norm_eps", 1e-6)), draft_vocab=draft_vocab,
                       fuse_layers=tuple(fuse_layers))


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(size)), eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def rope(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotary embedding (rotate-half form) of x [B, heads, n, d] at positions [n] or [B, n]."""
    d = x.shape[-1]
    inv = 1.0 / theta ** (torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d)
    angles = positions.to(torch.float32)[..., None] * inv  # [.., n, d/2]
    angles = torch.cat([angles, angles], dim=-1)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    if cos.dim() == 3:  # [B, n, d] -> [B, 1, n, d]
        cos, sin = cos[:, None], sin[:, None]
    half = d // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


class EagleHead(nn.Module):
    """fc([embedding, feature]) -> one decoder layer -> the predicted next feature.

    ``draft_ids`` [draft_vocab] are the target token ids the head may propose (a reduced vocabulary:
    the draft logits are feature @ lm_head[draft_ids].T). With ``fuse_layers`` the feature of a real
    position (not the head's own prediction) is first fused with the hidden states entering those inner
    layers of the target: fuse([norm(inner)..., feature]), which starts as the feature alone."""

    def __init__(self, config: EagleConfig, draft_ids: torch.Tensor):
        super().__init__()
        c, h = config, config.hidden_size
        self.config = c
        self.fc = nn.Linear(2 * h, h)
        self.q_proj = nn.Linear(h, c.num_heads * c.head_dim)
        self.k_proj = nn.Linear(h, c.num_kv_heads * c.head_dim)
        self.v_proj = nn.Linear(h, c.num_kv_heads * c.head_dim)
        self.o_proj = nn.Linear(c.num_heads * c.head_dim, h, bias=False)
        self.post_norm = RMSNorm(h, c.rms_eps)
        self.gate_proj = nn.Linear(h, c.intermediate_size, bias=False)
        self.up_proj = nn.Linear(h, c.intermediate_size, bias=False)
        self.down_proj = nn.Linear(c.intermediate_size, h, bias=False)
        if draft_ids.numel() != c.draft_vocab:
            raise ParameterError(f"the draft vocabulary has {draft_ids.numel()} ids, the config says {c.draft_vocab}")
        self.register_buffer("draft_ids", draft_ids.to(torch.long), persistent=True)
        if c.fuse_layers:
            self.fuse_norms = nn.ModuleList(RMSNorm(h, c.rms_eps) for _ in c.fuse_layers)
            self.fuse = nn.Linear((len(c.fuse_layers) + 1) * h, h, bias=False)
            with torch.no_grad():
                self.fuse.weight.zero_()
                self.fuse.weight[:, -h:] = torch.eye(h)

    def fused(self, feats: torch.Tensor, inner: torch.Tensor) -> torch.Tensor:
        """Real positions' features [.., n, h] fused with the inner layers' states [.., n, layers * h]."""
        h = self.config.hidden_size
        parts = [norm(inner[..., i * h: (i + 1) * h].to(feats.dtype)) for i, norm in enumerate(self.fuse_norms)]
        return self.fuse(torch.cat([*parts, feats], dim=-1))

    def init_identity(self) -> None:
        """Start from 'the next feature is this feature': fc passes the feature half through."""
        h = self.config.hidden_size
        with torch.no_grad():
            self.fc.weight.mul_(0.1)
            self.fc.weight[:, h:] += torch.eye(h)
            self.fc.bias.zero_()

    def forward(self, feats: torch.Tensor, embeds: torch.Tensor, positions: torch.Tensor, past_k: torch.Tensor,
                past_v: torch.Tensor, mask: torch.Tensor, inner: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """feats, embeds [B, n, h] at positions [n] or [B, n]; past_k/v [B, kv_heads, L, d]; mask bool
        [n, L + n] or [B, n, L + n] (True: may attend); ``inner`` [B, n, layers * h] the fused layers' states
        of real positions (None: the rows are the head's own predictions). Returns (next features [B, n, h],
        k, v of the rows)."""
        c = self.config
        if inner is not None and c.fuse_layers:
            feats = self.fused(feats, inner)
        b, n, _ = feats.shape
        x = self.fc(torch.cat([embeds, feats], dim=-1))
        q = rope(self.q_proj(x).view(b, n, c.num_heads, c.head_dim).transpose(1, 2), positions, c.rope_theta)
        k = rope(self.k_proj(x).view(b, n, c.num_kv_heads, c.head_dim).transpose(1, 2), positions, c.rope_theta)
        v = self.v_proj(x).view(b, n, c.num_kv_heads, c.head_dim).transpose(1, 2)
        keys, values = torch.cat([past_k, k], dim=2), torch.cat([past_v, v], dim=2)
        group = c.num_heads // c.num_kv_heads
        keys, values = keys.repeat_interleave(group, dim=1), values.repeat_interleave(group, dim=1)
        m = mask[None, None] if mask.dim() == 2 else mask[:, None]
        attn = F.scaled_dot_product_attention(q, keys, values, attn_mask=m)
        hidden = x + self.o_proj(attn.transpose(1, 2).reshape(b, n, c.num_heads * c.head_dim))
        normed = self.post_norm(hidden)
        hidden = hidden + self.down_proj(F.silu(self.gate_proj(normed)) * self.up_proj(normed))
        return hidden, k, v

    def empty_kv(self, device, dtype) -> tuple[torch.Tensor, torch.Tensor]:
        c = self.config
        shape = (1, c.num_kv_heads, 0, c.head_dim)
        return torch.empty(shape, device=device, dtype=dtype), torch.empty(shape, device=device, dtype=dtype)


# ---------------------------------------------------------------------------------------- drafting
@dataclass
class _Grown:
    """Nodes of a grown draft tree before selection (node 0 is the root)."""

    tokens: list[int]
    parents: list[int]
    depths: list[int]
    scores: list[float]


def select_tree(grown: _Grown, nodes: int) -> DraftTree:
    """The ``nodes`` drafted nodes with the highest path log-probability, closed under ancestors, as a
    DraftTree whose children are in order of confidence (pure)."""
    order = sorted(range(1, len(grown.tokens)), key=lambda i: (-grown.scores[i], grown.depths[i], i))
    keep: set[int] = set()
    for i in order:
        if len(keep) >= nodes:
            break
        while i and i not in keep:
            keep.add(i)
            i = grown.parents[i]
    ranked = sorted(keep, key=lambda i: (grown.depths[i], -grown.scores[i], i))
    index, score = {0: 0}, [0.0]
    tree = DraftTree([grown.tokens[0]], [-1], [0], [[]])
    for i in ranked:
        score.append(grown.scores[i])
        parent = index[grown.parents[i]]
        index[i] = len(tree.tokens)
        tree.tokens.append(grown.tokens[i])
        tree.parents.append(parent)
        tree.depths.append(grown.depths[i])
        tree.children.append([])
        tree.children[parent].append(index[i])
    for children in tree.children:  # most confident first: the order sampling verification tries them
        children.sort(key=lambda j: -score[j])
    return tree


def trimmed_size(grown: _Grown, nodes: int, costs: list[float], overhead: float, calibration: float) -> int:
    """How many of the ``nodes`` most probable drafted nodes a step should verify (pure): the count (ancestors
    included, as :func:`select_tree` keeps them) with the most expected tokens per unit of the step's cost.
    A node is expected to be kept with its path probability times ``calibration`` (what this run's steps
    accepted against what their trees predicted); the step costs the target's pass over the root and the
    nodes (``costs``: this machine's curve) plus ``overhead`` (the head's passes, already spent)."""
    order = sorted(range(1, len(grown.tokens)), key=lambda i: (-grown.scores[i], grown.depths[i], i))
    keep: set[int] = set()
    mass, best, best_rate = 0.0, 1, 0.0
    for i in order:
        if len(keep) >= nodes:
            break
        while i and i not in keep:
            keep.add(i)
            mass += math.exp(grown.scores[i])
            i = grown.parents[i]
        rate = (1.0 + calibration * mass) / (pass_cost(costs, len(keep) + 1) + overhead)
        if rate > best_rate + 1e-12:
            best, best_rate = len(keep), rate
    return best


CALIBRATION_PRIOR = 2.0  # predicted and accepted tokens a run's calibration starts from (ratio 1, weighing ~2 steps)
CALIBRATION_DECAY = 0.9  # each step's record weighs this much less at every later step


def head_overhead(head: EagleHead, backend: Backend, depth: int) -> float:
    """What the head reads per step against a target pass: its layer and its rows of the LM head, once per
    depth (the catch-up and one expansion per depth but the last); a fusion of inner layers once (the catch-up)."""
    c = head.config
    fusion = (len(c.fuse_layers) + 1) * c.hidden_size ** 2 + len(c.fuse_layers) * c.hidden_size if c.fuse_layers else 0
    extra = cpu_gemm.weights_numel(head) - fusion + c.draft_vocab * c.hidden_size
    return weights_ratio(extra * depth + fusion, getattr(backend, "model", None))


def expected_tokens(head: EagleHead, depth: int) -> float | None:
    """Tokens a step is expected to give from the head's held-out top-1 accuracy by depth (stored with a
    trained head): the target's own token plus a chain of ``depth`` guesses each kept while the ones
    before were (the tree's other branches only add to it); None for a head without those figures."""
    held_out = (getattr(head, "training_info", None) or {}).get("held_out") or {}
    hits = held_out.get("top1_by_depth")
    if not hits:
        return None
    total, chain = 1.0, 1.0
    for d in range(depth):
        chain *= float(hits[min(d, len(hits) - 1)])
        total += chain
    return total


# a head's packed copy and draft-logit product, kept while the head and its rows are unchanged (packing the
# layers of the shipped head took 0.2 s a run here: 7% of a short answer's time)
_PACKED: "weakref.WeakKeyDictionary[EagleHead, tuple]" = weakref.WeakKeyDictionary()
HEAD_ENV = "SPECPILOT_EAGLE_HEAD"  # "float32": the head drafts in float32 even beside a packed bfloat16 target


def head_dtype(device, target_dtype) -> torch.dtype:
    """The dtype the head drafts in: the target's bfloat16 where bfloat16 layers are packed for oneDNN on this
    CPU (half the bytes a draft pass reads, through the same fast products), else float32 (PyTorch's own
    bfloat16 products over a few rows are no faster, and on a GPU the head's passes are a small part of a step)."""
    if (target_dtype == torch.bfloat16 and cpu_gemm.wanted(device, torch.bfloat16)
            and os.environ.get(HEAD_ENV, "").strip().lower() != "float32"):
        return torch.bfloat16
    return torch.float32


def _packed(head: EagleHead, rows: torch.Tensor, device, dtype=torch.float32) -> tuple[EagleHead, object]:
    """The head to draft with and its draft logits' product ``feats -> feats @ rows.T``: on a CPU whose ``dtype``
    layers run in oneDNN a copy in ``dtype`` on packed oneDNN layers (the caller's head stays a plain, trainable
    float32 module), else the head itself."""
    if not cpu_gemm.wanted(device, dtype):
        return head, cpu_gemm.rows_product(rows.to(torch.float32))
    key = (dtype, rows.data_ptr(), rows._version, tuple((p.data_ptr(), p._version) for p in head.parameters()))
    kept = _PACKED.get(head)
    if kept is None or kept[0] != key:
        packed = copy.deepcopy(head).to(dtype)
        cpu_gemm.use_onednn(packed)  # the head's passes over a few rows, as the target's
        kept = _PACKED[head] = (key, packed, cpu_gemm.rows_product(rows.to(dtype)), rows)  # rows: kept alive
    return kept[1], kept[2]


class EagleStep(DecodeStep):
    """EAGLE's state: the target cache, the head's cache (one row per accepted position), the
    target features not yet read by the head, and the tokens so far."""

    def __init__(self, backend: Backend, head: EagleHead, settings: GenerationSettings, params: EagleParams):
        self.backend, self.head, self.settings, self.params = backend, head, settings, params
        rows = backend.head_rows(head.draft_ids.to(backend.device))
        if rows is None:
            raise ParameterError("EAGLE needs a target whose logits are hidden @ lm_head.T (no softcapping or scale)",
                                 hint="use another method for this model")
        self.head.to(device=backend.device, dtype=torch.float32).eval()
        self.dtype = head_dtype(backend.device, backend.dtype)
        self.head, self.rows = _packed(self.head, rows, backend.device, self.dtype)
        self.generator = make_generator(settings, backend.device)
        self.positions = params.depth
        self.gate = (StepGate(params.pass_costs, params.depth + 1, params.tree_nodes + 1,
                              head_overhead(head, backend, params.depth), expected_tokens(head, params.depth))
                     if params.pass_costs else None)
        # trimming (``params.trim`` with a cost curve): the head's cost per depth in one-token target passes, and
        # how the head's path probabilities compare with what this run's trees got accepted
        self.trim = bool(params.trim and params.pass_costs)
        # (a float32 head against a bfloat16 target reads twice the bytes per weight)
        self.depth_cost = (head_overhead(head, backend, 1) * torch.empty((), dtype=self.dtype).element_size()
                           / torch.empty((), dtype=backend.dtype).element_size())
        self.predicted = self.accepted = CALIBRATION_PRIOR
        self.depth_passes = self.verified_nodes = self.tree_steps = 0
        self.tree_mass = self.spent = 0.0
        self.branch = LookupBranch(params.eagle_lookup, params.pass_costs if self.trim else None)

    def _embed(self, ids: list[int]) -> torch.Tensor:
        embedded = self.backend.embed(torch.tensor([ids], device=self.backend.device))
        if embedded is None:
            raise ParameterError("EAGLE needs the target's input embeddings; this backend does not expose them",
                                 hint="run EAGLE on the transformers backend")
        return embedded.to(self.dtype)

    def prefill(self, input_ids: torch.Tensor) -> int:
        b = self.backend
        self.cache = b.new_cache()
        n = input_ids.shape[1]
        self.feats = self.inner = None
        feats, inner = self._target(input_ids, torch.arange(n, device=input_ids.device)[None])
        self._keep(feats, inner)
        first = next_token(b.lm_head(feats[-1:])[0], self.settings, self.generator)
        self.tokens = input_ids[0].tolist() + [first]
        self.read = 0
        self.dk, self.dv = self.head.empty_kv(b.device, self.dtype)
        return first

    def _target(self, ids: torch.Tensor, positions: torch.Tensor,
                visible: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The target's pass over ``ids``: its final hidden states, and the fused inner layers' states where the
        head has them (else None)."""
        layers = self.head.config.fuse_layers
        if layers:
            return self.backend.hidden_layers(ids, self.cache, positions, visible, layers)
        return self.backend.hidden(ids, self.cache, positions, visible), None

    def _keep(self, hidden: torch.Tensor, inner: torch.Tensor | None, rows: torch.Tensor | None = None) -> None:
        """Rows of a target pass (all when ``rows`` is None) whose features the head reads at its next catch-up."""
        feats = (hidden if rows is None else hidden[rows]).to(self.dtype)
        self.feats = feats if self.feats is None else torch.cat([self.feats, feats])
        if inner is not None:
            inner = inner if rows is None else inner[rows]
            self.inner = inner if self.inner is None else torch.cat([self.inner, inner])

    def _catch_up(self) -> torch.Tensor:
        """Feed the head the target features of positions read..m-1 (with the tokens that followed);
        return the predicted feature of the root's position m."""
        m, device = len(self.tokens) - 1, self.backend.device
        positions = torch.arange(self.read + 1, m + 1, device=device)
        n, past = m - self.read, self.dk.shape[2]
        mask = torch.ones(n, past + n, dtype=torch.bool, device=device)
        mask[:, past:] = torch.ones(n, n, dtype=torch.bool, device=device).tril()
        out, k, v = self.head(self.feats[None], self._embed(self.tokens[self.read + 1: m + 1]), positions,
                              self.dk, self.dv, mask, None if self.inner is None else self.inner[None])
        self.dk, self.dv, self.read = torch.cat([self.dk, k], 2), torch.cat([self.dv, v], 2), m
        self.feats = self.feats[:0]
        self.inner = None if self.inner is None else self.inner[:0]
        return out[0, -1]

    def _logp(self, feats: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(self.rows(feats).to(torch.float32), dim=-1)

    def grow(self, root_feat: torch.Tensor, depth: int) -> DraftTree:
        """EAGLE-2's dynamic tree: expand the ``topk`` most probable frontier nodes, one head pass per depth."""
        p, device, m = self.params, self.backend.device, len(self.tokens) - 1
        ids, passes_before = self.head.draft_ids, self.depth_passes
        grown = _Grown([self.tokens[-1]], [-1], [0], [0.0])
        frontier, feats = [0], root_feat[None]  # nodes to expand, and the feature each one predicts from
        tk, tv, tree_rows = self.dk[:, :, :0], self.dv[:, :, :0], []  # head cache rows of expanded nodes
        for d in range(1, depth + 1):
            logp = self._logp(feats)
            top = torch.topk(logp, p.topk, dim=-1)
            added = []
            for r, parent in enumerate(frontier):
                for s, j in zip(top.values[r].tolist(), top.indices[r].tolist()):
                    grown.tokens.append(int(ids[j]))
                    grown.parents.append(parent)
                    grown.depths.append(d)
                    grown.scores.append(grown.scores[parent] + s)
                    added.append(len(grown.tokens) - 1)
            if d == depth:
                break
            frontier = sorted(added, key=lambda i: -grown.scores[i])[: p.topk]
            if self.trim and self.calibration() * sum(math.exp(grown.scores[i]) for i in frontier) < self.depth_cost:
                break  # the next depth's nodes cannot give as many tokens as its head pass costs
            self.depth_passes += 1
            mask = self._expansion_mask(grown, frontier, tree_rows, device)
            out, k, v = self.head(feats[[added.index(i) // p.topk for i in frontier]][None],
                                  self._embed([grown.tokens[i] for i in frontier]),
                                  torch.full((len(frontier),), m + d, device=device),
                                  torch.cat([self.dk, tk], 2), torch.cat([self.dv, tv], 2), mask)
            tk, tv, tree_rows, feats = torch.cat([tk, k], 2), torch.cat([tv, v], 2), tree_rows + frontier, out[0]
        size = p.tree_nodes
        self.spent = self.depth_cost * (self.depth_passes - passes_before + 1)  # the catch-up's pass, the expansions
        if self.trim:
            size = trimmed_size(grown, p.tree_nodes, p.pass_costs, self.spent, self.calibration())
        tree = select_tree(grown, size)
        # what the verified nodes are expected to give: the path probabilities of the most probable ones
        self.tree_mass = sum(math.exp(x) for x in sorted(grown.scores[1:], reverse=True)[: tree.size - 1])
        return tree

    def calibration(self) -> float:
        """Tokens this run's trees got accepted per token their path probabilities predicted (decayed)."""
        return self.accepted / self.predicted

    def _expansion_mask(self, grown: _Grown, frontier: list[int], tree_rows: list[int], device) -> torch.Tensor:
        past = self.dk.shape[2]
        mask = torch.zeros(len(frontier), past + len(tree_rows) + len(frontier), dtype=torch.bool)
        mask[:, :past] = True
        where = {node: past + r for r, node in enumerate(tree_rows)}
        for r, node in enumerate(frontier):
            mask[r, past + len(tree_rows) + r] = True
            a = grown.parents[node]
            while a > 0:
                mask[r, where[a]] = True
                a = grown.parents[a]
        return mask.to(device)

    def step(self, out: list[int], remaining: int) -> tuple[list[int], int, range]:
        if remaining == 1 or (self.gate is not None and not self.gate.take_full()):
            return self._plain(), 0, range(0)  # the budget's last token needs no draft
        b, m = self.backend, len(self.tokens) - 1
        depth = min(self.params.depth, remaining - 1)
        tree = self.grow(self._catch_up(), depth)
        head_nodes = tree.size
        branch = self._graft(tree, remaining - 1)
        device = b.device
        ids = torch.tensor([tree.tokens], device=device)
        positions = (torch.tensor(tree.depths, device=device) + m)[None]
        hidden, inner = self._target(ids, positions, tree.visible().to(device))
        logits = b.lm_head(hidden)
        if self.settings.greedy:
            node, following = accept_greedy_tree(tree, logits.argmax(-1).tolist())
        else:
            node, following = accept_sampling_tree(tree, lambda i: warp_probs(logits[i], self.settings),
                                                   self.generator)
        path = tree.path_to(node)
        self._calibrate(head_nodes - 1, sum(i < head_nodes for i in path[1:]))
        if branch is not None:
            self.branch.record(*branch, [tree.tokens[i] for i in path[1:]])
        b.keep_positions(self.cache, m, torch.tensor(path, device=device))
        new = [tree.tokens[i] for i in path[1:]] + [following]
        self._keep(hidden, inner, torch.tensor(path, device=device))
        self.tokens.extend(new)
        if self.gate is not None:
            self.gate.record(len(new), len(tree.tokens))
        return new, len(path) - 1, range(1, max(tree.depths) + 1)

    def _graft(self, tree: DraftTree, room: int) -> tuple[int, list[int], int] | None:
        """Merge the lookup branch into ``tree``, cut to what pays; return (the match length, the tokens merged, how
        many of them the tree held already), None without a branch."""
        n, draft = self.branch.draft(self.tokens, room)
        if not draft:
            return None
        shared = shared_prefix(tree.children.__getitem__, tree.tokens.__getitem__, draft)
        expect = 1.0 + self.calibration() * self.tree_mass
        draft = draft[: self.branch.length(draft, n, shared, expect, tree.size, self.spent)]
        if not draft:
            return None
        add_draft(tree, draft)
        return n, draft, shared

    def _calibrate(self, nodes: int, accepted: int) -> None:
        """Record a verified tree of the head's ``nodes``: what their path probabilities expected (``tree_mass``) and
        how many of them were kept."""
        self.tree_steps += 1
        self.verified_nodes += nodes
        if self.tree_mass > 0:
            self.predicted = CALIBRATION_DECAY * self.predicted + self.tree_mass
            self.accepted = CALIBRATION_DECAY * self.accepted + accepted

    def _plain(self) -> list[int]:
        """A step the cost gate declined: the last token alone, as plain decoding takes it; its feature waits
        for the head's next catch-up (one batched head pass over every position it has not read)."""
        b, m = self.backend, len(self.tokens) - 1
        ids = torch.tensor([[self.tokens[-1]]], device=b.device)
        hidden, inner = self._target(ids, torch.tensor([[m]], device=b.device))
        following = next_token(b.lm_head(hidden[-1:])[0], self.settings, self.generator)
        self._keep(hidden, inner)
        self.tokens.append(following)
        return [following]

    def extra(self, out: list[int], tally: StepTally, stopped: str) -> dict:
        p, c = self.params, self.head.config
        return {"depth": p.depth, "topk": p.topk, "tree_nodes": p.tree_nodes, "draft_vocab": c.draft_vocab,
                "head_intermediate": c.intermediate_size, "lossy": False, "pass_costs": p.pass_costs,
                "declined_steps": self.gate.declined if self.gate is not None else 0, "trim": self.trim,
                "nodes_per_tree": self.verified_nodes / self.tree_steps if self.tree_steps else None,
                "expansions_per_tree": self.depth_passes / self.tree_steps if self.tree_steps else None,
                "eagle_lookup": p.eagle_lookup, "lookup_steps": self.branch.steps, "looked_up": self.branch.looked_up}


def generate(model, head: EagleHead, prompt_ids, settings: GenerationSettings,
             params: EagleParams | None = None) -> DecodeResult:
    """Generate with an EAGLE draft head; return a DecodeResult with method "eagle".

    ``model`` is a transformers causal LM, a LoadedModel or a Backend exposing hidden states and
    embeddings. Greedy output equals the target's own greedy output; sampling is lossless."""
    backend = as_backend(model)
    return decode(backend, prompt_ids, settings, EagleStep(backend, head, settings, params or EagleParams()), "eagle")
