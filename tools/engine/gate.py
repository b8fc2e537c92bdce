"""Cost-aware drafting: how many draft tokens a step is worth on this machine, and when none is.

On a GPU a pass over a few tokens costs about as much as over one, so drafting always pays. On a CPU
it does not: on a 2-core AVX2 machine a pass over 2 tokens already costs 1.6-2x one (llama.cpp Q4_K_M,
transformers float32), so a draft pays only when enough of it is accepted. ``pass_costs`` is this
machine's cost curve as a step pays it (a pass over 1, 2, 3, ... tokens relative to one token), set
by the sizing from the measured curve; the gates below pick, each step, the draft length with the
most expected tokens per unit of cost, and 0 (a plain one-token step) when nothing beats it.

Acceptance is modelled as geometric: each draft token is kept with probability a once the ones
before it were, so L draft tokens yield 1 + a + ... + a^L tokens. a starts at a prior and moves to
what this run's own drafts got (accepted tokens / (accepted + rejections)), the prior weighing
``PRIOR_WEIGHT`` tokens. None of this changes the output: it only decides how much is verified.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from tools.engine.cpu_gemm import weights_numel
from tools.engine.params import PRIOR_WEIGHT

PROBE_EVERY = 16  # after this many declined steps in a row, one draft is tried to learn this text's acceptance
# ... but only where a draft that is always accepted would gain this much: a probe costs the draft's catch-up
# over everything it has not seen (the whole prompt the first time: 5 s of a 0.5B draft on a 612-token prompt on
# a 2-core CPU), which a small best-case gain never pays back
PROBE_MIN_GAIN = 1.25
TRIAL_DRAFTS = 4  # where drafting can gain that much, the first drafts are taken to learn this text's acceptance
# a draft model drafts only where the model of its gain says at least this much: the model leaves out the draft's
# catch-up over tokens it has not seen (its prefill of the prompt at the first draft) and the step's own work, and
# on llama.cpp here a predicted 5% gain measured 0.74-0.97x on short answers (benchmarks/scripts/llamacpp_speed.py)
MIN_DRAFT_GAIN = 1.1


def pass_cost(costs: list[float], tokens: int) -> float:
    """A pass over ``tokens`` relative to one token (past the curve's end: its last slope carried on)."""
    if tokens <= len(costs):
        return costs[tokens - 1] / costs[0]
    slope = (costs[-1] - costs[-2]) if len(costs) > 1 else costs[-1]
    return (costs[-1] + max(0.0, slope) * (tokens - len(costs))) / costs[0]


def best_length(acceptance: float, longest: int, cost) -> tuple[int, float]:
    """(the draft length 0..``longest`` with the most expected tokens per unit of ``cost(length)``, that rate);
    0 and 1.0 when no draft beats a plain step. ``cost(L)`` is what a step with L draft tokens costs
    relative to a plain one-token step."""
    best, best_rate, expect = 0, 1.0, 1.0
    for length in range(1, longest + 1):
        expect += acceptance ** length
        rate = expect / cost(length)
        if rate > best_rate + 1e-9:
            best, best_rate = length, rate
    return best, best_rate


class DraftModelGate:
    """The draft length of a draft-model step (``DraftParams.pass_costs``): L draft tokens cost L draft
    forwards (``draft_cost`` of a target token each) and one target pass over L + 1 tokens. Declines
    (0: a plain target step, the draft not run) when no length is expected to beat a plain step by
    ``MIN_DRAFT_GAIN``.

    Where a draft that is always accepted would gain at least ``PROBE_MIN_GAIN`` (a GPU, or a CPU whose
    passes over a few tokens are cheap), the first ``TRIAL_DRAFTS`` steps draft the full length to learn
    this text's acceptance, and after ``PROBE_EVERY`` declines in a row one draft is tried again. Where
    it would not (llama.cpp on a 2-core CPU: 7-15% at best), the prior alone decides, so a run that
    cannot win never pays the draft's prefill."""

    def __init__(self, costs: list[float], draft_cost: float, prior: float):
        self.costs, self.draft_cost, self.prior = list(costs), float(draft_cost), float(prior)
        self._upside: dict[int, bool] = {}  # longest -> can_pay(longest, PROBE_MIN_GAIN): the costs never change
        self.reset()

    def reset(self) -> None:
        """Forget the run's own record (a new generate call on the same decoder starts from the prior)."""
        self.accepted = 0.0
        self.rejected = 0.0
        self.declined = 0  # steps declined
        self.drafts = 0  # steps that drafted
        self.idle = 0  # declined steps in a row

    def acceptance(self) -> float:
        acc = self.accepted + PRIOR_WEIGHT * self.prior
        return acc / (acc + self.rejected + PRIOR_WEIGHT * (1.0 - self.prior))

    def cost(self, length: int) -> float:
        """A step with ``length`` draft tokens relative to a plain step."""
        return length * self.draft_cost + pass_cost(self.costs, length + 1)

    def can_pay(self, longest: int, gain: float = 1.0) -> bool:
        """Whether some draft of up to ``longest`` tokens beats a plain step by more than ``gain`` when every
        token is accepted."""
        return any((length + 1) / self.cost(length) > gain + 1e-9 for length in range(1, longest + 1))

    def length(self, longest: int) -> int:
        """Draft tokens to propose this step (0..``longest``)."""
        if longest < 1:
            return 0
        upside = self._upside.get(longest)
        if upside is None:
            upside = self._upside[longest] = self.can_pay(longest, PROBE_MIN_GAIN)
        if upside and self.drafts < TRIAL_DRAFTS:
            return longest
        best, rate = best_length(self.acceptance(), longest, self.cost)
        if best and rate >= MIN_DRAFT_GAIN:
            self.idle = 0
            return best
        self.idle += 1
        if self.idle >= PROBE_EVERY and upside:
            self.idle = 0
            return max(range(1, longest + 1), key=lambda n: (1 - self.acceptance() ** (n + 1)) / self.cost(n))
        self.declined += 1
        return 0

    def update(self, drafted: int, kept: int) -> None:
        if drafted:
            self.drafts += 1
            self.accepted += kept
            self.rejected += kept < drafted


TRIAL_STEPS = 8  # full steps a method takes before its own record may decline one
PRIOR_STEPS = 4  # a prior (what the method's heads are expected to give a full step) weighs this many full steps
DECAY = 0.9  # each full step's record weighs this much less at every later full step (texts change)
PROBE_LONGEST = 4 * PROBE_EVERY  # a step gate's wait between probes doubles after each probe that did not pay, to this
# a step gate times its own steps where they take at least this long (a CPU's: 0.4 s for the default target in
# float32 on 2 cores); shorter ones (tiny test models, GPUs) are left to the cost model, their clocks being noise
TIMED_STEP_S = 0.05
CALIBRATE_EVERY = 32  # a timed gate takes one plain step after this many full steps in a row, to time one again


class StepGate:
    """Whether a method's full step (lookahead: the Jacobi window and the verification branch in one pass;
    Medusa and EAGLE: the heads' tree)
    pays on this machine, from the method's own record: the tokens its recent full steps gave against
    what their passes cost (``pass_costs`` of their sizes, in one-token passes; each older step weighs
    ``DECAY`` less). A plain one-token step gives 1 token for 1, so a full step is taken while the record
    says at least as much; else the step is declined (the caller takes a plain step), and after
    ``PROBE_EVERY`` declines in a row a full step is taken again to see whether the text has changed
    (the wait doubles after each probe that did not make the record pay, up to ``PROBE_LONGEST``, and
    is back to ``PROBE_EVERY`` once full steps pay again).
    The first ``TRIAL_STEPS`` full steps are always taken, where a full step that verifies its longest
    guess whole (``best_tokens`` from a pass over ``step_tokens``) would gain at least ``PROBE_MIN_GAIN``;
    where it would not (lookahead's W=1, N=2 on llama.cpp here: 2 tokens for a pass costing 1.9; Medusa's
    sized depth-2 tree in float32 on a 2-core AVX2 CPU: 3 tokens for a pass costing 2.6 and the heads), no
    full step is ever taken.

    ``overhead`` is the work a full step does besides the target's pass, in one-token passes (Medusa's
    heads, EAGLE's draft head: the weights they read against the target's), added to every full step's
    cost. ``prior_tokens`` (what a full step is expected to give: from an EAGLE head's held-out acceptance;
    for lookahead's sized settings, fitted on the fit half) stands for the trial: the record starts with
    it, weighing ``PRIOR_STEPS`` full steps, so a method whose guesses cannot pay declines from the first
    step and only probes.

    Where steps are slow enough to time (``TIMED_STEP_S``), the gate also clocks them (the interval between
    two take_full calls is the step taken in between) and prices the record by what the steps measured
    rather than by the model alone: the modelled cost is scaled by (full steps' seconds per modelled unit)
    / (a plain step's seconds), so work the model leaves out (a head's catch-up, a slow kernel, a rebuilt
    weight) is paid for. To have a plain step to compare with, the third step is plain, and one in
    ``CALIBRATE_EVERY`` after a run of full steps."""

    def __init__(self, costs: list[float], best_tokens: int | None = None, step_tokens: int | None = None,
                 overhead: float = 0.0, prior_tokens: float | None = None,
                 clock: Callable[[], float] = time.perf_counter):
        self.costs, self.overhead = list(costs), float(overhead)
        full_cost = pass_cost(self.costs, step_tokens or 1) + self.overhead
        self.worth = best_tokens is None or best_tokens / full_cost >= PROBE_MIN_GAIN
        self.tokens = 0.0
        self.cost = 0.0
        self.full = 0  # full steps recorded
        if prior_tokens is not None and self.worth:
            self.tokens, self.cost, self.full = PRIOR_STEPS * prior_tokens, PRIOR_STEPS * full_cost, TRIAL_STEPS
        self.declined = 0
        self.idle = 0
        self.wait = PROBE_EVERY  # declines in a row before the next probe
        self.clock = clock
        self._last: tuple[float, bool] | None = None  # (when take_full last answered, what)
        self._step_cost = 0.0  # the modelled cost of the last full step recorded
        self.plain_s: float | None = None  # a plain step's measured seconds (running mean)
        self.full_s = 0.0  # measured seconds of the timed full steps (decayed like ``cost``)
        self.full_model = 0.0  # what the cost model gave those same steps
        self.since_plain = 0  # full steps since the last timed plain one
        self.timing = False  # the step just declined is the plain one that prices the full ones (nothing else in it)

    def record(self, tokens: int, pass_tokens: int) -> None:
        """A full step gave ``tokens`` new tokens from one pass over ``pass_tokens`` tokens."""
        self._step_cost = pass_cost(self.costs, pass_tokens) + self.overhead
        self.tokens = DECAY * self.tokens + tokens
        self.cost = DECAY * self.cost + self._step_cost
        self.full += 1

    def scale(self) -> float:
        """What the steps really cost against the cost model: (a full step's measured seconds over its modelled
        cost) / a plain step's measured seconds; 1.0 until both kinds of step were timed (full steps are timed
        only where they take ``TIMED_STEP_S`` or more)."""
        if not self.plain_s or not self.full_model:
            return 1.0
        return (self.full_s / self.full_model) / self.plain_s

    def _clocked(self) -> bool:
        """Time the step that ended now (the interval since the last take_full) under the kind it was; whether
        a plain step is due to be timed (full steps are slow enough to time, and none or none lately was)."""
        now, last, self._last = self.clock(), self._last, None
        if last is None:
            return False
        seconds = now - last[0]
        if not last[1]:
            self.plain_s = seconds if self.plain_s is None else 0.5 * (self.plain_s + seconds)
            self.since_plain = 0
            return False
        if seconds < TIMED_STEP_S:
            return False
        if self._step_cost:
            self.full_s = DECAY * self.full_s + seconds
            self.full_model = DECAY * self.full_model + self._step_cost
        self.since_plain += 1
        return self.plain_s is None or self.since_plain >= CALIBRATE_EVERY

    def untimed(self) -> None:
        """The step just decided is neither a plain step nor a full one (a declined step that verifies another
        draft): its time prices neither kind."""
        self._last = None

    def take_full(self) -> bool:
        self.timing = False
        full = self._decide(self._clocked())
        self._last, self._step_cost = (self.clock(), full), 0.0
        return full

    def _decide(self, time_plain: bool) -> bool:
        if not self.worth:
            self.declined += 1
            return False
        if time_plain and self.full >= 2:  # one plain step to price the full ones against
            self.declined += 1
            self.timing = True  # a plain step proper: the caller verifies no other draft in it
            return False
        if self.full < TRIAL_STEPS or self.tokens >= self.cost * self.scale():
            self.idle, self.wait = 0, PROBE_EVERY
            return True
        self.idle += 1
        if self.idle >= self.wait:
            self.idle, self.wait = 0, min(2 * self.wait, PROBE_LONGEST)
            return True
        self.declined += 1
        return False


def weights_ratio(extra: int, target) -> float:
    """``extra`` parameters read per step against the ``target`` module's own (a step's overhead in one-token
    passes where, as on a CPU, a pass costs what it reads)."""
    own = weights_numel(target) if target is not None else 0
    return extra / own if own else 0.0
