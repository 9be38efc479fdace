"""Where the model runs and in which precision: CUDA when present, CPU otherwise.

On CUDA, forward passes run under bf16 autocast (where the GPU supports bf16); on CPU only
when asked (`ModelConfig.cpu_bf16_autocast`), because there it trades precision for the ~2x
matmul throughput of AVX512-BF16 (design §5b). Losses are computed in float32 either way.
"""

from __future__ import annotations

import contextlib

import torch


def select_device(name: str | None = None) -> torch.device:
    """`name` if given ("cpu", "cuda", "cuda:1"), else CUDA when available, else CPU."""
    if name is not None:
        return torch.device(name)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def bf16_autocast_enabled(device: torch.device, cpu_bf16_autocast: bool) -> bool:
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    return cpu_bf16_autocast


def autocast(device: torch.device, cpu_bf16_autocast: bool) -> contextlib.AbstractContextManager:
    """bf16 autocast on `device` when `bf16_autocast_enabled`, else a no-op context."""
    if not bf16_autocast_enabled(device, cpu_bf16_autocast):
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
