"""Check the decoders on a GPU: exactness on CUDA in float32 / bfloat16 / float16, loading with
``device_map="auto"``, and what one forward pass costs there for a model of the default target's shape.

Needs only torch, transformers, accelerate, pydantic and safetensors (not the agent's packages), so it
runs on a bare GPU machine:

    python benchmarks/scripts/gpu_check.py --out gpu_check.json                       # CUDA when there is one
    python benchmarks/scripts/gpu_check.py --device cpu --skip-timing                 # the same checks on a CPU
    python benchmarks/scripts/gpu_check.py --shape-from FOLDER                        # timing model of FOLDER's shape

1. Exactness: tiny random Qwen2 and Llama targets (peaked logits), a perturbed copy as draft, random
   Medusa heads and EAGLE heads (a random one, and one trained on the CPU on the target's own continuation
   of the check prompt, so that its trees hold long accepted paths); every method's greedy output is
   compared with the target's own greedy output (ours and transformers' ``generate``); each method also
   runs once with sampling (temperature 0.8).
2. ``device_map="auto"``: a tiny checkpoint with a tokenizer is saved and loaded through
   tools.models.load, then decoded with every method.
3. Timing (``--shape-from``: a folder with config.json and tokenizer files, e.g. the default target's
   converted folder): a model of that shape with random weights in bfloat16, loaded with
   ``device_map="auto"``. Reported: the forward-cost curve (seconds per pass over n new tokens after 512
   cached), the lookahead sizing it implies, and our plain decoding against transformers' ``generate``.
   Random weights make acceptance meaningless, so no speedups are reported from it. EAGLE's step there uses
   the head shipped for the default target when its shape fits. FOLDER needs no tokenizer: without one, a
   small word-level tokenizer stands in (the weights are random anyway).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(REPO / "tests")]  # tests/tiny_models.py: the tiny random models

import torch  # noqa: E402

from tools.engine import autoregressive, eagle, lookahead, medusa, prompt_lookup, speculative  # noqa: E402
from tools.engine.eagle import EagleHead, config_for  # noqa: E402
from tools.engine.lookahead import LookaheadParams  # noqa: E402
from tools.engine.medusa import MedusaHeads, MedusaParams  # noqa: E402
from tools.engine.params import EagleParams  # noqa: E402
from tools.engine.prompt_lookup import PromptLookupParams  # noqa: E402
from tools.engine.types import GenerationSettings  # noqa: E402
from tiny_models import make_tiny_model, perturbed_copy  # noqa: E402

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
VOCAB = 512


def tiny_model(kind: str, seed: int = 0):
    return make_tiny_model(kind, layers=2, seed=seed, vocab=VOCAB, hidden=64, max_positions=2048)


def perturbed(model, noise: float = 0.05, seed: int = 1):
    return perturbed_copy(model, noise, seed)


def random_heads(model, seed: int = 2, num_heads: int = 4) -> MedusaHeads:
    torch.manual_seed(seed)
    heads = MedusaHeads(model.config.hidden_size, model.config.vocab_size, num_heads, 1)
    with torch.no_grad():
        for p in heads.parameters():
            p.normal_(0, 0.05)
    return heads.to(device=model.device, dtype=model.dtype).eval()


def random_eagle_head(config, seed: int = 4) -> EagleHead:
    torch.manual_seed(seed)
    head = EagleHead(config_for(config, config.vocab_size, 2 * config.hidden_size), torch.arange(config.vocab_size))
    head.init_identity()
    return head.eval()


def trained_eagle_head(kind: str, prompt: list[int], max_new: int) -> EagleHead:
    """A head trained on the CPU in float32 on the tiny target's own greedy continuation of ``prompt``
    (read from several starting points), so that the decoders' deep accepted paths get exercised."""
    from tools.medusa.eagle_train import EagleTrainConfig, train_head
    from tools.medusa.features import cache_chunk_features, load_chunk_features

    model = tiny_model(kind)
    greedy = GenerationSettings(max_new_tokens=max_new + 8)
    seq = list(prompt) + autoregressive.generate(model, prompt, greedy).output_ids
    chunks = [seq[i:] for i in range(0, 24, 3)]
    embed, lm_head = model.get_input_embeddings().weight.detach(), model.get_output_embeddings().weight.detach()
    config = EagleTrainConfig(intermediate_size=2 * model.config.hidden_size, draft_vocab=VOCAB, epochs=40,
                              held_out_chunks=1, learning_rate=3e-3, checkpoint_every=10_000, autocast=False)
    with tempfile.TemporaryDirectory() as tmp:
        shards = load_chunk_features(cache_chunk_features(model, chunks, Path(tmp) / "features"))
        train_head(shards, embed, lm_head, model.config, Path(tmp) / "head", config, "gpu-check", chunks, {})
        from tools.medusa.eagle_train import load_head

        return load_head(Path(tmp) / "head")


