"""Draft-model speculative decoding (Leviathan et al. 2022, arXiv 2211.17192; Chen et al. 2023,
arXiv 2302.01318).

Each step the draft proposes up to K tokens with its own KV cache, the target scores them in one
forward pass, and acceptance keeps the output exact:

- greedy: the longest prefix equal to the target's argmax is kept, then the target's own next token;
- sampling: draft token x is kept with probability min(1, p(x)/q(x)); on the first rejection the
  replacement is drawn from max(0, p - q) renormalised; when all K are kept a bonus token is
  drawn from p. Temperature / top-k / top-p warp p and q identically.

Both caches are cropped back to the accepted tokens after every step.

Levers for CPUs (where the draft costs a large share of a target token): ``draft_vocab`` drafts
over the N lowest token ids only (BPE ids are roughly ordered by merge frequency; the prompt's own
tokens and the stop tokens are always added) so the draft's LM head reads fewer bytes — the target
still verifies over its full vocabulary, so output is unchanged; ``draft_quant="int8"`` drafts with
an int8 copy of the draft (half the bytes of bfloat16 per token; see tools/engine/quantize.py), and a
draft given as a llama.cpp backend drafts with its GGUF file's own weights (``draft_quant="gguf"``);
``adaptive_k`` grows K after a
fully accepted step and shrinks it after an early rejection; ``draft_confidence`` stops drafting
when the draft's top probability falls below a threshold.

``DraftStep`` is the method's step in the shared loop (tools.engine.loop); ``SpeculativeDecoder`` is
the Lugh::Speculative API over that same step (inference/main, draft/draft_inference, k/depth;
generate, step, draft_tokens, verify_tokens, init_caches; statistics). Both models are reached
through tools.engine.backend.
"""

from __future__ import annotations

import torch
from pydantic import ValidationError

from tools.engine import quantize
from tools.engine.backend import Backend, TransformersBackend, as_backend, unwrap
from tools.engine.lookup_branch import LookupBranch, shared_prefix
from tools.engine.loop import DecodeStep, as_input_ids, decode, next_token
from tools.engine.sampling import greedy_tokens, make_generator, residual, sample, warp_probs
from tools.engine.types import DecodeResult, GenerationSettings, StepTally
from tools.engine.draft_tree import (DraftTree, accept_greedy_tree, accept_sampling_tree, add_draft, chain_reach,
                                     chain_with_leaves)
from tools.engine.gate import DraftModelGate, pass_cost
from tools.engine.params import DRAFT_ACCEPTANCE_PRIOR, DRAFT_COST_ASSUMED, DraftParams  # noqa: F401  (DraftParams re-exported)
from tools.engine.params import PromptLookupParams
from tools.engine.prompt_lookup import find_candidate_set
from tools.errors import ParameterError, VocabularyMismatchError

K_MIN, K_MAX = 1, 16
# the draft's lookup guesses (draft_lookup): what followed the text's last 3 (else 2) tokens earlier in it
LOOKUP_NGRAM, LOOKUP_NGRAM_MIN = 3, 2
TREE_MAX = 32  # draft trees: leaves a step may add beside the chain
TREE_TOP = 6  # draft trees: the draft's most probable tokens looked at per slot (the chain's own among them)
TREE_TIPS = 4  # draft trees: the most likely branches the draft continues, one batched draft forward per depth
CALIBRATION_PRIOR = 2.0  # draft trees: leaves' predicted and kept counts a run starts from (ratio 1, ~2 steps)
CALIBRATION_DECAY = 0.9  # each step's record weighs this much less at every later step




def lm_head_rows(model) -> int:
    return as_backend(model).vocab_size


def shared_vocab_size(target, draft, target_tok=None, draft_tok=None) -> int:
    """Return the number of token ids target and draft share, or raise VocabularyMismatchError.

    LM heads may differ by padding rows (common in Qwen pairs) when the tokenizers agree.
    """
    vt, vd = lm_head_rows(target), lm_head_rows(draft)
    if target_tok is not None and draft_tok is not None:
        if target_tok.get_vocab() != draft_tok.get_vocab():
            raise VocabularyMismatchError(
                "the target and draft tokenizers map tokens to different ids",
                hint="choose a draft from the same model family (same tokenizer) as the target",
            )
        n = len(target_tok)
        if n > min(vt, vd):
            raise VocabularyMismatchError(f"tokenizer has {n} tokens but an LM head has only {min(vt, vd)} rows")
        return min(vt, vd)
    if vt != vd:
        raise VocabularyMismatchError(
            f"target vocabulary has {vt} rows, draft has {vd}",
            hint="pass models with the same vocabulary, or give their tokenizers so padding rows can be checked",
        )
    return vt


def cost_gate(pass_costs: list[float] | None, draft_cost: float | None) -> DraftModelGate | None:
    """The cost-aware draft length (tools.engine.gate) when this machine's pass costs are given, else None
    (K tokens drafted every step)."""
    if not pass_costs:
        return None
    if any(c <= 0 for c in pass_costs) or (draft_cost is not None and draft_cost <= 0):
        raise ParameterError("pass_costs and draft_cost must be positive relative costs",
                             hint="leave them out: run and compare set them from this machine's cost curve")
    return DraftModelGate(pass_costs, DRAFT_COST_ASSUMED if draft_cost is None else draft_cost, DRAFT_ACCEPTANCE_PRIOR)


