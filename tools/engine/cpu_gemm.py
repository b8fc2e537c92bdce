"""Float32 linear layers through oneDNN on a CPU: passes over a few tokens cost what they should.

PyTorch runs a float32 ``nn.Linear`` on a CPU through its BLAS (MKL in the official builds). For one
token that is a matrix-vector product, bound by reading the weights. For 2-16 tokens (every
verification pass of a speculative method) MKL's matrix product can be far slower per byte: on a
2-core AMD EPYC (AVX2), a 8960x1536 layer measured 5.8 ms for one token, 9.7 ms for 2 and 18.2 ms
for 16 through MKL, against 4.4, 5.9 and 8.7 ms through oneDNN (the library behind ``torch.mkldnn``,
also in the official builds; benchmarks/cpu_gemm.py). Over the whole default target (float32, 300 tokens of cache) a
one-token pass went from 0.61 s to 0.47 s and a 16-token pass from 2.59 s (4.3x one) to 1.20 s (2.6x).

:func:`use_onednn` swaps a model's float32 ``nn.Linear`` layers for :class:`OneDNNLinear`, which keeps
the weights in oneDNN's format and multiplies through ``mkldnn_linear`` while no gradient is needed.
The dense weight is dropped (memory stays the model's own) except where it is shared (an LM head tied
to the input embeddings), and ``weight`` still reads as a dense tensor for code that inspects it.
Plain generation and every method run through the same layers, so outputs agree as before (another
summation order than MKL's: floating-point near-ties can fall the other way, as between any two BLAS).
``SPECPILOT_CPU_GEMM=blas`` keeps PyTorch's own path.
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F
from torch import nn

ENV = "SPECPILOT_CPU_GEMM"


def wanted(device, dtype) -> bool:
    """Whether float32 layers on ``device`` go through oneDNN (a CPU, float32, oneDNN built in, not opted out)."""
    return (torch.device(device).type == "cpu" and dtype == torch.float32 and torch.backends.mkldnn.is_available()
            and os.environ.get(ENV, "onednn").strip().lower() != "blas")


def kernels(model) -> str | None:
    """The kernels ``model``'s float32 layers run on where they are not PyTorch's own: "onednn" when any layer
    is a OneDNNLinear, else None (what a stored cost curve is keyed by beside its dtype)."""
    return "onednn" if isinstance(model, nn.Module) and any(isinstance(m, OneDNNLinear) for m in model.modules()) \
        else None


def expected_kernels(kind: str, dtype: str | None) -> str | None:
    """The kernels a run would load a model with on a ``kind`` ("cpu"/"gpu") device in ``dtype`` (a name),
    as :func:`kernels` names them, with nothing loaded."""
    return "onednn" if kind == "cpu" and wanted("cpu", getattr(torch, str(dtype or ""), None)) else None


class OneDNNLinear(nn.Linear):
    """An ``nn.Linear`` whose float32 product runs in oneDNN (see the module's docstring)."""

    def __init__(self, linear: nn.Linear, keep_dense: bool):  # noqa: D107 - nn.Linear's own init would allocate
        nn.Module.__init__(self)
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self._w = linear.weight.detach().to_mkldnn()
        self._b = linear.bias.detach().to_mkldnn() if linear.bias is not None else None
        self.dense_numel = 0 if keep_dense else linear.weight.numel()
        if keep_dense:  # straight into the table: register_parameter would trip over the ``weight`` property
            self._parameters["weight"] = linear.weight
        self.bias = linear.bias

    @property
    def weight(self) -> torch.Tensor:  # type: ignore[override]
        kept = self._parameters.get("weight")
        return kept if kept is not None else self._w.to_dense()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype != torch.float32 or x.device.type != "cpu" or torch.is_grad_enabled():
            return F.linear(x, self.weight, self.bias)
        rows = x.reshape(-1, self.in_features).contiguous().to_mkldnn()
        return torch._C._nn.mkldnn_linear(rows, self._w, self._b).to_dense().view(*x.shape[:-1], self.out_features)

    def plain(self) -> nn.Linear:
        """A dense ``nn.Linear`` copy (for int8 quantization, which takes plain layers)."""
        out = nn.Linear(self.in_features, self.out_features, bias=self.bias is not None)
        with torch.no_grad():
            out.weight.copy_(self.weight)
            if self.bias is not None:
                out.bias.copy_(self.bias)
        return out


def use_onednn(model: nn.Module) -> int:
    """Swap ``model``'s float32 CPU ``nn.Linear`` layers for :class:`OneDNNLinear` in place; how many."""
    embeddings = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    shared = {id(embeddings.weight)} if embeddings is not None and hasattr(embeddings, "weight") else set()
    swapped = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            weight = child.weight if type(child) is nn.Linear else None
            if weight is not None and weight.dtype == torch.float32 and weight.device.type == "cpu" \
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