class OracleHeads:
    """Heads that know the target's greedy continuation (found by the nearest hidden state), so the
    verification and acceptance paths run with long accepted paths; head d puts the truth at rank ranks[d]."""

    shared_projection = False
    num_layers = 1

    def __init__(self, model, prompt, n_tokens, ranks=(0, 1, 0, 2)):
        settings = GenerationSettings(max_new_tokens=n_tokens + len(ranks) + 2)
        self.seq = list(prompt) + autoregressive.generate(model, prompt, settings).output_ids
        with torch.inference_mode():
            ids = torch.tensor([self.seq], device=model.device)
            self.table = model.base_model(input_ids=ids, use_cache=False).last_hidden_state[0].float()
        self.num_heads, self.ranks = len(ranks), list(ranks)

    def topk(self, hidden, depth, k):
        t = int(((self.table - hidden.float()[None]) ** 2).sum(-1).argmin())
        out = torch.zeros(depth, k, dtype=torch.long)
        for d in range(depth):
            truth = self.seq[min(t + d + 2, len(self.seq) - 1)]
            others = [x for x in range(VOCAB) if x != truth][: k - 1]
            row = others[: self.ranks[d]] + [truth] + others[self.ranks[d]:]
            out[d] = torch.tensor(row[:k])
        return out