def validate_lookup(tokens: int) -> int:
    if not isinstance(tokens, int) or isinstance(tokens, bool) or not (0 <= tokens <= K_MAX):
        raise ParameterError(f"draft_lookup must be an integer from 0 to {K_MAX}, got {tokens!r}", hint="try 4, or 0")
    return tokens


def validate_tree(leaves: int) -> int:
    if not isinstance(leaves, int) or isinstance(leaves, bool) or not (0 <= leaves <= TREE_MAX):
        raise ParameterError(f"draft_tree must be an integer from 0 to {TREE_MAX}, got {leaves!r}", hint="try 8, or 0")
    return leaves


def validate_k(k: int) -> int:
    if not isinstance(k, int) or isinstance(k, bool) or not (K_MIN <= k <= K_MAX):
        raise ParameterError(f"k must be an integer from {K_MIN} to {K_MAX}, got {k!r}", hint="try k=4")
    return k


class _Drafter:
    """The draft model with its cache; proposes tokens, optionally over a trimmed vocabulary."""

    def __init__(self, backend: Backend, shared_vocab: int, target_vocab: int, lookup: int = 0):
        self.backend = backend
        self.shared_vocab = shared_vocab
        self.target_vocab = target_vocab
        self.lookup = lookup  # greedy: up to this many tokens copied from earlier text checked per draft forward
        self._lookup_params = PromptLookupParams(max_ngram_size=LOOKUP_NGRAM, min_ngram_size=LOOKUP_NGRAM_MIN,
                                                 num_candidate_tokens=max(1, lookup), num_candidates=1)
        self.cache = None
        self.length = 0  # positions held in the cache
        self.subset: torch.Tensor | None = None  # token ids the draft may propose (sorted)
        self.head: torch.Tensor | None = None  # LM head rows for ``subset``
        self.forwards = 0  # draft forwards this run
        self.looked_up = 0  # draft tokens that came from a lookup guess the draft agreed with
        self.top = 0  # draft trees: the draft's most probable tokens kept per slot of a proposal (0: none)
        self.slots: list[list[tuple[int, float]]] = []  # per slot of the last proposal: [(token, probability)]
        self.branched = False  # rows grown beside the cache (Backend.forward_branches) that the next rollback drops

    def set_vocab(self, draft_vocab: int | None, always: list[int]) -> None:
        self.subset, self.head = None, None
        if not draft_vocab or draft_vocab >= self.shared_vocab:
            return
        ids = torch.cat([torch.arange(draft_vocab), torch.as_tensor(always, dtype=torch.long)])
        ids = torch.unique(ids[ids < self.shared_vocab]).to(self.backend.device)
        head = self.backend.head_rows(ids)
        if head is not None:
            self.subset, self.head = ids, head

    def reset(self) -> None:
        """An empty draft cache: the first proposal feeds the prompt (a run that never drafts, its steps all
        declined by the cost gate, never pays the draft's prefill)."""
        self.cache = self.backend.new_cache()
        self.length = 0
        self.forwards = self.looked_up = 0

    def _forward(self, tokens: list[int], rows: int = 1) -> torch.Tensor:
        """Feed ``tokens``; the draft's logits [rows, vocab] at the last ``rows`` of them."""
        dev = self.backend.device
        ids = torch.tensor([tokens], device=dev)
        pos = torch.arange(self.length, self.length + len(tokens), device=dev)[None]
        self.length += len(tokens)
        self.forwards += 1
        if self.head is not None:
            hidden = self.backend.hidden(ids, self.cache, pos)
            return hidden[-rows:] @ self.head.T
        logits = self.backend.forward(ids, self.cache, pos, rows=rows)
        return logits[-rows:, : self.shared_vocab]

    def propose(self, seq: list[int], k: int, settings: GenerationSettings, generator, confidence: float | None,
                eos: set[int]) -> tuple[list[int], torch.Tensor | None]:
        """Propose up to k tokens after ``seq``; return (tokens, q) with q [m, target_vocab] when sampling.
        With ``top`` set the proposal is the draft's argmax chain whatever the settings (deterministic drafts, which
        a tree's verification needs) and ``slots`` holds the draft's ``top`` most probable tokens at every slot it
        read: slot i beside token i, and one more where a confidence cut stopped the chain."""
        self.slots = []
        argmax = settings.greedy or self.top > 0
        if argmax and self.lookup:
            return self._propose_greedy(seq, k, confidence, eos), None
        feed = seq[self.length:]
        tokens: list[int] = []
        qs: list[torch.Tensor] = []
        for i in range(k):
            logits = self._forward(feed)[-1]
            if argmax:
                j = int(greedy_tokens(logits))
                top = self._note(logits)
                if confidence is not None and i > 0 and (top if top is not None else
                                                         float(logits.softmax(-1)[j])) < confidence:
                    break
            else:
                q_local = warp_probs(logits, settings)
                if confidence is not None and i > 0 and float(q_local.max()) < confidence:
                    break
                j = int(sample(q_local, generator))
                qs.append(self._full_q(q_local))
            token = int(self.subset[j]) if self.subset is not None else j
            tokens.append(token)
            feed = [token]
            if token in eos:
                break
        # the last proposed token was not fed: the cache holds seq + tokens[:-1]
        return tokens, (torch.stack(qs) if qs else None)

    def _propose_greedy(self, seq: list[int], k: int, confidence: float | None, eos: set[int]) -> list[int]:
        """The draft's greedy proposal, the tokens it would draft one forward at a time, in fewer forwards: each
        forward also feeds a guess (what followed the text's last n-gram earlier in it, as prompt lookup finds
        it) and keeps the guessed tokens the draft's own argmax agrees with, then the draft's next token."""
        feed = seq[self.length:]
        tokens: list[int] = []
        while len(tokens) < k:
            guess = self._guess(seq, tokens, k - len(tokens) - 1)
            fed = self.length + len(feed)  # the cache's length once ``feed`` is in, before the guess
            logits = self._forward(feed + guess, rows=len(guess) + 1)
            choices = greedy_tokens(logits).tolist()  # one argmax (and one device sync) for every row
            stop = False
            for row, j in enumerate(choices):
                top = self._note(logits[row])
                if confidence is not None and tokens and (top if top is not None else
                                                          float(logits[row].softmax(-1)[j])) < confidence:
                    stop = True
                    break
                token = int(self.subset[j]) if self.subset is not None else j
                tokens.append(token)
                self.looked_up += row > 0
                if token in eos or len(tokens) == k:
                    stop = True
                    break
                if row == len(guess) or token != guess[row]:
                    break
                fed += 1  # the guessed token is the draft's own: its cache entry stays
            self.rollback(fed)  # the cache holds seq + tokens[:-1]
            if stop:
                break
            feed = [tokens[-1]]
        return tokens

    def _note(self, logits: torch.Tensor) -> float | None:
        """Keep the ``top`` most probable tokens of one slot with their probabilities (draft trees); return the
        slot's top probability (the argmax's, which the confidence cut reads), None when not keeping slots."""
        if not self.top:
            return None
        top = torch.topk(logits.float().softmax(-1), self.top)
        ids = top.indices if self.subset is None else self.subset[top.indices]
        slot = list(zip(ids.tolist(), top.values.tolist()))
        self.slots.append(slot)
        return slot[0][1]

    def _guess(self, seq: list[int], tokens: list[int], room: int) -> list[int]:
        if room < 1:
            return []
        text = torch.tensor(seq + tokens, dtype=torch.long)
        drafts = find_candidate_set(text, self._lookup_params, limit=room)
        return drafts[0] if drafts else []

    def _full_q(self, q_local: torch.Tensor) -> torch.Tensor:
        """The draft's probabilities over the target's whole vocabulary (zero outside the draft's ids)."""
        q = torch.zeros(self.target_vocab, dtype=q_local.dtype, device=q_local.device)
        if self.subset is not None:
            q.scatter_(0, self.subset, q_local)
        else:
            q[: q_local.shape[0]] = q_local
        return q

    def branch(self, tokens: list[int], positions: list[int], parents: list[int],
               bases: list[int]) -> list[tuple[int, float]]:
        """One draft forward over rows that branch off the cached sequence (Backend.forward_branches): the draft's
        most probable token after each row, with its probability."""
        dev = self.backend.device
        logits = self.backend.forward_branches(torch.tensor([tokens], device=dev), self.cache,
                                               torch.tensor([positions], device=dev), parents, bases)
        self.forwards += 1
        self.branched = True
        top = logits[:, : self.shared_vocab].float().softmax(-1).max(-1)
        return list(zip(top.indices.tolist(), top.values.tolist()))

    def rollback(self, length: int) -> None:
        if self.length > length or self.branched:
            length = min(length, self.length)
            self.backend.crop(self.cache, length)
            self.length, self.branched = length, False


