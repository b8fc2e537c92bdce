"""vLLM's speculative-decoding counters, read from its Prometheus ``/metrics`` text (not estimated).

vLLM counts, per engine: ``vllm:spec_decode_num_drafts`` (draft proposals made), ``..._num_draft_tokens``
(tokens proposed), ``..._num_accepted_tokens`` (tokens the target accepted) and
``..._num_accepted_tokens_per_pos{position="i"}``. A level's figures are the difference between a
reading after it and one before it. From those:

- acceptance rate = accepted / draft tokens;
- acceptance length = 1 + accepted / drafts: tokens a verification step yields, the bonus token included
  (vLLM's own "mean acceptance length");
- per-position acceptance = accepted at position i / drafts.

The text is parsed with ``prometheus_client``'s parser (the exposition format's maintained reader).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import httpx
from prometheus_client.parser import text_string_to_metric_families

PREFIX = "vllm:spec_decode_num_"


@dataclass(frozen=True)
class SpecCounters:
    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted: float = 0.0
    accepted_per_pos: tuple[float, ...] = field(default_factory=tuple)

    def __sub__(self, before: SpecCounters) -> SpecCounters:
        n = max(len(self.accepted_per_pos), len(before.accepted_per_pos))
        pad = lambda xs: list(xs) + [0.0] * (n - len(xs))  # noqa: E731
        return SpecCounters(self.drafts - before.drafts, self.draft_tokens - before.draft_tokens,
                            self.accepted - before.accepted,
                            tuple(a - b for a, b in zip(pad(self.accepted_per_pos), pad(before.accepted_per_pos))))

    def figures(self) -> dict:
        """Acceptance rate, acceptance length and per-position acceptance; None where nothing was drafted."""
        if self.drafts <= 0:
            return {"drafts": 0, "draft_tokens": 0, "accepted_tokens": 0, "acceptance_rate": None,
                    "acceptance_length": None, "acceptance_by_position": []}
        return {"drafts": int(self.drafts), "draft_tokens": int(self.draft_tokens), "accepted_tokens": int(self.accepted),
                "acceptance_rate": self.accepted / self.draft_tokens if self.draft_tokens else None,
                "acceptance_length": 1.0 + self.accepted / self.drafts,
                "acceptance_by_position": [a / self.drafts for a in self.accepted_per_pos]}


def parse_spec_counters(text: str) -> SpecCounters:
    """The spec-decode counters in a ``/metrics`` text, summed over engines (zeros when the server has none:
    speculation off)."""
    totals = {"drafts": 0.0, "draft_tokens": 0.0, "accepted_tokens": 0.0}
    per_pos: dict[int, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if not sample.name.startswith(PREFIX) or not sample.name.endswith("_total"):
                continue
            key = sample.name[len(PREFIX):-len("_total")]
            if key == "accepted_tokens_per_pos":
                pos = int(sample.labels.get("position", 0))
                per_pos[pos] = per_pos.get(pos, 0.0) + sample.value
            elif key in totals:
                totals[key] += sample.value
    positions = tuple(per_pos.get(i, 0.0) for i in range(max(per_pos) + 1)) if per_pos else ()
    return SpecCounters(totals["drafts"], totals["draft_tokens"], totals["accepted_tokens"], positions)


def read_spec_counters(base_url: str, timeout_s: float = 30.0) -> SpecCounters | None:
    """The server's counters now, or None where it has no ``/metrics`` (an endpoint that is not vLLM)."""
    try:
        reply = httpx.get(base_url.rstrip("/") + "/metrics", timeout=timeout_s)
    except (httpx.HTTPError, OSError):
        return None
    if reply.status_code != 200:
        return None
    try:
        return parse_spec_counters(reply.text)
    except ValueError:
        return None
