"""Carry the default target to the device machine in pieces small enough for its 64 MiB calls.

The offline target's bfloat16 weights were converted from a 4-bit-per-weight GGUF file: inside each
block of 32 weights of a 4-bit tensor there are at most 16 distinct values, on a near-uniform grid. So
each weight travels as a 4-bit code with a float32 scale and offset per block (0.75 bytes a weight
instead of 2), the tensors quantized with 6 bits (more levels) as an 8-bit code per block of 16, and
small tensors (norms, biases) as they are. Rebuilt, a weight is within about one bfloat16 step of the
target's (relative error 0.2-0.4% per tensor, the size of bfloat16's own rounding); `verify` measures
what that does to the target's features and greedy tokens over a chunk of text.

    python benchmarks/scripts/gpu_carry.py pack MODEL_DIR OUT_DIR [--piece-mib 56]
    cat OUT_DIR/piece0* | xz -1 -T2 | split -b 56M -d -a 3 - Z_DIR/piece    # 1477 MiB -> about 1250
    python benchmarks/scripts/gpu_carry.py verify MODEL_DIR OUT_DIR
    python benchmarks/scripts/gpu_carry.py unpack OUT_DIR MODEL_OUT_DIR        # on the device: pieces -> model.safetensors
"""

from __future__ import annotations

import argparse
import json
import lzma
import shutil
import sys
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

PACKED = "packed.safetensors"
XZ_MAGIC = b"\xfd7zXZ\x00"


def _pack4(w: torch.Tensor, block: int = 32):
    v = w.float().reshape(-1, block)
    s, _ = v.sort(1)
    gaps = s.diff(1)
    real = torch.where(gaps > s.abs().amax(1, keepdim=True) * 1e-3, gaps, torch.full_like(gaps, float("inf")))
    step = real.amin(1, keepdim=True)
    lo, hi = s[:, :1], s[:, -1:]
    step = torch.where(torch.isinf(step), torch.ones_like(step), step)
    step = torch.where((hi - lo) / step > 15.5, ((hi - lo) / 15).clamp_min(1e-30), step)
    code = ((v - lo) / step).round().clamp(0, 15)
    cd, vd = code.double(), v.double()
    cm, vm = cd.mean(1, keepdim=True), vd.mean(1, keepdim=True)
    var = ((cd - cm) ** 2).mean(1, keepdim=True)
    scale = torch.where(var > 0, ((cd - cm) * (vd - vm)).mean(1, keepdim=True) / var.clamp_min(1e-30),
                        torch.zeros_like(var))
    offset = vm - scale * cm
    code = code.to(torch.uint8).flatten()
    return code[0::2] | (code[1::2] << 4), scale.float(), offset.float()


def _pack8(w: torch.Tensor, block: int = 16):
    v = w.float().reshape(-1, block)
    lo, hi = v.amin(1, keepdim=True), v.amax(1, keepdim=True)
    scale = ((hi - lo) / 255).clamp_min(1e-30)
    code = ((v - lo) / scale).round().clamp(0, 255).to(torch.uint8)
    return code.flatten(), scale.half(), lo.half()


def unpack_tensor(packed: dict, name: str, meta: dict) -> torch.Tensor:
    kind, shape = meta["kind"], meta["shape"]
    if kind == "raw":
        return packed[name + ".raw"]
    code, scale, offset = (packed[name + s] for s in (".code", ".scale", ".offset"))
    if kind == "q4":
        code = torch.stack([code & 15, code >> 4], 1).flatten()
        block = 32
    else:
        block = 16
    values = scale.float() * code.reshape(-1, block).float() + offset.float()
    return values.to(torch.bfloat16).reshape(shape)


