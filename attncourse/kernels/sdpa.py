"""PyTorch's own attention as the yardstick on a GPU (chapter 10): which SDPA backend, and a timing.

``F.scaled_dot_product_attention`` dispatches to one of several backends. Chapter 10 compares
its Triton kernels with the fastest one the GPU has, restricted to that one backend so that
the comparison says what ran:

* ``"flash"`` (FlashAttention-2, Dao 2023): compute capability 8.0 and later, float16 or
  bfloat16, equal head sizes of at most 256 (``check_head_dim_size_flash``; the multiple of 8
  is a rule of its nested-tensor variant only);
* ``"efficient"`` (the memory-efficient kernel of xFormers): compute capability 5.0 and
  later, float16 or float32, and bfloat16 from 8.0 on;
* ``"math"``: PyTorch's plain composition of operations, which runs everywhere;
* ``"cudnn"``: NVIDIA's cuDNN attention, which PyTorch itself tries first on compute
  capability 9.0 and 10.0 (H100, B200) when its cuDNN is recent enough
  (``check_prefer_cudnn_attention``; the version it asks for has changed between releases).
  :func:`sdpa_backend` never picks it, because whether it runs depends on the build, not on
  the GPU alone; :func:`torch_choice` asks torch which backend it would pick for real tensors,
  and ``make gpu-check`` times each backend the build has, cuDNN included.

Those are the checks of PyTorch's ``aten/src/ATen/native/transformers/cuda/sdp_utils.cpp``
(``check_flash_attention_hardware_support``, ``check_mem_efficient_hardware_support``,
the dtype and head-size checks). Asking for the flash backend alone on a T4 (7.5) raises
"No available kernel"; :func:`sdpa_backend` picks the efficient one there.

Nothing here imports triton: the backend choice is plain Python, tested on any machine with
a faked capability.
"""

from __future__ import annotations

import contextlib
from typing import Iterator, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from .config import check_capability

__all__ = [
    "SDPA_BACKENDS",
    "sdpa_backend",
    "sdpa_backend_for",
    "restrict_sdpa",
    "torch_attention",
    "torch_choice",
]

#: The backends :func:`restrict_sdpa` takes; ``"default"`` leaves the choice to PyTorch.
SDPA_BACKENDS = ("flash", "efficient", "math", "cudnn")

# torch's names of the backends (torch.nn.attention.SDPBackend), as this module names them
_TORCH_NAMES = {
    "FLASH_ATTENTION": "flash",
    "EFFICIENT_ATTENTION": "efficient",
    "MATH": "math",
    "CUDNN_ATTENTION": "cudnn",
}


def sdpa_backend(capability: Tuple[int, int], dtype: torch.dtype, head_dim: int) -> str:
    """The fastest SDPA backend a CUDA GPU of ``capability`` offers for ``dtype`` and ``head_dim``.

    Returns ``"flash"`` where PyTorch's FlashAttention backend runs (8.0 and later, float16 or
    bfloat16, ``head_dim`` up to 256), else ``"efficient"`` where the
    memory-efficient one runs (5.0 and later; float16, float32, and bfloat16 from 8.0), else
    ``"math"``. A T4 (7.5) in float16 gets ``"efficient"``; an A100 or H100 gets ``"flash"``.
    """
    capability = check_capability(capability)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating torch.dtype, got {dtype!r}")
    if isinstance(head_dim, bool) or not isinstance(head_dim, int) or head_dim < 1:
        raise ValueError(f"head_dim must be a positive int, got {head_dim!r}")
    half = dtype in (torch.float16, torch.bfloat16)
    if capability >= (8, 0) and half and head_dim <= 256:
        return "flash"
    efficient_dtypes = (torch.float16, torch.float32) + (
        (torch.bfloat16,) if capability >= (8, 0) else ()
    )
    alignment = 8 if half else (4 if capability >= (8, 0) else 1)  # its matrix products' alignment
    if capability >= (5, 0) and dtype in efficient_dtypes and head_dim % alignment == 0:
        return "efficient"
    return "math"


def sdpa_backend_for(device, dtype: torch.dtype, head_dim: int) -> str:
    """:func:`sdpa_backend` for ``device``'s GPU; ``"default"`` (PyTorch's own choice) off CUDA."""
    device = torch.device(device)
    if device.type != "cuda":
        return "default"
    return sdpa_backend(tuple(torch.cuda.get_device_capability(device)), dtype, head_dim)


@contextlib.contextmanager
def restrict_sdpa(backend: str) -> Iterator[None]:
    """Within it, ``F.scaled_dot_product_attention`` uses only ``backend`` (``"default"``: any)."""
    if backend == "default":
        yield
        return
    if backend not in SDPA_BACKENDS:
        raise ValueError(f"backend must be one of {SDPA_BACKENDS + ('default',)}, got {backend!r}")
    from torch.nn.attention import SDPBackend, sdpa_kernel

    names = {ours: theirs for theirs, ours in _TORCH_NAMES.items()}
    if not hasattr(SDPBackend, names[backend]):
        raise ValueError(f"this torch ({torch.__version__}) has no {backend!r} SDPA backend")
    with sdpa_kernel([getattr(SDPBackend, names[backend])]):
        yield


def torch_choice(query: Tensor, key: Tensor, value: Tensor, *, is_causal: bool = False) -> str:
    """The backend PyTorch itself picks for ``F.scaled_dot_product_attention(query, key, value,
    is_causal=is_causal)``, unrestricted: one of :data:`SDPA_BACKENDS`, or ``"unknown"`` where
    this torch does not tell (``torch._fused_sdp_choice``, a private function, is missing).

    On an H100 with a recent cuDNN this is ``"cudnn"``, where :func:`sdpa_backend` says
    ``"flash"``; on a CPU it is torch's CPU flash kernel or ``"math"``.
    """
    if not all(isinstance(t, Tensor) for t in (query, key, value)):
        raise TypeError("query, key and value must be tensors")
    if not isinstance(is_causal, bool):
        raise TypeError(f"is_causal must be a bool, got {type(is_causal).__name__}")
    choose = getattr(torch, "_fused_sdp_choice", None)
    if choose is None:
        return "unknown"
    from torch.nn.attention import SDPBackend

    return _TORCH_NAMES.get(
        SDPBackend(choose(query, key, value, is_causal=is_causal)).name, "unknown"
    )


def torch_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    *,
    is_causal: bool = False,
    backend: Optional[str] = None,
) -> Tensor:
    """``F.scaled_dot_product_attention`` on :func:`sdpa_backend_for`'s backend (or ``backend``).

    ``query`` ``(B, h, L, d_k)``, ``key`` and ``value`` ``(B, h, S, d_k)``. ``is_causal`` is PyTorch's
    top-left causal mask, the package's own when ``L == S``.
    """
    if not all(isinstance(t, Tensor) for t in (query, key, value)):
        raise TypeError("query, key and value must be tensors")
    if query.dim() != 4:
        raise ValueError(f"query must be (B, h, L, d_k), got shape {tuple(query.shape)}")
    chosen = backend or sdpa_backend_for(query.device, query.dtype, query.size(-1))
    with restrict_sdpa(chosen):
        return F.scaled_dot_product_attention(query, key, value, is_causal=is_causal)
