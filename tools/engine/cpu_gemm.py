"""Float32 (and, on CPUs that multiply bfloat16 natively, bfloat16) linear layers through oneDNN on a CPU:
passes over a few tokens cost what they should.

PyTorch runs a float32 ``nn.Linear`` on a CPU through its BLAS (MKL in the official builds). For one
token that is a matrix-vector product, bound by reading the weights. For 2-16 tokens (every
verification pass of a speculative method) a general matrix product can be far slower per byte: on a
2-core AMD EPYC (AVX2), a 8960x1536 layer measured 4.2 ms for one token, 8.2 ms for 2 and 25 ms for 8
through MKL, and 3.0, 5.7 and 8.1 ms through oneDNN with its weights in the plain layout. Packed ahead
of time into oneDNN's blocked layout for a batch of a few rows (``torch.ops.mkldnn._reorder_linear_weight``,
what PyTorch's compiler uses for frozen CPU models) the same layer took 3.2, 3.3 and 5.5 ms: two tokens
cost what one does, eight 1.7x (benchmarks/scripts/cpu_gemm.py). The packed product also gives each row the
same bits whatever the number of rows beside it, so a verification pass computes a token's layers
exactly as a one-token step does.

:func:`use_onednn` swaps a model's float32 ``nn.Linear`` layers for :class:`OneDNNLinear`, which keeps
the weights packed and multiplies through oneDNN while no gradient is needed (the plain oneDNN layout
where this PyTorch cannot pack). The dense weight is dropped (memory stays the model's own) except
where it is shared (an LM head tied to the input embeddings), and ``weight`` still reads as a dense
tensor for code that inspects it. Plain generation and every method run through the same layers, so
outputs agree as before (another summation order than MKL's: floating-point near-ties can fall the
other way, as between any two BLAS). ``SPECPILOT_CPU_GEMM=blas`` keeps PyTorch's own path.

Bfloat16 layers take the same path where the CPU has bfloat16 instructions (AVX512-BF16 or AMX): there
PyTorch's own bfloat16 product is slow for a few rows. A whole pass of the default target in bfloat16 on a
2-core AMD EPYC with AVX512-BF16 measured 199, 191, 215, 246 and 294 ms over 1, 2, 4, 8 and 13 tokens through
PyTorch, and 115, 108, 104, 143 and 184 ms with its layers packed (``benchmarks/scripts/cpu_gemm.py --model ...
--dtype bfloat16``). oneDNN's bfloat16 product over one or two rows is slower than over four (143 ms for a
one-token pass unpadded), so fewer than ``PAD_BELOW`` rows are multiplied as ``PAD_ROWS`` (zero rows added,
their products dropped). Bfloat16 rows are not bit-identical across row counts (float32 ones are), so in
bfloat16 near-ties can fall either way between a one-token step and a verification pass, as they already did.
Without those instructions oneDNN emulates bfloat16, and the layers stay PyTorch's.
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F
from torch import nn

from tools.engine.cpu_info import cpu_flags  # noqa: F401  (re-exported: callers read it here)

ENV = "SPECPILOT_CPU_GEMM"
PACKED = "onednn-packed"  # the kernels' name where the weights are packed (what cost curves are keyed by)
PACK_ROWS = 8  # the batch oneDNN packs the weights for (packed for 4-16 rows, 1-16 rows ran alike here; for 1, not)
PAD_BELOW = 3  # a bfloat16 product over fewer rows runs as one over PAD_ROWS (see the module's docstring)
PAD_ROWS = 4
def native_bfloat16() -> bool:
    """Whether this CPU has bfloat16 instructions oneDNN uses (AVX512-BF16 or AMX-BF16)."""
    return bool(cpu_flags() & {"avx512_bf16", "amx_bf16"})


def wanted(device, dtype) -> bool:
    """Whether ``dtype`` layers on ``device`` go through oneDNN (a CPU, oneDNN built in, not opted out; float32,
    or bfloat16 where the CPU multiplies it natively and this PyTorch packs weights)."""
    if dtype == torch.bfloat16:
        if not (native_bfloat16() and can_pack()):
            return False
    elif dtype != torch.float32:
        return False
    return (torch.device(device).type == "cpu" and torch.backends.mkldnn.is_available()
            and os.environ.get(ENV, "onednn").strip().lower() != "blas")


def kernels(model) -> str | None:
    """The kernels ``model``'s float32 or bfloat16 layers run on where they are not PyTorch's own:
    "onednn-packed" (or "onednn" where this PyTorch cannot pack) when any layer is a OneDNNLinear, else None
    (what a stored cost curve is keyed by beside its dtype)."""
    layers = [m for m in model.modules() if isinstance(m, OneDNNLinear)] if isinstance(model, nn.Module) else []
    return None if not layers else PACKED if all(m.packed for m in layers) else "onednn"


def expected_kernels(kind: str, dtype: str | None) -> str | None:
    """The kernels a run would load a model with on a ``kind`` ("cpu"/"gpu") device in ``dtype`` (a name),
    as :func:`kernels` names them, with nothing loaded."""
    if kind != "cpu" or not wanted("cpu", getattr(torch, str(dtype or ""), None)):
        return None
    return PACKED if can_pack() else "onednn"


def weight_dtype(layer: nn.Module) -> torch.dtype:
    """A linear layer's weight dtype without reading its weight (a OneDNNLinear's ``weight`` is rebuilt from the
    packed one: 0.3 s for a 151936x1536 LM head, every time it is read)."""
    return layer.dtype if isinstance(layer, OneDNNLinear) else layer.weight.dtype


def weight_shape(layer: nn.Module) -> tuple[int, int]:
    """(out, in) features of a linear layer, likewise without reading a OneDNNLinear's weight."""
    if isinstance(layer, OneDNNLinear):
        return layer.out_features, layer.in_features
    rows, cols = layer.weight.shape
    return int(rows), int(cols)


