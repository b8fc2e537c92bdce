"""Train EAGLE heads for the default target on a GPU machine, with the same code `specpilot eagle train` runs.

On the 2-core CPU the head is limited by its training text: the target writes about 12 tokens/s there
and its features over 100k tokens take most of an hour. On a GPU both take seconds, so this script
answers thousands of chat requests with the target, caches its features over them and the shipped
self-distillation files, trains heads (tools.medusa.eagle_train.train_eagle), and measures each head,
the shipped one beside them, on the target's answers to the fit-half Spec-Bench prompts (where a choice
between heads is made; the eval half is left for the CPU's runs).

    python benchmarks/scripts/eagle_gpu.py --model MODEL_DIR --prompts PROMPTS.jsonl --work /tmp/eagle \\
        --generate-seconds 150 --variants fresh8k --out $OUT

PROMPTS.jsonl: one JSON string a line; where the file does not exist it is written first with the
requests the shipped head's text answers (make_prompts: chat and wide varieties, never Spec-Bench).
--variants: any of fresh8k, fresh16k (a new head, draft vocabulary 8,192 / 16,384, two epochs) and
continued (the shipped head trained on), in order; each is written to WORK/heads/NAME and measured.
The text written and every figure go to --out (JSON), the first variant's head too (split in pieces
of 12 MiB; `cat` joins them).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tools.medusa import eagle_train  # noqa: E402
from tools.medusa.data import generate_answers, render_prompt  # noqa: E402
from tools.medusa.eagle_train import EagleTrainConfig, train_eagle  # noqa: E402
from tools.medusa.features import chunk_features  # noqa: E402

TARGET = "qwen2.5-coder-1.5b-instruct"
SHIPPED_DATA = ROOT / "tools" / "data" / "medusa" / TARGET
VARIANTS = {
    "fresh8k": dict(draft_vocab=8192, epochs=2.0, learning_rate=1e-3),
    "fresh16k": dict(draft_vocab=16384, epochs=2.0, learning_rate=1e-3),
    "continued": dict(draft_vocab=8192, epochs=1.0, learning_rate=5e-4),
}


def make_prompts(path: Path) -> int:
    """Write the requests the shipped head's GPU text answers: the chat list of `medusa make-data --variety chat
    --seed 1` after the 768 prompts answered in distill_chat.txt and distill_chat2.txt (up to 6,000), and 1,200
    of the `wide` variety (seed 21), deduplicated and shuffled (seed 5); none comes from Spec-Bench."""
    import random
    from tools.medusa.data import build_prompts
    chat = build_prompts(6000, 1, "chat")
    used = set(chat[:768])
    prompts = list(dict.fromkeys([p for p in chat[768:] if p not in used] + build_prompts(1200, 21, "wide")))
    random.Random(5).shuffle(prompts)
    path.write_text("".join(json.dumps(p) + "\n" for p in prompts))
    return len(prompts)


def load_target(model_dir: str, device: str = "cuda", dtype: str = "bfloat16"):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype)).to(device).eval()
    return SimpleNamespace(model=model, tokenizer=tok, ref=TARGET)


def generate(target, prompts: list[str], path: Path, seconds: float, batch: int, max_new: int, log) -> int:
    """Answer ``prompts`` batch by batch into ``path`` until ``seconds`` have passed; the number answered."""
    t0, done = time.perf_counter(), 0
    path.write_text("")
    prompts = sorted(prompts, key=lambda p: len(render_prompt(target.tokenizer, p)))  # less padding per batch
    order = torch.randperm(len(prompts) // batch, generator=torch.Generator().manual_seed(0)).tolist()
    for b in order:
        texts = generate_answers(target, prompts[b * batch:(b + 1) * batch], max_new, batch)
        with path.open("a") as f:
            f.write("".join(texts))
        done += len(texts)
        log(f"generated {done} answers ({time.perf_counter() - t0:.0f}s)")
        if time.perf_counter() - t0 > seconds:
            break
    return done


def fit_half_answers(target, n_tokens: int = 128, limit: int | None = None) -> list[dict]:
    """The target's greedy answers to the fit-half Spec-Bench prompts, as feature shards of the answer."""
    rows = [json.loads(line) for line in (ROOT / "prompts" / "spec_bench_fit.jsonl").read_text().splitlines() if line]
    rows = rows[:limit]
    prompts = [r["prompt"] for r in rows]
    texts = generate_answers(target, prompts, n_tokens, 64)
    shards = []
    for row, prompt, text in zip(rows, prompts, texts):
        ids = target.tokenizer.encode(text, add_special_tokens=False)
        start = len(target.tokenizer.encode(render_prompt(target.tokenizer, prompt), add_special_tokens=False))
        shard = {k: v[start - 1:].to(target.model.device) for k, v in chunk_features(target.model, ids).items()}
        shards.append({"category": row["category"], "shard": shard})
    return shards


def score(head, answers: list[dict], target) -> dict:
    embed = target.model.get_input_embeddings().weight.detach().float()
    lm_head = target.model.get_output_embeddings().weight.detach().float()
    head = head.float().to(target.model.device)
    by_cat: dict[str, list] = {}
    for a in answers:
        if a["shard"]["hidden"].shape[0] > 4:
            by_cat.setdefault(a["category"], []).append(eagle_train.top1_by_depth(head, [a["shard"]], embed, lm_head))
    per_cat = {c: [round(sum(x[d] for x in v) / len(v), 4) for d in range(3)] for c, v in by_cat.items()}
    mean = [round(sum(v[d] for v in per_cat.values()) / len(per_cat), 4) for d in range(3)]
    return {"mean_top1_by_depth": mean, "by_category": per_cat}


def seconds_per_step(target, config: EagleTrainConfig, steps: int = 20) -> float:
    """Time a training step of a new head on a random 512-token chunk on this machine."""
    from tools.engine.eagle import EagleHead, config_for
    model = target.model
    dev = model.device
    head = EagleHead(config_for(model.config, config.draft_vocab, config.intermediate_size, ()),
                     torch.arange(config.draft_vocab)).to(dev)
    embed = model.get_input_embeddings().weight.detach().float()
    rows, to_draft = eagle_train.draft_rows(model.get_output_embeddings().weight.detach(), head.draft_ids)
    tokens = torch.randint(0, config.draft_vocab, (512,), device=dev)
    shard = {"hidden": torch.randn(512, model.config.hidden_size, device=dev), "greedy": tokens, "tokens": tokens}
    opt = torch.optim.AdamW(head.parameters(), lr=1e-4)
    warm = 3 if steps > 2 else 0
    for i in range(steps + warm):
        if i == warm:
            torch.cuda.synchronize() if dev.type == "cuda" else None
            t0 = time.perf_counter()
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=config.autocast):
            loss, _ = eagle_train.chunk_loss(head, shard, embed, rows, to_draft, config)
        opt.zero_grad()
        loss.backward()
        opt.step()
    torch.cuda.synchronize() if dev.type == "cuda" else None
    return (time.perf_counter() - t0) / steps


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--work", default="/tmp/eagle")
    ap.add_argument("--out", required=True)
    ap.add_argument("--generate-seconds", type=float, default=150)
    ap.add_argument("--batch", type=int, default=384)
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--max-tokens", type=int, default=3_000_000)
    ap.add_argument("--variants", nargs="+", default=["fresh8k"], choices=sorted(VARIANTS))
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--fit-prompts", type=int, default=None, help="only the first N fit-half prompts")
    ap.add_argument("--train-seconds", type=float, default=120, help="fewer epochs where they would take longer")
    ap.add_argument("--epochs-scale", type=float, default=1.0, help="multiply each variant's epochs (a time budget)")
    args = ap.parse_args()
    if not Path(args.prompts).is_file():
        print(f"writing {make_prompts(Path(args.prompts))} prompts to {args.prompts}")
    t_start = time.perf_counter()
    work, out = Path(args.work), Path(args.out)
    work.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    device = torch.cuda.get_device_name(0) if args.device == "cuda" else args.device
    report: dict = {"device": device, "args": vars(args)}

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - t_start:5.0f}s] {msg}", flush=True)

    def save_report() -> None:
        (out / "eagle_gpu.json").write_text(json.dumps(report, indent=1) + "\n")

    target = load_target(args.model, args.device, args.dtype)
    log("target loaded")
    text = work / "distill_gpu.txt"
    if not text.is_file() or not text.stat().st_size:
        prompts = [json.loads(line) for line in Path(args.prompts).read_text().splitlines() if line]
        report["answered"] = generate(target, prompts, text, args.generate_seconds, args.batch, args.max_new_tokens,
                                      log)
    report["text_tokens"] = len(target.tokenizer.encode(text.read_text(), add_special_tokens=False))
    log(f"text: {report['text_tokens']} tokens")
    save_report()
    answers = fit_half_answers(target, limit=args.fit_prompts)
    shipped = eagle_train.load_head(eagle_train.default_head_path(TARGET))
    report["fit_half"] = {"shipped": score(shipped, answers, target)}
    log(f"shipped head on the fit half: {report['fit_half']['shipped']['mean_top1_by_depth']}")
    save_report()
    files = [text] + eagle_train.default_data_files(TARGET) + [SHIPPED_DATA / "distill_chat2.txt"]
    for name in args.variants:
        v = dict(VARIANTS[name])
        v["epochs"] *= args.epochs_scale
        config = EagleTrainConfig(**v, autocast=args.device == "cuda", checkpoint_every=500)
        log(f"{name}: timing a training step")
        per_step = seconds_per_step(target, config, 20 if args.device == "cuda" else 1)
        chunks = min(args.max_tokens, report["text_tokens"] + 262_000) / 512
        if per_step * chunks * config.epochs > args.train_seconds:
            config = config.model_copy(update={"epochs": round(args.train_seconds / (per_step * chunks), 2)})
        log(f"{name}: {per_step * 1000:.1f} ms a step, about {chunks:.0f} chunks, {config.epochs} epochs")
        start = eagle_train.load_head(eagle_train.default_head_path(TARGET)) if name == "continued" else None
        t0 = time.perf_counter()
        summary = train_eagle(target, files, work / "heads" / name, config, max_tokens=args.max_tokens,
                              cache_root=work / "features", log=log, start=start,
                              command=f"benchmarks/scripts/eagle_gpu.py --variants {name} (files: {[f.name for f in files]})")
        head = eagle_train.load_head(work / "heads" / name)
        report.setdefault("variants", {})[name] = {"seconds": round(time.perf_counter() - t0), "held_out":
                                                   summary["held_out"], "tokens": summary["tokens"]}
        report["fit_half"][name] = score(head, answers, target)
        log(f"{name}: held out {summary['held_out']}, fit half {report['fit_half'][name]['mean_top1_by_depth']}")
        save_report()
    if args.variants:
        best = max(args.variants, key=lambda n: sum(report["fit_half"][n]["mean_top1_by_depth"]))
        report["best"] = best
        folder = work / "heads" / best
        data = (folder / eagle_train.HEAD_FILE).read_bytes()
        piece = 12 << 20
        for i in range(0, len(data), piece):
            (out / f"{best}.head{i // piece}").write_bytes(data[i:i + piece])
        (out / f"{best}.eagle_config.json").write_text((folder / eagle_train.CONFIG_FILE).read_text())
    import lzma
    (out / "distill_gpu.txt.xz").write_bytes(lzma.compress(text.read_bytes(), preset=6))
    save_report()
    log("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