def accept_greedy(target_logits: torch.Tensor, drafts: list[int]) -> tuple[int, int]:
    """Return (number of drafts accepted, next token) for greedy verification.

    ``target_logits`` [m + 1, vocab] are the target's logits after the last committed token and
    after each draft token.
    """
    choice = greedy_tokens(target_logits).tolist()
    n = 0
    while n < len(drafts) and drafts[n] == choice[n]:
        n += 1
    return n, choice[n]


def accept_sampling(p: torch.Tensor, q: torch.Tensor | None, drafts: list[int], generator) -> tuple[int, int]:
    """Rejection sampling: return (number of drafts accepted, next token).

    p [m + 1, vocab] target probabilities, q [m, vocab] draft probabilities the drafts were drawn from.
    """
    m = len(drafts)
    if m:
        idx = torch.tensor(drafts, device=p.device)
        rows = torch.arange(m, device=p.device)
        px, qx = p[rows, idx], q[rows, idx]
        u = torch.rand(m, generator=generator, device=p.device)
        rejected = (u * qx > px).tolist()  # accept when u < p(x)/q(x)
        n = rejected.index(True) if True in rejected else m
    else:
        n = 0
    dist = residual(p[n], q[n]) if n < m else p[m]
    return n, int(sample(dist, generator))