def rows_product(weight: torch.Tensor):
    """``x -> x @ weight.T`` for a float32 ``weight`` [rows, in]: a packed OneDNNLinear where float32 layers on its
    device run in oneDNN, else the plain product (nothing allocated besides the packed copy)."""
    if not wanted(weight.device, weight.dtype):
        return lambda x: x @ weight.T
    shell = nn.Linear(1, 1, bias=False, device="meta")  # no weight of its own to initialise
    shell.in_features, shell.out_features = weight.shape[1], weight.shape[0]
    shell.weight = nn.Parameter(weight, requires_grad=False)
    return OneDNNLinear(shell, keep_dense=False)


def can_pack() -> bool:
    """Whether this PyTorch packs weights for oneDNN's linear product (the ops PyTorch's compiler uses)."""
    return hasattr(torch.ops.mkldnn, "_reorder_linear_weight") and hasattr(torch.ops.mkldnn, "_linear_pointwise")


class OneDNNLinear(nn.Linear):
    """An ``nn.Linear`` whose float32 or bfloat16 product runs in oneDNN (see the module's docstring)."""

    def __init__(self, linear: nn.Linear, keep_dense: bool, pack: bool = True):  # noqa: D107 - not nn.Linear's init
        nn.Module.__init__(self)
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.packed = pack and can_pack()  # pack=False: the plain oneDNN layout (benchmarks/scripts/cpu_gemm.py times both)
        dense = linear.weight.detach()
        self.dtype = dense.dtype
        self.packed = self.packed or self.dtype != torch.float32  # bfloat16 only packed (``wanted``)
        self._w = torch.ops.mkldnn._reorder_linear_weight(dense, PACK_ROWS) if self.packed else dense.to_mkldnn()
        bias = linear.bias.detach() if linear.bias is not None else None
        self._b = bias if self.packed or bias is None else bias.to_mkldnn()
        self.dense_numel = 0 if keep_dense else linear.weight.numel()
        if keep_dense:  # straight into the table: register_parameter would trip over the ``weight`` property
            self._parameters["weight"] = linear.weight
        self.bias = linear.bias

    @property
    def weight(self) -> torch.Tensor:  # type: ignore[override]
        kept = self._parameters.get("weight")
        return kept if kept is not None else self._w.to_dense()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype != self.dtype or x.device.type != "cpu" or torch.is_grad_enabled():
            return F.linear(x, self.weight, self.bias)
        if self.packed:
            rows = x.numel() // self.in_features if self.dtype == torch.bfloat16 else PAD_BELOW
            if rows < PAD_BELOW:  # bfloat16 over 1-2 rows: see PAD_BELOW
                padded = x.new_zeros(PAD_ROWS, self.in_features)
                padded[:rows] = x.reshape(rows, self.in_features)
                out = torch.ops.mkldnn._linear_pointwise(padded, self._w, self._b, "none", [], "")
                return out[:rows].reshape(*x.shape[:-1], self.out_features)
            return torch.ops.mkldnn._linear_pointwise(x.contiguous(), self._w, self._b, "none", [], "")
        rows = x.reshape(-1, self.in_features).contiguous().to_mkldnn()
        return torch._C._nn.mkldnn_linear(rows, self._w, self._b).to_dense().view(*x.shape[:-1], self.out_features)

    def plain(self) -> nn.Linear:
        """A dense ``nn.Linear`` copy (for int8 quantization, which takes plain layers)."""
        out = nn.Linear(self.in_features, self.out_features, bias=self.bias is not None, dtype=self.dtype)
        with torch.no_grad():
            out.weight.copy_(self.weight)
            if self.bias is not None:
                out.bias.copy_(self.bias)
        return out


def use_onednn(model: nn.Module) -> int:
    """Swap ``model``'s CPU ``nn.Linear`` layers in a dtype :func:`wanted` for :class:`OneDNNLinear` in place; how
    many."""
    embeddings = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    shared = {id(embeddings.weight)} if embeddings is not None and hasattr(embeddings, "weight") else set()
    swapped = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            weight = child.weight if type(child) is nn.Linear else None
            if weight is not None and wanted(weight.device, weight.dtype) \
                    and not getattr(child, "_hf_hook", None):  # a layer accelerate places or offloads stays its own
                setattr(parent, name, OneDNNLinear(child, keep_dense=id(child.weight) in shared))
                swapped += 1
    return swapped


def weights_numel(model: nn.Module) -> int:
    """The model's parameter count, with the dense weights :class:`OneDNNLinear` dropped counted in."""
    return (sum(p.numel() for p in model.parameters())
            + sum(m.dense_numel for m in model.modules() if isinstance(m, OneDNNLinear)))


def plain_copy_memo(model: nn.Module) -> dict[int, nn.Module]:
    """A ``copy.deepcopy`` memo that copies each :class:`OneDNNLinear` of ``model`` as a dense ``nn.Linear``."""
    return {id(m): m.plain() for m in model.modules() if isinstance(m, OneDNNLinear)}
