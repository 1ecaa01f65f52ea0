"""``--dtype auto`` picks bfloat16 on a CUDA GPU that computes it, float16 on an older one, and float32 on the CPU. Only the device is named (a
``torch.device("cuda")`` can be made without a GPU), and bfloat16 support is reported by a stand-in, so this
runs on any machine."""

from __future__ import annotations

import torch

from drafting.models.loader import resolve_dtype


def test_auto_is_bfloat16_on_a_gpu_with_bfloat16_and_float32_on_the_cpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    for gpu in ("cuda", "cuda:0", "cuda:1"):
        assert resolve_dtype("auto", torch.device(gpu)) is torch.bfloat16
    assert resolve_dtype("auto", torch.device("cpu")) is torch.float32


def test_auto_is_float16_on_a_gpu_without_bfloat16(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    assert resolve_dtype("auto", torch.device("cuda")) is torch.float16


def test_a_named_dtype_is_kept_on_every_device():
    for device in ("cpu", "cuda"):
        assert resolve_dtype("float16", torch.device(device)) is torch.float16
        assert resolve_dtype("float32", torch.device(device)) is torch.float32
