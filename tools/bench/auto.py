"""``auto``: the method for one prompt, picked from what the fit half measured on prompts like it.

A prompt is described by three figures that cost nothing to compute (no model is loaded):

- ``copy``: prompt lookup's own hit rate on the prompt: the share of its words that the word after the
  latest earlier occurrence of the two words before them predicts (how much of itself a text repeats,
  which is what prompt lookup and lookahead's pool feed on);
- ``symbols``: the share of its characters that are digits or punctuation (code, math and tables, where
  a small draft predicts the target well);
- ``length``: the log of its word count.

Each method's speedup on the prompt is predicted as the kernel-weighted mean of its speedups on the fit
half's prompts (Nadaraya-Watson regression; a Gaussian kernel, its width in the fit prompts' standard
deviations chosen by leaving one fit prompt out at a time, KERNEL_WIDTH without the shipped table), and the
method predicted fastest is run with its parameters sized as ``run`` sizes them. The fit half's figures come
from this machine's own ``specpilot bench --prompts fit`` runs in memory (same dtype, target, engine and draft)
where they cover at least MIN_PROMPTS prompts for two methods or more, else from the table shipped in
``prompts/auto_methods.json`` (measured on the CPU it names, by benchmarks/scripts/fit_auto_methods.py).
The eval half never enters a choice: ``bench --prompts eval --methods auto ...`` reports on prompts auto
was not fitted to.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field, replace
from functools import lru_cache
from importlib import resources

from tools import models
from tools.bench.protocol import hardware_info
from tools.bench.summary import lossless
from tools.engine.params import AUTO

TABLE = "auto_methods.json"  # the bfloat16 table; another dtype's is auto_methods_<dtype>.json (table_file)
FIT_SET = "spec_bench_fit.jsonl"  # the prompt_set of the fit half's bench runs
MIN_PROMPTS = 6  # a method's figures from this machine count where they cover at least this many fit prompts
KERNEL_WIDTH = 1.0  # in standard deviations of the fit prompts' features
FEATURES = ("copy", "symbols", "length")
WORD = re.compile(r"\w+|[^\w\s]")


def prompt_features(text: str) -> dict[str, float]:
    """``copy``, ``symbols`` and ``length`` of a prompt (see the module's docstring)."""
    words = WORD.findall(text.casefold())
    last: dict[tuple[str, str], int] = {}
    hits = tried = 0
    for i in range(2, len(words)):
        key = (words[i - 2], words[i - 1])
        if key in last:
            tried += 1
            hits += words[last[key]] == words[i]
        last[key] = i
    chars = [c for c in text if not c.isspace()]
    symbols = sum(1 for c in chars if not c.isalpha()) / max(1, len(chars))
    return {"copy": hits / max(1, len(words) - 2), "symbols": symbols, "length": math.log(1 + len(words))}


@dataclass
class FitPrompt:
    """One fit-half prompt: its id, category, features and each method's measured speedup on it."""

    question_id: int | str
    category: str
    features: dict[str, float]
    speedups: dict[str, float]
    prompt: str = ""


@dataclass
class AutoChoice:
    """The method picked, the speedup predicted for each method considered, the fit prompts that weighed
    most, and where the fit figures came from."""

    method: str
    predicted: dict[str, float]
    nearest: list[str]
    source: str
    features: dict[str, float] = field(default_factory=dict)

    def reason(self) -> str:
        """One line: what was picked, why, and from which figures."""
        others = ", ".join(f"{m} {s:.2f}x" for m, s in sorted(self.predicted.items(), key=lambda kv: -kv[1])
                           if m != self.method)
        return (f"auto picked {self.method}: predicted {self.predicted[self.method]:.2f}x"
                + (f" against {others}" if others else "")
                + f", from the fit-half prompts weighted toward those most like this one ({', '.join(self.nearest)}; "
                  f"words repeated "
                  f"{100 * self.features.get('copy', 0):.0f}%, digits and punctuation "
                  f"{100 * self.features.get('symbols', 0):.0f}%), {self.source}")


def dtype_name(dtype: str, device_map: str | None = None) -> str:
    """The dtype ``--dtype`` resolves to on this machine ("bfloat16", "float32"), as runs store it."""
    device = "cuda" if str(device_map or "").startswith("cuda") else "cpu"
    return str(models.resolve_dtype(dtype, device)[0]).removeprefix("torch.")


def table_file(dtype: str | None) -> str:
    """The shipped table's file name for ``dtype``: the speedups differ by dtype on one CPU (a multi-token pass
    costs another share of a one-token pass), so each dtype has its own fit."""
    return TABLE if dtype in (None, "bfloat16") else f"auto_methods_{dtype}.json"


@lru_cache(maxsize=4)
def shipped_table(dtype: str | None = None) -> dict:
    """The shipped fit-half table for ``dtype`` (read once), else the bfloat16 one, or {} when the package lacks
    both."""
    for name in dict.fromkeys((table_file(dtype), TABLE)):
        try:
            return json.loads(resources.files("prompts").joinpath(name).read_text(encoding="utf-8"))
        except (FileNotFoundError, OSError, ValueError):
            continue
    return {}


def table_for(match: Match | None) -> dict:
    """The shipped table for ``match``'s dtype (the bfloat16 one without a match)."""
    return shipped_table(match.dtype if match else None)


def table_prompts(table: dict) -> list[FitPrompt]:
    return [FitPrompt(p["question_id"], p["category"], prompt_features(p["prompt"]), dict(p["speedups"]), p["prompt"])
            for p in table.get("prompts", ())]


@dataclass(frozen=True)
class Match:
    """What a stored fit run must share with the run being chosen for: machine, dtype, target, engine, draft."""

    hardware: str  # machine_of(): the GPU, or the CPU with its cores and instruction set (not the threads)
    dtype: str
    target: str
    backend: str = "transformers"
    draft: str | None = None  # the draft the draft method would use


def matching(inp) -> Match:
    """The :class:`Match` of a run, compare or bench input (its device's hardware name, the dtype it resolves to,
    its target, engine and draft)."""
    device = "cuda" if str(inp.device_map or "").startswith("cuda") else "cpu"
    dtype = "gguf" if inp.backend == "llamacpp" else dtype_name(inp.dtype, inp.device_map)
    draft = inp.draft or models.builtin_draft_for(inp.target) or models.DEFAULT_DRAFT
    return Match(machine_of(hardware_info(device)), dtype, inp.target, inp.backend, draft)


def machine_of(hardware: dict) -> str:
    """The machine a run's ``hardware`` names, without the thread count it ran on (a run with ``--threads`` is
    on the same machine): the GPU's name, else the CPU's with its cores and instruction set."""
    if hardware.get("gpu"):
        return str(hardware["gpu"])
    isa = hardware.get("isa") or ""
    return f"{hardware.get('cpu')} ({hardware.get('cpu_cores')} cores, {isa if isinstance(isa, str) else ' '.join(isa)})"


def stored_prompts(store, match: Match | None) -> list[FitPrompt]:
    """This machine's fit-half bench runs in memory with the same dtype, target, engine and draft (the newest per
    prompt and method, its output the target's: identical or a diagnosed near-tie), as fit prompts."""
    if store is None or match is None:
        return []
    try:
        runs = store.find_runs(prompt_set=FIT_SET, target=match.target)
    except Exception:  # noqa: BLE001  (an old or unreadable store: the shipped table answers)
        return []
    by_prompt: dict[object, FitPrompt] = {}
    for run in runs:  # newest first: the first figure per prompt and method stays
        if (machine_of(run.get("hardware") or {}) != match.hardware or run.get("dtype") != match.dtype
                or (run.get("backend") or "transformers") != match.backend or run.get("speedup") is None
                or run.get("method") in (None, "baseline", AUTO) or not lossless(run)
                or (run["method"] == "draft" and run.get("draft") != match.draft)):
            continue
        text = run.get("prompt") or ""
        fit = by_prompt.setdefault(run.get("question_id"), FitPrompt(run.get("question_id"), run.get("category") or "",
                                                                     prompt_features(text), {}, text))
        fit.speedups.setdefault(run["method"], float(run["speedup"]))
    return list(by_prompt.values())


def fit_prompts(store=None, match: Match | None = None) -> tuple[list[FitPrompt], str]:
    """The fit prompts a choice reads and where they came from: this machine's own where they cover at least
    MIN_PROMPTS prompts for two methods, else the shipped table."""
    own = stored_prompts(store, match)
    covered = [m for m in {m for p in own for m in p.speedups} if sum(m in p.speedups for p in own) >= MIN_PROMPTS]
    if len(covered) >= 2:
        for p in own:
            p.speedups = {m: s for m, s in p.speedups.items() if m in covered}
        return own, f"measured on this machine ({len(own)} fit prompts in memory, {match.dtype})"
    table = table_for(match)
    where = table.get("hardware", "another CPU")
    return table_prompts(table), (f"the shipped fit-half table (measured on {where}, {table.get('dtype', '?')}; "
                                  "`specpilot bench --prompts fit` measures this machine's)")


def choose(prompt: str, allowed: list[str] | None = None, store=None, match: Match | None = None,
           found: tuple[list[FitPrompt], str] | None = None) -> AutoChoice | None:
    """The method predicted fastest on ``prompt`` among ``allowed`` (default: every method the fit figures
    have), or None where no fit figures exist for any of them. ``found``: :func:`fit_prompts` already read
    (a bench reads them once for all its prompts). A fit prompt is never its own evidence: on the fit half each
    prompt is predicted from the others (leave one out)."""
    fits, source = found if found is not None else fit_prompts(store, match)
    fits = [p for p in fits if p.prompt != prompt]
    feats = prompt_features(prompt)
    width = float(table_for(match).get("kernel_width") or KERNEL_WIDTH)  # chosen by leave-one-out on the fit half
    predicted, weights = predict(feats, fits, width, allowed)
    if not predicted:
        return None
    best = max(predicted, key=predicted.get)
    order = sorted(range(len(fits)), key=lambda i: -weights[i])[:2]
    nearest = [f"{fits[i].category} q{fits[i].question_id}" for i in order]
    return AutoChoice(best, predicted, nearest, source, feats)


def predict(feats: dict[str, float], fits: list[FitPrompt], width: float = KERNEL_WIDTH,
            allowed: list[str] | None = None) -> tuple[dict[str, float], list[float]]:
    """(each method's predicted speedup, each fit prompt's weight): the kernel-weighted mean of the method's
    speedups on the fit prompts, the features scaled by the fit prompts' standard deviations."""
    methods = sorted({m for p in fits for m in p.speedups if allowed is None or m in allowed})
    if not methods:
        return {}, []
    spread = {}
    for name in FEATURES:
        values = [p.features[name] for p in fits]
        mean = sum(values) / len(values)
        spread[name] = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values)) or 1.0
    weights = [math.exp(-sum(((feats[n] - p.features[n]) / spread[n]) ** 2 for n in FEATURES) / (2 * width ** 2))
               for p in fits]
    predicted = {}
    for method in methods:
        pairs = [(w, p.speedups[method]) for w, p in zip(weights, fits) if method in p.speedups]
        total = sum(w for w, _ in pairs)
        predicted[method] = (sum(w * s for w, s in pairs) / total if total > 1e-12
                             else sum(s for _, s in pairs) / len(pairs))
    return predicted, weights


