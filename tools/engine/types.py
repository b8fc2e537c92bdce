"""Settings every decoding method takes, and the result every method returns."""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field


class GenerationSettings(BaseModel):
    """Generation settings shared by all methods (the baseline and every accelerated decoder)."""

    model_config = ConfigDict(extra="forbid")

    max_new_tokens: int = Field(128, ge=1, le=32768, description="number of new tokens to generate at most")
    temperature: float = Field(0.0, ge=0.0, le=100.0, description="0 means greedy decoding")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="nucleus sampling mass (1.0 = off)")
    top_k: int = Field(0, ge=0, description="keep the k most likely tokens (0 = off)")
    seed: int = Field(0, description="seed of the sampling generator, for reproducible runs")
    eos_token_ids: list[int] = Field(default_factory=list, description="tokens that end generation")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


@dataclass
class DecodeResult:
    """What a decoding run produced and what it cost.

    ``steps`` counts decoding steps after the prefill (each is one target forward pass that
    verifies the step's candidates); ``target_forwards`` also counts the prefill.
    ``mean_accepted_per_step`` is new tokens per target forward pass, prefill included: the
    compression ratio, exactly 1.0 for the baseline and an upper bound on the speedup.
    """

    method: str
    output_ids: list[int]
    prefill_s: float
    decode_s: float
    steps: int
    target_forwards: int
    tokens_drafted: int = 0
    tokens_accepted: int = 0
    accepted_per_step: list[int] = field(default_factory=list)
    drafted_by_position: list[int] = field(default_factory=list)
    accepted_by_position: list[int] = field(default_factory=list)
    stopped_by: str = "length"  # "length" or "eos"
    extra: dict = field(default_factory=dict)
    text: str = ""

    @property
    def new_tokens(self) -> int:
        return len(self.output_ids)

    @property
    def wall_time_s(self) -> float:
        return self.prefill_s + self.decode_s

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / self.wall_time_s if self.wall_time_s > 0 else 0.0

    @property
    def acceptance_rate(self) -> float | None:
        """Accepted / drafted tokens; None for methods that draft nothing."""
        return self.tokens_accepted / self.tokens_drafted if self.tokens_drafted else None

    @property
    def mean_accepted_per_step(self) -> float:
        return self.new_tokens / self.target_forwards if self.target_forwards else 0.0


@dataclass
class StepTally:
    """The per-step bookkeeping the drafting decoders share, turned into their DecodeResult.

    ``record(accepted, depths)`` counts one decoding step (one target forward): ``depths`` are the depths
    of the tokens it verified as guesses (1 = the next token; a tree has several at one depth),
    ``accepted`` how many guessed tokens it kept. The by-position lists grow to the deepest guess seen,
    or start at ``positions`` zeros.
    """

    positions: int = 0
    steps: int = 0
    drafted: int = 0
    accepted: int = 0
    accepted_per_step: list[int] = field(default_factory=list)
    drafted_by_position: list[int] = field(default_factory=list)
    accepted_by_position: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.drafted_by_position = [0] * self.positions
        self.accepted_by_position = [0] * self.positions

    def record(self, accepted: int, depths=()) -> None:
        depths = list(depths)
        self.steps += 1
        self.drafted += len(depths)
        self.accepted += accepted
        self.accepted_per_step.append(accepted)
        if not depths:
            return
        grow = max(max(depths), accepted) - len(self.drafted_by_position)
        if grow > 0:
            self.drafted_by_position += [0] * grow
            self.accepted_by_position += [0] * grow
        for d in depths:
            self.drafted_by_position[d - 1] += 1
        for j in range(accepted):
            self.accepted_by_position[j] += 1

    def result(self, method: str, output_ids: list[int], times: tuple[float, float, float], stopped_by: str,
               extra: dict) -> DecodeResult:
        """The DecodeResult of a run that started at times[0], ended its prefill at times[1] and its decoding
        at times[2] (perf_counter seconds)."""
        t0, t1, t2 = times
        return DecodeResult(
            method=method, output_ids=output_ids, prefill_s=t1 - t0, decode_s=t2 - t1, steps=self.steps,
            target_forwards=self.steps + 1, tokens_drafted=self.drafted, tokens_accepted=self.accepted,
            accepted_per_step=self.accepted_per_step, drafted_by_position=self.drafted_by_position,
            accepted_by_position=self.accepted_by_position, stopped_by=stopped_by, extra=extra,
        )