class DraftStep(DecodeStep):
    """The draft-model step the loop runs (and SpeculativeDecoder's Lugh API calls piece by piece):
    the draft proposes up to K tokens, the target verifies them in one forward, both caches are cut
    back to the committed sequence ``seq`` (prompt + output; the target's cache holds all but the last)."""

    def __init__(self, target: Backend, drafter: _Drafter, n_vocab: int, settings: GenerationSettings, *, k: int,
                 k_max: int, adaptive_k: bool, confidence: float | None, draft_vocab: int | None, draft_quant: str,
                 gate: DraftModelGate | None = None, tree: int = 0, tree_lookup: int = 0):
        self.target, self.drafter, self.n_vocab, self.settings = target, drafter, n_vocab, settings
        self.gate = gate
        self.tree = tree  # draft trees: up to this many of the draft's other likely tokens verified beside the chain
        drafter.top = TREE_TOP if tree else 0
        self.tree_lookup = tree_lookup if tree else 0
        self.branch = LookupBranch(self.tree_lookup, gate.costs if gate is not None else None)
        self.leaf_steps = self.leaves = self.leaves_kept = 0
        self.predicted, self.kept = CALIBRATION_PRIOR, CALIBRATION_PRIOR  # leaves' scores against leaves kept
        self.k, self.k_max, self.adaptive_k = k, k_max, adaptive_k
        self.confidence, self.draft_vocab, self.draft_quant = confidence, draft_vocab, draft_quant
        self.cache = None
        self.seq: list[int] = []
        self.generator = None
        self.current_k = k
        self.q: torch.Tensor | None = None  # the draft's probabilities of the last proposal (sampling)
        self.eos: set[int] = set()
        self.forwards_before = 0  # the draft's forwards before this step's proposal

    def prefill(self, input_ids: torch.Tensor) -> int:
        """Prefill both models with the prompt [1, n] (on the target's device); return the first token."""
        settings = self.settings
        self.generator = make_generator(settings, self.target.device)
        self.eos = set(settings.eos_token_ids)
        self.cache = self.target.new_cache()
        self.current_k = self.k
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)[None]
        first = next_token(self._real(self.target.forward(input_ids, self.cache, positions, rows=1)[-1]),
                           settings, self.generator)
        self.drafter.set_vocab(self.draft_vocab, input_ids[0].tolist() + settings.eos_token_ids)
        self.drafter.reset()
        self.branch = LookupBranch(self.tree_lookup, self.gate.costs if self.gate is not None else None)
        self.leaf_steps = self.leaves = self.leaves_kept = 0
        self.predicted, self.kept = CALIBRATION_PRIOR, CALIBRATION_PRIOR
        if self.gate is not None:
            self.gate.reset()
        self.seq = input_ids[0].tolist() + [first]
        return first

    def propose(self, n: int) -> list[int]:
        """Up to n draft tokens after the committed sequence (a second call proposes again from it)."""
        self.drafter.rollback(len(self.seq) - 1)
        self.forwards_before = self.drafter.forwards
        tokens, self.q = self.drafter.propose(self.seq, n, self.settings, self.generator, self.confidence, self.eos)
        return tokens

    def verify(self, drafts: list[int]) -> tuple[list[int], int]:
        """Score ``drafts`` in one target forward; commit and return (new tokens, drafts accepted)."""
        m, L, dev = len(drafts), len(self.seq), self.target.device
        ids = torch.tensor([[self.seq[-1], *drafts]], device=dev)
        pos = torch.arange(L - 1, L + m, device=dev)[None]
        logits = self._real(self.target.forward(ids, self.cache, pos))
        if self.settings.greedy:
            n, nxt = accept_greedy(logits, drafts)
        else:
            n, nxt = accept_sampling(warp_probs(logits, self.settings), self.q, drafts, self.generator)
        new = drafts[:n] + [nxt]
        self.seq.extend(new)
        self.target.crop(self.cache, L + n)
        self.drafter.rollback(L + n)
        self.q = None
        self._adapt(m, n)
        return new, n

    def verify_tree(self, drafts: list[int], remaining: int) -> tuple[list[int], int, int, range]:
        """Score the chain ``drafts`` with leaves from the draft's other likely tokens (tools.engine.draft_tree) in
        one target forward under the tree's mask; commit and return (new tokens, tokens kept, chain tokens kept,
        the depths the tree drafted: as EAGLE counts them, a step drafts its deepest path, so acceptance is the share
        of the deepest path's length kept)."""
        m, L, dev = len(drafts), len(self.seq), self.target.device
        cost = None
        if self.gate is not None:
            cost = lambda n: self._spent() + pass_cost(self.gate.costs, n)  # noqa: E731
        slots = self.drafter.slots[: m + 1 if m + 2 <= remaining else m]  # a leaf and the target's token fit
        calibration = self.kept / self.predicted
        reach = chain_reach(drafts, slots)
        tree, mass = chain_with_leaves(self.seq[-1], drafts, slots, self.tree, cost, calibration, reach)
        mass += self._grow(tree, m, slots, reach, calibration, remaining - 1, 1.0 + sum(reach) + calibration * mass)
        leaves = tree.size - 1 - m  # the draft's other tokens and the branches grown from them
        branch = self._graft(tree, remaining - 1, 1.0 + sum(reach) + calibration * mass,
                             self._spent() if cost is not None else 0.0)
        ids = torch.tensor([tree.tokens], device=dev)
        pos = (torch.tensor(tree.depths, device=dev) + (L - 1))[None]
        visible = None if tree.is_chain else tree.visible().to(dev)  # a chain needs no tree mask: causal is its mask
        logits = self._real(self.target.forward(ids, self.cache, pos, visible=visible))
        if self.settings.greedy:
            node, nxt = accept_greedy_tree(tree, greedy_tokens(logits).tolist())
        else:
            node, nxt = accept_sampling_tree(tree, lambda i: warp_probs(logits[i], self.settings), self.generator)
        path = tree.path_to(node)
        new = [tree.tokens[i] for i in path[1:]] + [nxt]
        chain_kept = sum(1 for i in path[1:] if i <= m)  # nodes 1..m are the chain, in order
        self.target.keep_positions(self.cache, L - 1, torch.tensor(path, device=dev))
        self.drafter.rollback(L + chain_kept)
        self.seq.extend(new)
        if branch is not None:
            self.branch.record(*branch, new[:-1])
        if leaves:
            self.leaf_steps += 1
            self.leaves += leaves
            on_leaf = sum(1 for i in path if m < i <= m + leaves)  # a grown branch may keep several
            self.leaves_kept += on_leaf
            self.predicted = CALIBRATION_DECAY * self.predicted + mass
            self.kept = CALIBRATION_DECAY * self.kept + on_leaf
        self._adapt(m, chain_kept)
        return new, len(path) - 1, chain_kept, range(1, max(tree.depths) + 1)

    def _grow(self, tree: DraftTree, m: int, slots: list[list[tuple[int, float]]], reach: list[float],
              calibration: float, room: int, expect: float) -> float:
        """Continue the ``TREE_TIPS`` most likely leaves of ``tree`` (the draft's other tokens beside the chain's
        ``m``) with the draft's own next tokens, one batched draft forward per depth (the branches of SpecInfer's
        token tree, arXiv 2305.09781, grown as EAGLE-2 grows its dynamic tree, arXiv 2406.16858): a node's score is
        its parent's times the draft's probability of it. With this machine's costs a depth is drafted where it can
        raise the step's expected tokens per unit of cost (:meth:`_depth_pays`), and a new node
        is kept while the expected tokens per unit of the step's cost grow (``expect`` so far); without, the tips
        grow to the chain's length. Returns the grown nodes' summed scores."""
        drafter, L = self.drafter, len(self.seq)
        if not drafter.backend.branches or tree.size == m + 1:
            return 0.0
        score = {}
        for j in range(m + 1, tree.size):
            d = tree.depths[j]
            score[j] = (reach[d - 2] if d >= 2 else 1.0) * next(p for t, p in slots[d - 1] if t == tree.tokens[j])
        limit = room if self.gate is not None else min(room, max(m, 2))
        tips = [j for j in sorted(score, key=lambda j: -score[j])[:TREE_TIPS]  # (a parent past the chain's last
                if tree.tokens[j] not in self.eos and tree.depths[j] < limit  # token is not in the draft's cache)
                and L - 2 + tree.depths[j] <= drafter.length]
        row_of: dict[int, int] = {}  # tree node -> its branch row in the draft's cache
        grown = 0.0
        while tips:
            if self.gate is not None and not self._depth_pays(tips, score, calibration, expect, tree.size):
                break
            tokens, positions, parents, bases, here = [], [], [], [], {}
            for j in tips:
                parent = tree.parents[j]
                if parent not in row_of and L - 1 + tree.depths[parent] >= drafter.length:
                    row_of[parent] = len(row_of)  # the chain's last token, never fed to the draft: a row of its own
                    tokens.append(tree.tokens[parent])
                    positions.append(L - 1 + tree.depths[parent])
                    parents.append(-1)
                    bases.append(L - 1 + tree.depths[parent])
                row_of[j], here[j] = len(row_of), len(tokens)
                tokens.append(tree.tokens[j])
                positions.append(L - 1 + tree.depths[j])
                parents.append(row_of.get(parent, -1))
                bases.append(L - 1 + tree.depths[j])
            nexts = drafter.branch(tokens, positions, parents, bases)
            found = sorted(((score[j] * nexts[here[j]][1], j, nexts[here[j]][0]) for j in tips), key=lambda c: -c[0])
            tips = []
            for s, j, t in found:
                if self.gate is not None:
                    spent = self._spent()
                    if (expect + calibration * s) / (spent + pass_cost(self.gate.costs, tree.size + 1)) <= \
                            expect / (spent + pass_cost(self.gate.costs, tree.size)) + 1e-12:
                        break
                node = tree.add_child(j, t)
                score[node] = s
                grown += s
                expect += calibration * s
                if t not in self.eos and tree.depths[node] < limit:
                    tips.append(node)
        return grown

    def _depth_pays(self, tips: list[int], score: dict[int, float], calibration: float, expect: float,
                    size: int) -> bool:
        """Whether one more depth can raise the step's expected tokens per unit of cost: at best every tip gets a
        child the target keeps as often as the tip (``calibration`` times its score), for a draft forward over the
        tips (its rows priced as this machine's pass over as many tokens, in draft tokens) and a verification pass
        that many nodes longer."""
        costs = self.gate.costs
        now = self._spent() + pass_cost(costs, size)
        wider = pass_cost(costs, size + len(tips)) - pass_cost(costs, size)
        later = now + self.gate.draft_cost * pass_cost(costs, len(tips) + 1) + wider
        return (expect + calibration * sum(score[j] for j in tips)) / later > expect / now

    def _spent(self) -> float:
        """What the draft's forwards of this step (its proposal and any grown depths) cost, in target tokens."""
        return self.gate.draft_cost * (self.drafter.forwards - self.forwards_before)

    def _graft(self, tree, room: int, expect: float, spent: float) -> tuple[int, list[int], int] | None:
        """Merge the prompt-lookup branch (what followed the text's last words earlier in it) into ``tree``, cut to
        what this machine's pass costs pay for; return (match length, tokens merged, how many the tree held), None
        without one."""
        if not self.tree_lookup:
            return None
        n, draft = self.branch.draft(self.seq, room)
        if not draft:
            return None
        shared = shared_prefix(tree.children.__getitem__, tree.tokens.__getitem__, draft)
        draft = draft[: self.branch.length(draft, n, shared, expect, tree.size, spent)]
        if len(draft) <= shared:
            return None
        add_draft(tree, draft)
        return n, draft, shared

    def _adapt(self, m: int, n: int) -> None:
        if self.adaptive_k and m:
            if n == m and m == self.current_k:
                self.current_k = min(self.current_k + 1, self.k_max)
            elif n < m:
                self.current_k = max(K_MIN, self.current_k - 1)

    def step(self, out: list[int], remaining: int) -> tuple[list[int], int, range]:
        n = min(self.current_k, remaining - 1)  # room for the target's own token
        if self.gate is not None and self.adaptive_k:  # the length this machine's costs pay for, 0 (plain) if none
            n = self.gate.length(n)
        if n >= 1:
            drafts = self.propose(n)
        else:  # a plain step: no proposal, and no slots left from the last one
            drafts, self.drafter.slots = [], []
        if self.tree and (drafts or self.drafter.slots):
            new, accepted, chain_kept, depths = self.verify_tree(drafts, remaining)
        else:
            new, accepted = self.verify(drafts)
            chain_kept, depths = accepted, range(1, len(drafts) + 1)
        if self.gate is not None and self.adaptive_k:
            self.gate.update(len(drafts), chain_kept)
        return new, accepted, depths

    def extra(self, out: list[int], tally: StepTally, stopped: str) -> dict:
        return {"k": self.k, "adaptive_k": self.adaptive_k, "k_max": self.k_max,
                "draft_confidence": self.confidence, "draft_quant": self.draft_quant,
                "draft_vocab": int(self.drafter.subset.numel()) if self.drafter.subset is not None else None,
                "pass_costs": self.gate.costs if self.gate is not None else None,
                "draft_cost": self.gate.draft_cost if self.gate is not None else None,
                "declined_steps": self.gate.declined if self.gate is not None else 0,
                "draft_lookup": self.drafter.lookup, "draft_forwards": self.drafter.forwards,
                "draft_tokens_looked_up": self.drafter.looked_up, "draft_tree": self.tree,
                "leaves_per_tree": self.leaves / self.leaf_steps if self.leaf_steps else None,
                "leaves_kept": self.leaves_kept, "tree_lookup": self.tree_lookup, "lookup_steps": self.branch.steps,
                "looked_up": self.branch.looked_up}

    def _real(self, logits: torch.Tensor) -> torch.Tensor:
        """Mask the target's padding rows (ids the draft does not have) so they are never emitted."""
        if logits.shape[-1] > self.n_vocab:
            logits = logits.clone()
            logits[..., self.n_vocab:] = float("-inf")
        return logits


