"""A fake accelerator device for CPU-only torch, so that a fake-tensor trace can tell device memory from host memory.

A CPU-only torch cannot trace autograd on fake ``cuda`` tensors: the autograd engine asks the device's guard for
its current stream (``InputMetadata``: ``getDeviceGuardImpl(CUDA)``), and no CUDA guard is registered in a CPU
build ("PyTorch is not linked with support for cuda devices"). torch's own Python backend hook for the
``PrivateUse1`` key (``torch.utils.backend_registration._setup_privateuseone_for_python_backend``, with its guard,
hooks and device module registered from Python) gives a device that autograd accepts. Renamed ``gpu``, its fake
tensors are what the traced step's accelerator holds, and ``cpu`` tensors what the host holds (FSDP2's
``CPUOffloadPolicy`` shards).

Only what a fake trace needs is registered:

* the device module: one device, index 0, and the CPU's no-op ``Stream``/``Event``/``stream`` for FSDP2's
  all-gather and reduce-scatter streams (``_get_device_handle("gpu")`` finds it as ``torch.gpu``), and the AMP
  dtypes that activation checkpointing's recompute asks for (it enters the device's autocast, disabled);
* ``empty_strided`` and ``_copy_from`` for the ``PrivateUse1`` key, for empty tensors only:
  ``torch.tensor([], device=...)`` (transformers' ``DynamicCache``) makes a real empty tensor and copies it before
  the fake mode sees it; anything with elements raises;
* :func:`flash_sdpa`: ``F.scaled_dot_product_attention`` picks its kernel through a C++ ``DispatchStub`` that a
  Python backend cannot register, so it would take the math path (fp32 S² scores); this calls the kernel the CPU
  traces take (``_scaled_dot_product_flash_attention_for_cpu``: output and an fp32 log-sum-exp kept for backward,
  grouped-query heads unrepeated), as CUDA's flash kernel keeps them (it also keeps two 8-byte RNG tensors).

A run without offload on this device gives the CPU trace's peak less AdamW's step counters, which stay on the host
as on a CUDA run (measured when this was written: ``fsdp2-dp8/llama3.2-1b-style/sdpa/bf16-mixed/foreach/b2s2048``,
15,994,881,024 B against the record's 15,994,955,776, every category equal but the optimizer states' 74,752 B,
146 one-block counters).
"""

from __future__ import annotations

NAME = "gpu"


def device():
    """Register the fake accelerator once per process and return its device, ``gpu:0``. Register it before the
    process's first backward: autograd's engine makes its per-device ready queues then, from the devices it
    knows, and a later backward on an unknown device fails its ``device_ready_queues_`` assertion."""
    import torch

    if torch._C._get_privateuse1_backend_name() != NAME:
        from torch.utils.backend_registration import (
            _DummyBackendModule,
            _setup_privateuseone_for_python_backend,
        )

        class Module(_DummyBackendModule):
            Stream = torch.cpu.Stream
            Event = torch.cpu.Event
            current_stream = staticmethod(torch.cpu.current_stream)
            stream = staticmethod(torch.cpu.stream)
            synchronize = staticmethod(torch.cpu.synchronize)

            def set_device(self, index) -> None:
                pass

            def get_amp_supported_dtype(self):  # checkpoint's recompute enters the device's autocast (off)
                return [torch.float16, torch.bfloat16]

        _setup_privateuseone_for_python_backend(rename=NAME, backend_module=Module())

        def empty_strided(size, stride, dtype=None, layout=None, device=None, pin_memory=None):
            if any(s == 0 for s in size):
                return torch._C._acc.create_empty_tensor(tuple(size), dtype or torch.float32)
            raise RuntimeError(f"the fake {NAME} device holds no real tensors ({tuple(size)})")

        def copy_from(src, dst, non_blocking=False):
            if src.numel():
                raise RuntimeError(f"the fake {NAME} device holds no real tensors ({tuple(src.shape)})")
            return dst

        lib = torch.library.Library("aten", "IMPL")
        lib.impl("empty_strided", empty_strided, "PrivateUse1")
        lib.impl("_copy_from", copy_from, "PrivateUse1")
        device._lib = lib  # kept: the registrations live as long as the library object
    return torch.device(NAME, 0)


def flash_sdpa(orig):
    """``F.scaled_dot_product_attention`` that sends attention on the fake device to the CPU's flash kernel, as
    the CPU's SDPA does (``aten/src/ATen/native/transformers/attention.cpp``): a boolean mask (transformers passes
    one when its layers are checkpointed) first made a mask of 0 and −inf in the query's dtype
    (``convert_boolean_attn_mask``); tensors on other devices go to ``orig``."""
    import torch

    def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        if query.device.type != NAME:
            return orig(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                        scale=scale, enable_gqa=enable_gqa)
        if attn_mask is not None and attn_mask.dtype == torch.bool:
            zero = torch.scalar_tensor(0.0, dtype=query.dtype, device=query.device)
            attn_mask = torch.where(attn_mask, zero, torch.scalar_tensor(-float("inf"), dtype=query.dtype,
                                                                         device=query.device))
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            query, key, value, dropout_p, is_causal, attn_mask=attn_mask, scale=scale)[0]

    return sdpa


def move(model, dev) -> None:
    """Every parameter and buffer of ``model`` onto ``dev``, tied parameters kept tied. ``Module.to`` cannot: it
    sets ``.data`` across dispatch keys (refused for fake tensors of different devices) or swaps the tensors
    (refused while the fake mode holds weak references)."""
    import torch

    made: dict[int, torch.nn.Parameter] = {}
    for mod in model.modules():
        for k, p in list(mod._parameters.items()):
            if p is not None:
                if id(p) not in made:
                    made[id(p)] = torch.nn.Parameter(p.detach().to(dev), requires_grad=p.requires_grad)
                mod._parameters[k] = made[id(p)]
        for k, b in list(mod._buffers.items()):
            if b is not None:
                mod._buffers[k] = b.to(dev)
