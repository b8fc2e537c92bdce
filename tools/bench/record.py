"""The run record: the one schema of a measured run.

``record_from`` (tools.bench.run) builds a :class:`RunRecord` from measured timings; compare, bench
and tune set the fields they own (``task_id``, ``settings_key``, ``category``, ...) on it; the store
persists every field in a column of its own (memory.migrations m009 added the columns this model
has beyond the first schema, m010 ``backend``); ``specpilot runs show --json`` prints it. A field is never renamed
or removed: a new field is added, with a default, and ``RECORD_VERSION`` goes up. Records stored
by an older version read back through :meth:`RunRecord.from_stored` (missing fields get their
defaults; keys this version no longer knows are kept under ``legacy``).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["RECORD_VERSION", "PeerFigures", "RunRecord", "JSON_FIELDS"]

# 1: the untyped dict of the first releases (no record_version stored); 2: this model; 3: ``backend`` added
RECORD_VERSION = 3


class PeerFigures(BaseModel):
    """One peer (transformers' assisted generation and prompt lookup, llama.cpp's own modes, the upstream
    packages) timed beside the baseline. ``acceptance`` and ``tokens_per_step`` only where the peer
    reports them (llama-server's draft counts, the upstream runners' steps)."""

    model_config = ConfigDict(extra="forbid")

    wall_time_s: float | None = None
    tokens_per_s: float | None = None
    speedup: float | None = None
    new_tokens: int | None = None
    matches_baseline: bool | None = None
    acceptance: float | None = None
    tokens_per_step: float | None = None
    times: list[float] = Field(default_factory=list)


class RunRecord(BaseModel):
    """One measured run: a method against the baseline on one prompt (every figure from that run)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    record_version: int = RECORD_VERSION
    run_id: str | None = None
    created_at: str | None = None
    task_id: int | None = None
    settings_key: str | None = None
    # what was run
    method: str
    target: str | None = None
    draft: str | None = None
    medusa_heads: str | None = None
    params: dict[str, Any] = Field(default_factory=dict)
    params_source: str | None = None  # given, memory, sized, default, sweep
    sizing: dict[str, str] | None = None  # parameter -> why it has its value (machine-sized defaults)
    settings: dict[str, Any] = Field(default_factory=dict)
    prompt: str | None = None
    chat: bool | None = None
    prompt_ids: list[int] = Field(default_factory=list)
    # what came out
    output_ids: list[int] = Field(default_factory=list)
    output_text: str | None = None
    baseline_output_ids: list[int] = Field(default_factory=list)
    new_tokens: int | None = None
    stopped_by: str | None = None
    matches_baseline: bool | None = None
    first_divergence: dict[str, Any] | None = None
    lossy: bool = False
    # the figures
    wall_time_s: float | None = None
    tokens_per_s: float | None = None
    baseline_wall_time_s: float | None = None
    baseline_tokens_per_s: float | None = None
    speedup: float | None = None
    times: list[float] = Field(default_factory=list)
    baseline_times: list[float] = Field(default_factory=list)
    repeats: int | None = None
    prefill_s: float | None = None
    acceptance_rate: float | None = None
    tokens_drafted: int | None = None
    tokens_accepted: int | None = None
    steps: int | None = None
    mean_accepted_per_step: float | None = None
    drafted_by_position: list[int] = Field(default_factory=list)
    accepted_by_position: list[int] = Field(default_factory=list)
    method_extra: dict[str, Any] = Field(default_factory=dict)
    peers: dict[str, PeerFigures] = Field(default_factory=dict)
    # where it ran
    backend: str = "transformers"  # the engine that ran baseline and method: transformers or llamacpp (GGUF)
    hardware: dict[str, Any] = Field(default_factory=dict)
    dtype: str | None = None
    dtype_reason: str | None = None
    device_map: str | None = None
    versions: dict[str, Any] = Field(default_factory=dict)
    # what compare, bench and tune add
    training_required: str | None = None
    draft_required: str | None = None
    category: str | None = None
    question_id: int | str | None = None
    prompt_set: str | None = None
    sweep: dict[str, Any] | None = None
    # keys of an older record this version no longer knows (read back, never written by this version)
    legacy: dict[str, Any] | None = None

    @model_validator(mode="before")
    @classmethod
    def _nulls_are_defaults(cls, data: Any) -> Any:
        """A stored NULL in a list/dict column reads as the empty default."""
        if isinstance(data, dict):
            data = {k: v for k, v in data.items()
                    if not (v is None and k in cls.model_fields and cls.model_fields[k].default_factory)}
        return data

    @classmethod
    def from_stored(cls, row: dict) -> RunRecord:
        """A record as the store gives it back, from this version or an older one."""
        known = {k: v for k, v in row.items() if k in cls.model_fields}
        unknown = {k: v for k, v in row.items() if k not in cls.model_fields}
        if unknown:
            known["legacy"] = {**(known.get("legacy") or {}), **unknown}
        known.setdefault("method", "unknown")
        if known.get("record_version") is None:
            known["record_version"] = 1
        return cls.model_validate(known)

    def to_store(self) -> dict[str, Any]:
        """The fields as the store takes them (plain JSON types; one column per field)."""
        return self.model_dump(mode="json")


# fields whose values are lists or dicts: the store keeps them as JSON text
JSON_FIELDS = tuple(name for name, f in RunRecord.model_fields.items()
                    if any(t in str(f.annotation) for t in ("list[", "dict[")))
