"""Where the model runs and in which precision: CUDA when present, CPU otherwise.

On CUDA, forward passes run under bf16 autocast (where the GPU supports bf16); on CPU only
when asked (`ModelConfig.cpu_bf16_autocast`), because there it trades precision for the ~2x
matmul throughput of AVX512-BF16 (design §5b). Losses are computed in float32 either way.
"""

from __future__ import annotations

import contextlib
import os

import torch


def select_device(name: str | None = None) -> torch.device:
    """`name` if given ("cpu", "cuda", "cuda:1"), else CUDA when available, else CPU."""
    if name is not None:
        return torch.device(name)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def usable_cores() -> int:
    """The cores this process may run on (its affinity where the OS has one)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def bf16_autocast_enabled(device: torch.device, cpu_bf16_autocast: bool) -> bool:
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    return cpu_bf16_autocast


def autocast(device: torch.device, cpu_bf16_autocast: bool) -> contextlib.AbstractContextManager:
    """bf16 autocast on `device` when `bf16_autocast_enabled`, else a no-op context."""
    if not bf16_autocast_enabled(device, cpu_bf16_autocast):
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16)


def cast_linears_for_autocast(module: torch.nn.Module, device: torch.device, cpu_bf16_autocast: bool) -> None:
    """For inference only, on a module whose forward runs under `autocast`: its Linear layers'
    weights and biases cast to bf16 once. Autocast casts them on every call instead (on the
    CPU a quarter of a reader forward); its matmul casts the input to bf16 either way, so the
    outputs are bit-identical. Never on a module being trained: its optimizer holds float32."""
    if bf16_autocast_enabled(device, cpu_bf16_autocast):
        for layer in module.modules():
            if isinstance(layer, torch.nn.Linear):
                layer.to(torch.bfloat16)