SELF_DRAFT_LABEL = models.SELF_DRAFT  # the target's own 4-bit copy as the draft


@dataclass
class DraftChoice:
    """Which draft a draft-model run without a given draft uses: the built-in one (``self_draft`` False) or the
    target's own 4-bit copy, and why."""

    self_draft: bool
    reason: str


def choose_draft(inp, store=None) -> DraftChoice:
    """The built-in draft or the target's own 4-bit copy for ``inp.prompt``: the one predicted faster from this
    machine's fit-half runs of both (each draft's measured speedups on the fit prompts most like this one, as
    :func:`choose` weighs them), the built-in draft where either has fewer than MIN_PROMPTS such runs."""
    base = matching(inp)
    small = base.draft
    fits: dict[object, FitPrompt] = {}
    for label, ref in (("small", small), (SELF_DRAFT_LABEL, inp.target)):
        for p in stored_prompts(store, replace(base, draft=ref)):
            if "draft" in p.speedups and p.prompt != inp.prompt:
                fit = fits.setdefault(p.question_id, FitPrompt(p.question_id, p.category, p.features, {}, p.prompt))
                fit.speedups[label] = p.speedups["draft"]
    counts = {label: sum(label in p.speedups for p in fits.values()) for label in ("small", SELF_DRAFT_LABEL)}
    if min(counts.values()) < MIN_PROMPTS:
        return DraftChoice(False, (
            f"draft: {small}, built in; the target's own 4-bit copy (--draft {SELF_DRAFT_LABEL}) is weighed against "
            f"it once this machine's fit half has {MIN_PROMPTS} runs of each ({counts['small']} and "
            f"{counts[SELF_DRAFT_LABEL]} now: `specpilot bench --prompts fit --limit 1 --methods draft --draft "
            f"{SELF_DRAFT_LABEL}`)"))
    width = float(table_for(base).get("kernel_width") or KERNEL_WIDTH)
    predicted, _ = predict(prompt_features(inp.prompt), list(fits.values()), width)
    own = predicted[SELF_DRAFT_LABEL] > predicted["small"]
    names = {"small": small, SELF_DRAFT_LABEL: f"the target's own 4-bit copy ({SELF_DRAFT_LABEL})"}
    pick, other = (SELF_DRAFT_LABEL, "small") if own else ("small", SELF_DRAFT_LABEL)
    return DraftChoice(own, (
        f"draft: {names[pick]}, predicted {predicted[pick]:.2f}x against {predicted[other]:.2f}x for "
        f"{names[other]}, from this machine's fit-half runs of both on the prompts most like this one "
        f"({counts['small']} and {counts[SELF_DRAFT_LABEL]} prompts, {base.dtype})"))