def pack(model_dir: Path, out: Path, piece_mib: int) -> None:
    out.mkdir(parents=True, exist_ok=True)
    tensors, metas = {}, {}
    with safe_open(str(model_dir / "model.safetensors"), "pt") as f:
        for name in f.keys():
            w = f.get_tensor(name)
            if w.numel() < 1 << 16 or w.numel() % 32:
                tensors[name + ".raw"], metas[name] = w.contiguous(), {"kind": "raw", "shape": list(w.shape)}
                continue
            for kind, packer in (("q4", _pack4), ("q8", _pack8)):  # 8-bit where 4 bits lose more than 0.5%
                parts = dict(zip((name + ".code", name + ".scale", name + ".offset"), packer(w)))
                meta = {"kind": kind, "shape": list(w.shape)}
                rebuilt = unpack_tensor(parts, name, meta).float()
                rel = float((rebuilt - w.float()).norm() / w.float().norm().clamp_min(1e-30))
                if rel <= 0.005:
                    break
            meta["relative_error"] = round(rel, 5)
            metas[name] = meta
            tensors.update(parts)
            print(f"{name} {kind} {rel:.4f}", flush=True)
    save_file(tensors, str(out / PACKED), metadata={"tensors": json.dumps(metas)})
    data = (out / PACKED).read_bytes()
    piece = piece_mib << 20
    for i in range(0, len(data), piece):
        (out / f"piece{i // piece:03d}").write_bytes(data[i: i + piece])
    (out / PACKED).unlink()
    for extra in ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                  "chat_template.jinja"):
        if (model_dir / extra).is_file():
            shutil.copy(model_dir / extra, out / extra)
    print(f"{len(data) / 2**20:.0f} MiB in {len(range(0, len(data), piece))} pieces of {piece_mib} MiB")


def unpack(folder: Path, model_out: Path) -> None:
    """Join ``piece*`` files (in one folder, or spread over several given as FOLDER:FOLDER2) and write a model."""
    pieces = sorted(p for part in str(folder).split(":") for p in Path(part).glob("piece*"))
    model_out.mkdir(parents=True, exist_ok=True)
    joined = model_out / PACKED
    with joined.open("wb") as f:
        for p in sorted(pieces, key=lambda p: p.name):
            f.write(p.read_bytes())
    if joined.read_bytes()[:6] == XZ_MAGIC:  # pieces of an xz stream (`cat piece* | xz -1 | split -b 56M`)
        joined.write_bytes(lzma.decompress(joined.read_bytes()))
    with safe_open(str(joined), "pt") as f:
        metas = json.loads(f.metadata()["tensors"])
    packed = load_file(str(joined))
    save_file({n: unpack_tensor(packed, n, m).contiguous() for n, m in metas.items()},
              str(model_out / "model.safetensors"),
              metadata={"format": "pt"})
    joined.unlink()
    src = Path(str(folder).split(":")[0])
    for extra in src.glob("*.json*"):
        shutil.copy(extra, model_out / extra.name)
    if (src / "chat_template.jinja").is_file():
        shutil.copy(src / "chat_template.jinja", model_out / "chat_template.jinja")


def verify(model_dir: Path, folder: Path) -> None:
    """The original and the rebuilt target's final features and greedy tokens over some shipped text, in float32."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    rebuilt_dir = folder.parent / (folder.name + "_rebuilt")
    unpack(folder, rebuilt_dir)
    tok = AutoTokenizer.from_pretrained(model_dir)
    shipped = Path(__file__).resolve().parents[2] / "tools/data/medusa/qwen2.5-coder-1.5b-instruct"
    text = (shipped / "distill_chat2.txt").read_text()
    ids = torch.tensor([tok.encode(text)[:512]])
    outs = []
    for d in (model_dir, rebuilt_dir):
        m = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32)
        with torch.no_grad():
            h = m.model(input_ids=ids).last_hidden_state[0]
            outs.append((h, m.lm_head(h).argmax(-1)))
        del m
    (h0, g0), (h1, g1) = outs
    cos = torch.nn.functional.cosine_similarity(h0, h1, dim=-1)
    print(json.dumps({"tokens": ids.shape[1], "greedy_same": float((g0 == g1).float().mean()),
                      "feature_cosine_mean": float(cos.mean()), "feature_cosine_min": float(cos.min()),
                      "feature_relative_error": float((h1 - h0).norm() / h0.norm())}))
    shutil.rmtree(rebuilt_dir)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("verb", choices=("pack", "unpack", "verify"))
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--piece-mib", type=int, default=56)
    args = ap.parse_args(argv)
    if args.verb == "pack":
        pack(Path(args.a), Path(args.b), args.piece_mib)
    elif args.verb == "unpack":
        unpack(Path(args.a), Path(args.b))
    else:
        verify(Path(args.a), Path(args.b))
    return 0


if __name__ == "__main__":
    sys.exit(main())