def prompt_ids(length: int = 48, seed: int = 3) -> list[int]:
    """A prompt with repeats in it, so that prompt lookup and the n-gram pool find matches."""
    g = torch.Generator().manual_seed(seed)
    base = torch.randint(0, VOCAB, (length // 2,), generator=g).tolist()
    return base + base[: length // 4] + torch.randint(0, VOCAB, (length - len(base) - length // 4,), generator=g).tolist()


def methods(target, draft, heads, oracle=None, eagle_heads=None):
    """name -> function(prompt, settings) returning a DecodeResult. ``eagle_heads``: (random, trained)."""
    extra = {"medusa (oracle heads, tree auto)": lambda p, s: medusa.generate(
        target, oracle, p, s, MedusaParams(tree="auto"))} if oracle is not None else {}
    if eagle_heads is not None:
        rand, trained = eagle_heads
        extra |= {
            "eagle (random head)": lambda p, s: eagle.generate(target, rand, p, s, EagleParams(eagle_lookup=0)),
            "eagle (trained head)": lambda p, s: eagle.generate(target, trained, p, s, EagleParams(eagle_lookup=0)),
            "eagle (trained head, lookup branch)": lambda p, s: eagle.generate(target, trained, p, s, EagleParams()),
        }
    return {
        "draft model k=4": lambda p, s: speculative.generate(target, draft, p, s, k=4),
        **extra,
        "medusa (tree auto)": lambda p, s: medusa.generate(target, heads, p, s, MedusaParams(tree="auto")),
        "medusa (tree cpu8)": lambda p, s: medusa.generate(target, heads, p, s, MedusaParams(tree="cpu8")),
        "lookahead W5 N4 G2": lambda p, s: lookahead.generate(
            target, p, s, LookaheadParams(window=5, ngram=4, guess=2).check()),
        "lookahead W15 N5 G5 (no lookup)": lambda p, s: lookahead.generate(
            target, p, s, LookaheadParams(window=15, ngram=5, guess=5, prompt_lookup=0).check()),
        "prompt lookup": lambda p, s: prompt_lookup.generate(target, p, s, PromptLookupParams().check()),
    }


def first_difference(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def hf_greedy(model, prompt: list[int], max_new: int) -> list[int]:
    ids = torch.tensor([prompt], device=model.device)
    with torch.inference_mode():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new, min_new_tokens=max_new,
                             do_sample=False, pad_token_id=0)
    return out[0, len(prompt):].tolist()


def check_exactness(device: str, dtypes: list[str], max_new: int) -> list[dict]:
    rows = []
    for kind in ("qwen2", "llama"):
        for dname in dtypes:
            target = tiny_model(kind).to(device=device, dtype=DTYPES[dname])
            draft = perturbed(target, noise=0.05)
            heads = random_heads(target)
            prompt = prompt_ids()
            oracle = OracleHeads(target, prompt, max_new)
            eagle_heads = (random_eagle_head(target.config), trained_eagle_head(kind, prompt, max_new))
            greedy = GenerationSettings(max_new_tokens=max_new)
            sampled = GenerationSettings(max_new_tokens=max_new, temperature=0.8, top_p=0.95, seed=5)
            base = autoregressive.generate(target, prompt, greedy).output_ids
            hf = hf_greedy(target, prompt, max_new)
            rows.append(dict(model=kind, dtype=dname, method="plain (ours) vs transformers generate",
                             identical=base == hf, first_difference=first_difference(base, hf),
                             tokens_per_step=1.0, sampling_ok=True))
            for name, run in methods(target, draft, heads, oracle, eagle_heads).items():
                row = dict(model=kind, dtype=dname, method=name)
                try:
                    r = run(prompt, greedy)
                    row.update(identical=r.output_ids == base, first_difference=first_difference(r.output_ids, base),
                               tokens_per_step=round(r.mean_accepted_per_step, 2))
                    s = run(prompt, sampled)
                    row["sampling_ok"] = len(s.output_ids) == max_new
                except Exception as exc:  # report and go on: one broken method must not hide the others
                    row.update(identical=False, error=f"{type(exc).__name__}: {exc}",
                               trace=traceback.format_exc(limit=4))
                rows.append(row)
    return rows


def word_tokenizer(size: int):
    """A word-level tokenizer of ``size`` words ("w0" ... ): enough to save and load a checkpoint."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    raw = Tokenizer(models.WordLevel({f"w{i}": i for i in range(size)}, unk_token="w0"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=raw, unk_token="w0", eos_token="w1")


def shaped_tokenizer(shape_from: Path, size: int):
    """The folder's own tokenizer, or a word-level stand-in where it has none."""
    from transformers import AutoTokenizer

    if not any((shape_from / f).is_file() for f in ("tokenizer.json", "vocab.json", "tokenizer.model")):
        return word_tokenizer(size)
    return AutoTokenizer.from_pretrained(str(shape_from))


def shaped_eagle_head(config) -> tuple[EagleHead, str]:
    """The EAGLE head shipped for the default target where it fits ``config``, else a random one of its shape."""
    from tools.medusa.eagle_train import SHIPPED, load_head

    folder = SHIPPED / "qwen2.5-coder-1.5b-instruct"
    if folder.is_dir():
        head = load_head(folder)
        if head.config.hidden_size == config.hidden_size and int(head.draft_ids.max()) < config.vocab_size:
            return head, "shipped head"
    torch.manual_seed(0)
    size = min(8192, config.vocab_size)
    return EagleHead(config_for(config, size, 2048), torch.arange(size)).eval(), "random head"


def save_tiny_checkpoint(folder: Path, tokenizer_from: Path | None) -> None:
    """A tiny Qwen2 checkpoint with a tokenizer (copied from ``tokenizer_from`` or a small word-level one)."""
    model = tiny_model("qwen2")
    if tokenizer_from is not None:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(tokenizer_from))
        model.resize_token_embeddings(len(tok))
    else:
        tok = word_tokenizer(VOCAB)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)


def check_device_map_auto(device: str, max_new: int) -> list[dict]:
    """Load a saved tiny checkpoint through tools.models.load (device_map="auto" on a GPU) in float32
    and with dtype "auto", then decode with every method."""
    from tools import models

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "tiny"
        save_tiny_checkpoint(folder, None)
        for dtype in ("float32", "auto"):
            loaded = models.load(str(folder), dtype=dtype, device_map="auto" if device != "cpu" else None)
            target = loaded.model
            draft = perturbed(target)
            heads = random_heads(target)
            prompt = prompt_ids()
            greedy = GenerationSettings(max_new_tokens=max_new)
            base = autoregressive.generate(target, prompt, greedy).output_ids
            info = dict(loaded_device=loaded.device, dtype=loaded.dtype, dtype_reason=loaded.dtype_reason,
                        hf_device_map=getattr(target, "hf_device_map", None))
            eagle_heads = (random_eagle_head(target.config), trained_eagle_head("qwen2", prompt, max_new))
            for name, run in methods(target, draft, heads, OracleHeads(target, prompt, max_new), eagle_heads).items():
                row = dict(method=name, **info)
                try:
                    r = run(prompt, greedy)
                    row.update(identical=r.output_ids == base, first_difference=first_difference(r.output_ids, base),
                               tokens_per_step=round(r.mean_accepted_per_step, 2))
                except Exception as exc:
                    row.update(identical=False, error=f"{type(exc).__name__}: {exc}",
                               trace=traceback.format_exc(limit=4))
                rows.append(row)
    return rows


def timing(shape_from: Path, device: str, max_new: int) -> dict:
    """Forward-cost curve and plain decoding speed for a random model of ``shape_from``'s shape."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from tools import models
    from tools.engine.cost_curve import flat_tokens, forward_cost_curve, suggest_lookahead_params
    from tools.bench.peers import hf_plain

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "shaped"
        config = AutoConfig.from_pretrained(str(shape_from))
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
        model.save_pretrained(folder)
        shaped_tokenizer(shape_from, config.vocab_size).save_pretrained(folder)
        del model
        t = time.perf_counter()
        loaded = models.load(str(folder), dtype="bfloat16", device_map="auto" if device != "cpu" else None)
        load_s = time.perf_counter() - t
    target = loaded.model
    curve = forward_cost_curve(target, sizes=(1, 2, 4, 8, 16, 32, 64, 96, 128, 192, 256), cache_len=512, repeats=10)
    params, why = suggest_lookahead_params(curve)
    prompt = torch.randint(0, config.vocab_size, (200,), generator=torch.Generator().manual_seed(0)).tolist()
    settings = GenerationSettings(max_new_tokens=max_new)
    runs = {"ours": [], "transformers": []}
    autoregressive.generate(target, prompt, settings)  # warm-up
    hf_plain(target, prompt, settings)
    for _ in range(3):  # alternate, so drift touches both
        runs["ours"].append(autoregressive.generate(target, prompt, settings))
        runs["transformers"].append(hf_plain(target, prompt, settings))
    plain = {k: dict(tokens_per_s=round(max(r.tokens_per_s for r in v), 1),
                     decode_ms_per_token=round(1000 * min(r.decode_s / max(r.new_tokens - 1, 1) for r in v), 2))
             for k, v in runs.items()}
    steps = {}
    heads = random_heads(target, num_heads=4)
    ehead, ehead_kind = shaped_eagle_head(config)
    step_methods = {
        f"eagle ({ehead_kind}, depth 5, 10 nodes)": lambda: eagle.generate(target, ehead, prompt, settings,
                                                                           EagleParams(eagle_lookup=0)),
        "medusa (random heads, tree auto)": lambda: medusa.generate(target, heads, prompt, settings,
                                                                   MedusaParams(tree="auto")),
        "lookahead W15 N5 G5 + 2 lookup drafts": lambda: lookahead.generate(target, prompt, settings,
                                                                          LookaheadParams().check()),
        f"lookahead {params.window}/{params.ngram}/{params.guess} (suggested)": lambda: lookahead.generate(
            target, prompt, settings, params),
        "prompt lookup": lambda: prompt_lookup.generate(target, prompt, settings, PromptLookupParams().check()),
    }
    for name, run in step_methods.items():
        try:
            run()  # warm-up
            r = min((run() for _ in range(2)), key=lambda r: r.decode_s)
            steps[name] = dict(ms_per_step=round(1000 * r.decode_s / max(r.steps, 1), 2),
                               tokens_per_step=round(r.mean_accepted_per_step, 2),
                               break_even_tokens_per_step=round(r.decode_s / max(r.steps, 1)
                                                                / (plain["ours"]["decode_ms_per_token"] / 1000), 2))
        except Exception as exc:
            steps[name] = dict(error=f"{type(exc).__name__}: {exc}")
    return dict(shape=str(config.model_type), layers=config.num_hidden_layers, hidden=config.hidden_size,
                vocab=config.vocab_size, dtype=loaded.dtype, device=loaded.device, load_s=round(load_s, 1),
                cost_curve_ms={n: round(1000 * s, 3) for n, s in curve.items()},
                cost_ratio={n: round(s / curve[1], 2) for n, s in curve.items()},
                flat_tokens=flat_tokens(curve), lookahead_suggestion=params.model_dump(), suggestion_reason=why,
                plain_decoding=plain, step_cost_random_weights=steps)


def hardware(device: str) -> dict:
    info = dict(torch=torch.__version__, python=platform.python_version(), device=device)
    try:
        import transformers

        info["transformers"] = transformers.__version__
    except ImportError:
        pass
    if device.startswith("cuda"):
        info["gpu"] = torch.cuda.get_device_name(0)
        info["cuda"] = torch.version.cuda
    return info


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtypes", default="float32,bfloat16,float16")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--shape-from", default=None, help="folder with config.json + tokenizer for the timing part")
    p.add_argument("--skip-timing", action="store_true")
    p.add_argument("--skip-checks", action="store_true", help="only the timing part")
    p.add_argument("--timing-tokens", type=int, default=128)
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    report: dict = dict(hardware=hardware(a.device))
    t = time.perf_counter()
    checks = not a.skip_checks
    report["exactness"] = check_exactness(a.device, a.dtypes.split(","), a.max_new_tokens) if checks else []
    report["device_map_auto"] = check_device_map_auto(a.device, a.max_new_tokens) if checks else []
    report["checks_s"] = round(time.perf_counter() - t, 1)
    if a.out:
        Path(a.out).write_text(json.dumps(report, indent=1))
    if a.shape_from and not a.skip_timing:
        try:
            report["timing"] = timing(Path(a.shape_from), a.device, a.timing_tokens)
        except Exception as exc:
            report["timing"] = dict(error=f"{type(exc).__name__}: {exc}", trace=traceback.format_exc(limit=6))
    if a.out:
        Path(a.out).write_text(json.dumps(report, indent=1))

    print(json.dumps(report["hardware"]))
    print(f"{'model':6} {'dtype':9} {'method':34} {'identical':9} {'first diff':10} {'tok/step':8} sampling")
    for r in report["exactness"]:
        print(f"{r['model']:6} {r['dtype']:9} {r['method']:34} {str(r['identical']):9} "
              f"{str(r.get('first_difference')):10} {str(r.get('tokens_per_step')):8} "
              f"{r.get('sampling_ok', r.get('error', ''))}")
    for r in report["device_map_auto"]:
        print(f"device_map=auto {r['loaded_device']} {r['dtype']:9} {r['method']:34} {r['identical']!s:6} "
              f"{str(r.get('first_difference')):5} {r.get('tokens_per_step', r.get('error', ''))}")
    if "timing" in report:
        print(json.dumps(report["timing"], indent=1))
    bad = [r for r in report["exactness"] + report["device_map_auto"] if "error" in r]
    for r in bad:
        print(r.get("trace", ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