class SpeculativeDecoder:
    """Draft-model speculative decoder with the Lugh::Speculative API, a façade over ``DraftStep``.

    ``SpeculativeDecoder(inference=target, draft=draft, k=4, temperature=0.8, top_p=0.95)``;
    aliases: ``main`` for inference, ``draft_inference`` for draft, ``depth`` for k. Models are
    transformers causal LMs or ``tools.models.LoadedModel`` objects (then tokenizers are checked).
    The defaults are the Lugh API's (k=4, fixed K, no confidence cut, no quantization);
    ``for_settings(..., **DraftParams().model_dump())`` gives specpilot's tuned ones.
    """

    def __init__(self, inference=None, draft=None, k: int | None = None, temperature: float = 0.0,
                 top_p: float = 1.0, top_k: int = 0, seed: int = 0, *, main=None, draft_inference=None,
                 depth: int | None = None, adaptive_k: bool = False, k_max: int | None = None,
                 draft_confidence: float | None = None, draft_vocab: int | None = None,
                 draft_quant: str = "none", eos_token_ids: list[int] | None = None,
                 pass_costs: list[float] | None = None, draft_cost: float | None = None, draft_lookup: int = 0,
                 draft_tree: int = 0, tree_lookup: int = 0):
        target = inference if inference is not None else main
        drafter = draft if draft is not None else draft_inference
        if target is None or drafter is None:
            raise ParameterError("both a target (inference/main) and a draft (draft/draft_inference) model are needed")
        if k is not None and depth is not None and k != depth:
            raise ParameterError(f"k={k} and depth={depth} disagree", hint="give one of them")
        k = validate_k(k if k is not None else depth if depth is not None else 4)
        _check_options(top_p, temperature, draft_confidence, draft_vocab)
        k_max = validate_k(k_max) if k_max is not None else min(K_MAX, 2 * k)
        if k_max < k:
            raise ParameterError(f"k_max={k_max} is below k={k}")
        try:
            settings = GenerationSettings(
                temperature=temperature, top_p=top_p, top_k=top_k, seed=seed, eos_token_ids=list(eos_token_ids or [])
            )
        except ValidationError as exc:
            raise ParameterError(f"invalid generation settings: {_first_error(exc)}") from None
        self.target, self.target_tokenizer = unwrap(target)
        self.draft_model, self.draft_tokenizer = unwrap(drafter)
        n_vocab = shared_vocab_size(self.target, self.draft_model, self.target_tokenizer, self.draft_tokenizer)
        quant = quantize.resolve(draft_quant, self.draft_model.device, as_backend(self.draft_model).engine)
        proposer = quantize.int8_draft(self.draft_model) if quant == "int8" else self.draft_model
        backend = TransformersBackend(self.target)
        drafter = _Drafter(as_backend(proposer), n_vocab, backend.vocab_size, lookup=validate_lookup(draft_lookup))
        self._core = DraftStep(backend, drafter, n_vocab,
                               settings, k=k, k_max=k_max, adaptive_k=adaptive_k, confidence=draft_confidence,
                               draft_vocab=draft_vocab, draft_quant=quant, gate=cost_gate(pass_costs, draft_cost),
                               tree=validate_tree(draft_tree), tree_lookup=validate_lookup(tree_lookup))
        self.reset_stats()

    @classmethod
    def for_settings(cls, target, draft, settings: GenerationSettings, **options) -> SpeculativeDecoder:
        """A decoder for ``settings`` (temperature, top-p, top-k, seed, EOS); ``options`` are the
        keyword arguments (DraftParams' fields: k, adaptive_k, k_max, draft_confidence, ...; gguf_draft_until is
        not one: it chooses the draft, which tools.engine.methods.run does before this)."""
        options.pop("gguf_draft_until", None)
        return cls(inference=target, draft=draft, temperature=settings.temperature, top_p=settings.top_p,
                   top_k=settings.top_k, seed=settings.seed, eos_token_ids=settings.eos_token_ids, **options)

    # ------------------------------------------------------------------ accessors (read-only)
    k = property(lambda self: self._core.k)
    k_max = property(lambda self: self._core.k_max)
    adaptive_k = property(lambda self: self._core.adaptive_k)
    draft_confidence = property(lambda self: self._core.confidence)
    draft_vocab = property(lambda self: self._core.draft_vocab)
    draft_quant = property(lambda self: self._core.draft_quant)
    n_vocab = property(lambda self: self._core.n_vocab, doc="Token ids shared by target and draft.")
    temperature = property(lambda self: self.settings.temperature)
    top_p = property(lambda self: self.settings.top_p)

    @property
    def settings(self) -> GenerationSettings:
        return self._core.settings

    @settings.setter
    def settings(self, value: GenerationSettings) -> None:
        self._core.settings = value

    # the committed sequence and the caches (tests and debugging look at them)
    _seq = property(lambda self: self._core.seq)
    _cache = property(lambda self: self._core.cache)
    _drafter = property(lambda self: self._core.drafter)

    # ------------------------------------------------------------------ statistics
    def reset_stats(self) -> None:
        self._stats = StepTally()

    tokens_drafted = property(lambda self: self._stats.drafted)
    tokens_accepted = property(lambda self: self._stats.accepted)
    total_steps = property(lambda self: self._stats.steps)
    accepted_per_step = property(lambda self: self._stats.accepted_per_step)
    drafted_by_position = property(lambda self: _padded(self._stats.drafted_by_position))
    accepted_by_position = property(lambda self: _padded(self._stats.accepted_by_position))

    @property
    def acceptance_rate(self) -> float:
        """tokens_accepted / tokens_drafted (0.0 before any draft)."""
        return self.tokens_accepted / self.tokens_drafted if self.tokens_drafted else 0.0

    # ------------------------------------------------------------------ steps
    @torch.no_grad()
    def init_caches(self, prompt_ids, settings: GenerationSettings | None = None) -> int:
        """Prefill both models with the prompt; return the first new token (from the target)."""
        if settings is not None:
            self.settings = settings
        return self._core.prefill(as_input_ids(prompt_ids, self._core.target.device))

    @torch.no_grad()
    def draft_tokens(self, n: int | None = None) -> list[int]:
        """Let the draft propose up to n (default: current K) tokens after the committed sequence."""
        self._require_init()
        return self._core.propose(self._core.current_k if n is None else validate_k(n))

    @torch.no_grad()
    def verify_tokens(self, drafts: list[int]) -> list[int]:
        """Score ``drafts`` with the target in one forward pass; commit and return the new tokens
        (the accepted drafts followed by the target's correction or bonus token)."""
        self._require_init()
        if any(not (0 <= t < self.n_vocab) for t in drafts):
            raise ParameterError(f"draft token ids must be in [0, {self.n_vocab})")
        q = self._core.q
        if not self.settings.greedy and drafts and (q is None or q.shape[0] != len(drafts)):
            raise ParameterError("sampling verification needs the drafts proposed by draft_tokens()")
        new, n = self._core.verify(drafts)
        self._stats.record(n, range(1, len(drafts) + 1))
        return new

    def step(self, limit: int | None = None) -> list[int]:
        """One speculative step: draft, verify, commit; return the new tokens (at least one)."""
        n = self._core.current_k if limit is None else min(self._core.current_k, limit)
        drafts = self.draft_tokens(n) if n >= 1 else []
        return self.verify_tokens(drafts)

    def _require_init(self) -> None:
        if self._core.cache is None:
            raise ParameterError("call init_caches(prompt_ids) (or generate) first")

    # ------------------------------------------------------------------ generate
    def run(self, prompt_ids, settings: GenerationSettings) -> DecodeResult:
        """Generate with speculative decoding (the shared loop); return a DecodeResult."""
        self.reset_stats()
        self.settings = settings
        result = decode(self._core.target, prompt_ids, settings, self._core, "draft", tally=self._stats)
        result.accepted_per_step = list(result.accepted_per_step)  # later steps keep counting in self._stats
        result.drafted_by_position = list(result.drafted_by_position)
        result.accepted_by_position = list(result.accepted_by_position)
        return result

    def generate(self, prompt, max_tokens: int = 128):
        """Lugh-style generate: token ids in, token ids out; a string prompt returns text."""
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            raise ParameterError(f"max_tokens must be a positive integer, got {max_tokens!r}")
        tok = self.target_tokenizer
        if isinstance(prompt, str):
            if tok is None:
                raise ParameterError("a text prompt needs a tokenizer", hint="pass LoadedModel objects or token ids")
            ids = tok(prompt)["input_ids"]
        else:
            ids = list(prompt)
        eos = list(self.settings.eos_token_ids)
        if not eos and tok is not None and tok.eos_token_id is not None:
            eos = [tok.eos_token_id]
        settings = self.settings.model_copy(update={"max_new_tokens": max_tokens, "eos_token_ids": eos})
        result = self.run(ids, settings)
        if isinstance(prompt, str):
            return tok.decode(result.output_ids, skip_special_tokens=True)
        return result.output_ids


