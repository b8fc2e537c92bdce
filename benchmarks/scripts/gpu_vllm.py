"""vLLM on a GPU: speculation off, prompt lookup (ngram), the default draft model and, where vLLM loads it, an
EAGLE head, at concurrency 1, 4, 16 and 64 on the eval half (one prompt per category), in one run.

It uses specpilot's own measurement (tools.bench.vllm_bench: the same server lifecycle, closed-loop load
generator, /metrics counters and greedy comparison as ``specpilot bench --backend vllm``) with a Python that
already has vLLM (``pip install vllm`` on the GPU machine) instead of the venv `specpilot peers setup vllm`
makes, and saves the result as benchmarks/results/NAME.json (kind ``vllm_sweep``, the GPU's name inside),
which ``specpilot report --results benchmarks/results --out docs/results.md`` turns into the results page.

    python benchmarks/scripts/gpu_vllm.py --target MODEL_DIR --draft DRAFT_DIR [--eagle-heads DIR]
        [--vllm-python PYTHON] [--concurrency 1,4,16,64] [--max-new-tokens 128] [--name vllm_gpu]

Sized to finish in under 8 minutes on one H100/H200 with the 1.5B/0.5B default pair: four servers (about a
minute each to load and capture graphs), 13 prompts for the correctness pass, 2 x concurrency requests per
level.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tools.bench import vllm_server  # noqa: E402
from tools.bench.prompt_sets import load_prompt_set  # noqa: E402
from tools.bench.vllm_bench import ServeBenchInput, serve_bench, summary_lines  # noqa: E402
from tools.report.results import save_result  # noqa: E402


def use_python(python: str) -> dict:
    """Point specpilot's vLLM venv at ``python`` (a throw-away peers folder); the versions it reports."""
    probe = subprocess.run([python, "-c", "import json, vllm, torch; print(json.dumps({'vllm': vllm.__version__, "
                            "'torch': torch.__version__, 'gpu': torch.cuda.get_device_name(0)}))"],
                           capture_output=True, text=True, check=True)
    info = json.loads(probe.stdout.strip().splitlines()[-1])
    peers = Path(tempfile.mkdtemp(prefix="specpilot-peers-"))
    os.environ["SPECPILOT_PEERS"] = str(peers)
    bin_dir = vllm_server.venv_bin()
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").symlink_to(python)
    vllm_server.ready_file().write_text(json.dumps({"versions": {k: info[k] for k in ("vllm", "torch")},
                                                    "device": "cuda"}))
    return info


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--target", required=True)
    p.add_argument("--draft", required=True)
    p.add_argument("--eagle-heads", default=None, help="an upstream EAGLE/EAGLE-3 head folder for the target")
    p.add_argument("--vllm-python", default=sys.executable)
    p.add_argument("--concurrency", default="1,4,16,64")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--name", default="vllm_gpu")
    args = p.parse_args()
    info = use_python(args.vllm_python)
    methods = ["ngram", "draft"] + (["eagle"] if args.eagle_heads else [])
    inp = ServeBenchInput(target=args.target, draft=args.draft, methods=methods, eagle_heads=args.eagle_heads,
                          concurrency=[int(c) for c in args.concurrency.split(",")], max_new_tokens=args.max_new_tokens,
                          prompts=load_prompt_set("eval", None, 1), prompt_set="eval")
    result = serve_bench(inp, progress=lambda msg: print(msg, file=sys.stderr, flush=True))
    for line in summary_lines(result):
        print(line)
    rows = [{k: v for k, v in r.items() if k != "first_divergence"} for r in result["rows"]]
    path = save_result(args.name, "vllm_sweep", rows, {"best_k": result["best_k"], "prompts": result["prompts"],
                                                       "versions": result["versions"], "settings": result["settings"]},
                       hardware={"name": info["gpu"], "gpu": info["gpu"]}, dtype=result["dtype"], threads=None,
                       command=["python", "benchmarks/scripts/gpu_vllm.py", *sys.argv[1:]])
    print(f"saved {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
