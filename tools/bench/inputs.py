"""What a measurement is asked for, with no torch behind it: the input models of run and compare (the
`run_method` and `compare_methods` tools' schemas), the engines, the demo prompt, prompt files, and
the peers' labels. The agent's tools, the MCP server and the command line read these at start-up;
the modules that measure (and load torch) import them from here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

from tools import models
from tools.engine.params import METHOD_NAMES, MethodName, RunMethodName
from tools.engine.types import GenerationSettings
from tools.errors import ParameterError

SELF_DRAFT = models.SELF_DRAFT  # --draft self-q4: the target's own 4-bit copy (its GGUF on llama.cpp) drafts for it
BACKENDS = ("transformers", "llamacpp")
BackendName = Literal["transformers", "llamacpp"]
# the one bound on new tokens is GenerationSettings' (tools.engine.types); read it from that field
MAX_NEW_TOKENS = next(m.le for m in GenerationSettings.model_fields["max_new_tokens"].metadata if hasattr(m, "le"))

# the prompt of the demo and the default prompt of `specpilot run`
DEMO_PROMPT = (
    "Write a Python function `merge_intervals(intervals)` that merges overlapping intervals "
    "and returns them sorted. Include a docstring and a short example."
)

PEERS_DESCRIPTION = ("also time the reference implementations beside ours; the engine's own modes: transformers' "
                     "assisted generation and prompt lookup, or on "
                     "llamacpp llama.cpp's plain decoding and its prompt-lookup mode (and its draft-simple and n-gram "
                     "modes once `specpilot peers setup llama.cpp` built llama-server); for medusa and lookahead on a "
                     "Llama target also the upstream medusa-llm and lade packages, in venvs `specpilot peers setup` made")


# the peers timed beside ours (tools.bench.peers, tools.bench.upstream, tools.bench.llamacpp_server): record key -> label
PEER_LABELS = {
    "hf_assisted": "transformers assisted",
    "hf_assisted_int8": "transformers assisted (int8 draft)",
    "hf_prompt_lookup": "transformers prompt lookup",
    "llamacpp_plain": "llama.cpp plain",
    "llamacpp_prompt_lookup": "llama.cpp prompt lookup",
    # the upstream reference packages in their own venvs
    "upstream_medusa": "medusa-llm (upstream)",
    "upstream_lade": "lade (upstream)",
    "upstream_plain": "transformers 4.34 plain (peer venv)",
    # llama.cpp's own modes in llama-server
    "llamacpp_server_plain": "llama-server plain",
    "llamacpp_draft_simple": "llama.cpp draft-simple",
    "llamacpp_ngram_simple": "llama.cpp ngram-simple",
    "llamacpp_ngram_map_k": "llama.cpp ngram-map-k",
    "llamacpp_ngram_mod": "llama.cpp ngram-mod",
}


class MeasureOptions(BaseModel):
    """Models and settings every measurement shares (run, compare, bench, tune); defaults live here."""

    model_config = ConfigDict(extra="forbid")

    backend: BackendName = Field("transformers", description="the engine: transformers (default) or llamacpp (the "
                                                              "GGUF files run by llama.cpp, not dequantised)")
    target: str = models.DEFAULT_TARGET
    draft: str | None = Field(None, description="draft model for 'draft' and the assisted peer (default: built-in); "
                                               f"{SELF_DRAFT}: the target's own 4-bit copy on llama.cpp")
    medusa_heads: str | None = Field(None, description="Medusa heads folder (default: trained or shipped heads)")
    max_new_tokens: int = Field(128, ge=1, le=MAX_NEW_TOKENS)
    temperature: float = Field(0.0, ge=0.0, le=100.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(0, ge=0)
    seed: int = 0
    chat: bool = Field(True, description="apply the model's chat template (False: raw prompt)")
    dtype: str = "auto"
    device_map: str | None = None
    threads: int | None = Field(None, ge=1)
    repeats: int = Field(1, ge=1, le=50)
    warmup: int = Field(1, ge=0, le=5)
    _drafts_itself: bool = PrivateAttr(False)  # draft was SELF_DRAFT: resolved again once a saved target is merged

    @property
    def self_draft(self) -> bool:
        """Whether the draft is the target's own 4-bit copy (given as SELF_DRAFT)."""
        return self._drafts_itself

    def resolved_again(self, merged: dict) -> dict:
        """``merged`` (this input's fields with saved settings filled in) with the draft still SELF_DRAFT where it
        was, so that it becomes the merged target's own copy, not the one resolved before the merge."""
        return {**merged, "draft": SELF_DRAFT} if self._drafts_itself and "draft" in merged else merged

    @model_validator(mode="after")
    def _self_draft(self):
        """``draft`` SELF_DRAFT: the target drafts for itself from its own 4-bit GGUF copy on llama.cpp (QSpec's
        self-speculation with a low-bit copy): the draft is the target, its ``draft_quant`` gguf unless given."""
        if self.draft != SELF_DRAFT:
            return self
        self.draft, self._drafts_itself = self.target, True
        params = getattr(self, "params", None)
        if not isinstance(params, dict) or self.backend != "transformers":  # llama.cpp drafts from the GGUF anyway
            return self
        if hasattr(self, "method"):  # one method's own parameters (run; auto keeps them where it picks draft)
            if self.method in ("draft", "auto"):
                params.setdefault("draft_quant", "gguf")
        elif "draft" in (getattr(self, "methods", None) or ()) and isinstance(params.get("draft", {}), dict):
            params.setdefault("draft", {}).setdefault("draft_quant", "gguf")
        return self


class RunInput(MeasureOptions):
    """One measured run: a method and the baseline on the same prompt and settings."""

    method: RunMethodName = Field(..., description="the method to run; auto: the one predicted fastest on this prompt "
                                                 "from the fit half's measured figures (tools.bench.auto), said why")
    prompt: str = Field(..., min_length=1)
    params: dict = Field(default_factory=dict, description="the method's own parameters")
    peers: bool = Field(False, description=PEERS_DESCRIPTION)


class CompareInput(MeasureOptions):
    """One prompt, identical generation settings, several methods, each measured against the baseline."""

    prompt: str = Field(..., min_length=1)
    methods: list[MethodName] = Field(default_factory=lambda: list(METHOD_NAMES), min_length=1,
                                      description="methods to compare (default: all of them, the baseline included)")
    params: dict[str, dict] = Field(default_factory=dict,
                                    description="each method's own parameters; missing ones come from memory")
    peers: bool = Field(False, description=PEERS_DESCRIPTION)


def read_prompt_file(path: str | Path, what: str = "prompt file") -> str:
    """The text of a prompt file (UTF-8, a byte-order mark dropped); a SpecpilotError naming the file
    when it is missing, a folder, unreadable or not UTF-8."""
    file = Path(path).expanduser()
    if file.is_dir():
        raise ParameterError(f"{what} {file} is a folder, not a file", hint="give the path of a text file")
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