def _check_options(top_p: float, temperature: float, draft_confidence: float | None, draft_vocab: int | None) -> None:
    if not (0.0 < top_p <= 1.0):
        raise ParameterError(f"top_p must be in (0, 1], got {top_p}")
    if temperature < 0:
        raise ParameterError(f"temperature must be >= 0, got {temperature}")
    if draft_confidence is not None and not (0.0 <= draft_confidence < 1.0):
        raise ParameterError(f"draft_confidence must be in [0, 1), got {draft_confidence}")
    if draft_vocab is not None and draft_vocab < 1:
        raise ParameterError(f"draft_vocab must be a positive number of token ids, got {draft_vocab}")


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    return f"{'.'.join(str(x) for x in err['loc'])}: {err['msg']}"


def _padded(values: list[int]) -> list[int]:
    """A by-position list as the Lugh API reports it: K_MAX entries."""
    return values + [0] * (K_MAX - len(values))


def generate(target, draft, prompt_ids, settings: GenerationSettings, k: int = 4, *, adaptive_k: bool = False,
             k_max: int | None = None, draft_confidence: float | None = None,
             draft_vocab: int | None = None, draft_quant: str = "none", pass_costs: list[float] | None = None,
             draft_cost: float | None = None, draft_lookup: int = 0, draft_tree: int = 0,
             tree_lookup: int = 0) -> DecodeResult:
    """Speculative decoding of ``prompt_ids`` with ``draft`` proposing for ``target``; returns a DecodeResult."""
    decoder = SpeculativeDecoder.for_settings(
        target, draft, settings, k=k, adaptive_k=adaptive_k, k_max=k_max, draft_confidence=draft_confidence,
        draft_vocab=draft_vocab, draft_quant=draft_quant, pass_costs=pass_costs, draft_cost=draft_cost,
        draft_lookup=draft_lookup, draft_tree=draft_tree, tree_lookup=tree_lookup)
    return decoder.run(prompt_ids, settings)
