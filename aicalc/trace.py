"""``train-mem --trace``: the user's own model traced by PyTorch's memory tracker, beside the estimate.

The same method as ``validation/record_step_peak.py`` (which never imports aicalc, so the records cannot inherit
a bug from here): the transformers model is built from its config inside ``FakeTensorMode`` (shapes and dtypes
exact, nothing allocated, CPU wheels are enough), ``torch.optim.AdamW`` is made over the trainable parameters and
two whole training steps run under ``torch.distributed._tools.mem_tracker.MemTracker``; every storage counts in
512-byte blocks and ``F.dropout`` runs CUDA's ``native_dropout``. Needs the ``trace`` extra (torch, transformers;
peft for LoRA). Bounded: at most :data:`MAX_TOKENS` tokens per micro-batch and :data:`TIME_LIMIT_S` seconds
(a SIGALRM timer, where the platform and the calling thread allow one).
"""

from __future__ import annotations

import math

from aicalc.errors import AicalcError

STEPS = 2  # the second step is the steady state (optimizer states exist)
BLOCK = 512  # the CUDA caching allocator's smallest block (kMinBlockSize)
MAX_TOKENS = 1 << 17  # batch × seq per micro-batch
TIME_LIMIT_S = 300
HINT = "--trace needs torch and transformers (CPU wheels are enough): pip install 'aicalc[trace]'"
LORA_MODULES = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "o_proj", "gate": "gate_proj", "up": "up_proj",
                "down": "down_proj"}
# BERT's and RoBERTa's (encoder.layer.N.attention.self.query, ….attention.output.dense, ….intermediate.dense,
# ….output.dense): full-name patterns, since "output.dense" alone also ends the attention's output projection
ENCODER_LORA_MODULES = {"q": r".*\.query", "k": r".*\.key", "v": r".*\.value", "o": r".*\.attention\.output\.dense",
                        "up": r".*\.intermediate\.dense", "down": r".*\.layer\.\d+\.output\.dense"}


def available() -> bool:
    import importlib.util

    return all(importlib.util.find_spec(m) is not None for m in ("torch", "transformers"))


def trace_step(config: dict, batch: int, seq: int, *, precision="bf16-mixed", attention="sdpa", recompute="none",
               adamw="foreach", microbatches=1, lora_rank=None, lora_targets=(), encoder=False,
               grads_kept=False) -> dict:
    """The traced peak of whole training steps: ``{"peak_bytes", "phase", "breakdown"}`` (bytes by category:
    parameters, buffers, gradients, activations, temporaries, optimizer, inputs). ``encoder``: the model is built
    as ``AutoModelForSequenceClassification`` and trained on one label per sequence; ``grads_kept``: the steps end
    with ``zero_grad(set_to_none=False)``."""
    if batch * seq > MAX_TOKENS:
        raise AicalcError(f"--trace runs at most {MAX_TOKENS:,} tokens per micro-batch (batch × seq); got "
                          f"{batch * seq:,}")
    if not available():
        raise AicalcError(HINT)
    if precision not in ("fp32", "bf16", "bf16-mixed"):
        raise AicalcError(f"--trace runs fp32, bf16 or bf16-mixed (torch AMP); got {precision}")
    if recompute not in ("none", "full"):
        raise AicalcError(f"--trace runs --recompute none or full; got {recompute}")
    import signal
    import threading
    import warnings

    def expired(*_):
        raise AicalcError(f"--trace did not finish within {TIME_LIMIT_S} s (a smaller --seq or --batch traces "
                          "faster; the peak scales with them)")

    import logging

    import torch._subclasses.fake_tensor  # noqa: F401  (torch's logging set-up runs on import; then quiet it)

    quiet = logging.getLogger("torch._subclasses.fake_tensor")  # logs a failing op before raising it
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)
    main = threading.current_thread() is threading.main_thread()
    old = signal.signal(signal.SIGALRM, expired) if hasattr(signal, "SIGALRM") and main else None
    if old is not None:
        signal.alarm(TIME_LIMIT_S)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # transformers' and torch's advisory chatter about fake tensors
            return _trace(config, batch, seq, precision, attention, recompute, adamw, microbatches, lora_rank,
                          lora_targets, encoder, grads_kept)
    except (RuntimeError, NotImplementedError, ValueError, TypeError, AttributeError, IndexError) as e:
        # a model or setting torch/transformers cannot run on fake tensors: their message, on one line
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        raise AicalcError(f"--trace: torch could not trace this step ({type(e).__name__}: {first})") from None
    finally:
        quiet.setLevel(level)
        if old is not None:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, old)


def _trace(config, batch, seq, precision, attention, recompute, adamw, microbatches, lora_rank, lora_targets,
           encoder=False, grads_kept=False):
    import torch
    import torch.nn.functional as F
    import transformers
    from torch._subclasses.fake_tensor import FakeTensorMode
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSequenceClassification

    transformers.logging.set_verbosity_error()
    rest = {k: v for k, v in config.items() if k not in ("model_type", "architectures", "auto_map")}
    try:
        cfg = AutoConfig.for_model(str(config.get("model_type")), **rest)
    except (ValueError, KeyError, TypeError) as e:
        raise AicalcError(f"--trace: transformers cannot build this config ({str(e).splitlines()[0][:160]})") from None
    _block_rounding()
    orig = F.dropout
    F.dropout = _cuda_dropout(orig)
    try:
        with FakeTensorMode():
            dtype = torch.bfloat16 if precision == "bf16" else torch.float32
            auto = AutoModelForSequenceClassification if encoder else AutoModelForCausalLM
            m = auto.from_config(cfg, attn_implementation=attention if attention != "flash" else "sdpa", dtype=dtype)
            if lora_rank:
                m = _peft(m, lora_rank, lora_targets, encoder)
            if recompute == "full":
                m.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            m.train()
            trainable = [p for p in m.parameters() if p.requires_grad]
            opt = torch.optim.AdamW(trainable, lr=1e-4, foreach=adamw == "foreach", fused=adamw == "fused")
            ids = torch.randint(0, cfg.vocab_size, (batch, seq))
            labels = torch.zeros(batch, dtype=torch.long) if encoder else ids
            mt = _tracker()
            mt.track_external(m, opt, ids)
            best, where = {"Total": -1}, ""
            with mt:
                for step in range(STEPS):
                    for name, fn in _phases(m, opt, ids, labels, mt, precision == "bf16-mixed", microbatches,
                                            grads_kept):
                        cur = mt.get_tracker_snapshot("current")
                        mt._peak_mem = {d: v["Total"] for d, v in cur.items()}
                        mt._peak_mem_snap = {d: dict(v) for d, v in cur.items()}
                        fn()
                        (snap,) = mt.get_tracker_snapshot("peak").values()
                        if snap["Total"] > best["Total"]:
                            best, where = dict(snap), f"step {step + 1} {name}"
    finally:
        F.dropout = orig
    names = {"Parameter": "parameters", "Buffer": "buffers", "Gradient": "gradients", "Activation": "activations",
             "Temp": "temporaries", "Optstate": "optimizer", "Other": "inputs"}
    breakdown = {names[getattr(k, "value", k)]: int(v) for k, v in best.items() if getattr(k, "value", k) in names}
    return {"peak_bytes": int(best["Total"]), "phase": where, "breakdown": breakdown,
            "sdpa_math": attention != "eager" and not mt.attention_ops}


def cpu_caveats(arch, precision: str, attention: str, sdpa_math: bool) -> list[str]:
    """Where a CPU trace does not stand for a CUDA run, as measured on an H200 (tests/data/measured/
    h200-step-peak.json): the CPU's SDPA falls back to its math path (attention dropout, differing head sizes)
    where CUDA runs a fused kernel; CUDA's SDPA takes its math path for fp32 with GQA where the CPU's flash kernel
    does not; the CPU's autocast runs softmax and pow in bf16 where CUDA's runs them in fp32 (LayerNorm models)."""
    from aicalc.core.activations import sdpa_math_path

    out = []
    if attention != "eager" and sdpa_math:
        out.append("trace: the CPU's SDPA took its math path (it saved the attention scores) where CUDA runs a fused "
                   "kernel: the traced peak is above a GPU's")
    elif attention != "eager" and precision == "fp32" and sdpa_math_path(arch, 4.0):
        out.append("trace: the CPU's flash kernel takes fp32 with GQA, where CUDA's SDPA takes its math path (the "
                   "scores saved): the traced peak is below a GPU's, the estimate follows CUDA")
    if precision == "bf16-mixed" and arch.norm != "rms":
        out.append("trace: the CPU's autocast keeps softmax and pow in bf16 where CUDA's runs them in fp32 (a "
                   "LayerNorm model's GELU and eager scores): the traced peak is below a GPU's")
    return out


def _phases(m, opt, ids, labels, mt, mixed, microbatches, grads_kept=False):
    import torch

    state = {}

    def forward():
        mt.reset_mod_stats()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=mixed):
            out = m(input_ids=ids, labels=labels)
        state["loss"] = out.loss / microbatches

    def backward():
        state.pop("loss").backward()

    def step():
        opt.step()
        opt.zero_grad(set_to_none=not grads_kept)

    for _ in range(microbatches):
        yield "forward", forward
        yield "backward", backward
    yield "optimizer", step


def _peft(m, rank, targets, encoder=False):
    try:
        import torch
        from peft import LoraConfig, get_peft_model
        from peft.tuners import tuners_utils
    except ImportError:
        raise AicalcError("--trace with --lora-rank needs peft: pip install 'aicalc[trace]'") from None
    # fake parameters cannot be swapped in place by Module._apply, so PEFT's moves of the new adapters are skipped:
    # they are made in fp32 on the CPU, where PEFT's autocast_adapter_dtype leaves them anyway
    move, to = tuners_utils.BaseTunerLayer._move_adapter_to_device_of_base_layer, torch.nn.Module.to
    tuners_utils.BaseTunerLayer._move_adapter_to_device_of_base_layer = lambda *a, **k: None
    torch.nn.Module.to = lambda self, *a, **k: self
    try:
        # PEFT takes one string as a pattern each module's full name must match
        names = ("|".join(ENCODER_LORA_MODULES[t] for t in targets if t in ENCODER_LORA_MODULES) if encoder
                 else [LORA_MODULES[t] for t in targets])
        return get_peft_model(m, LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=0.0, target_modules=names))
    except ValueError as e:
        raise AicalcError(f"--trace: PEFT cannot apply LoRA to this model ({str(e).splitlines()[0][:160]})") from None
    finally:
        tuners_utils.BaseTunerLayer._move_adapter_to_device_of_base_layer = move
        torch.nn.Module.to = to


def _cuda_dropout(orig):
    """CUDA's fused dropout keeps a 1-byte mask; the CPU's composite one a mask in the input's dtype."""
    import torch

    def dropout(input, p=0.5, training=True, inplace=False):
        if training and 0.0 < p < 1.0 and input.numel() > 0:
            return torch.native_dropout(input, p, True)[0]
        return orig(input, p, training, inplace)

    return dropout


def _block_rounding():
    from torch.distributed._tools import mem_tracker

    def consumed(self) -> int:
        return math.ceil(self.size * self.element_size / BLOCK) * BLOCK

    mem_tracker._WeakRefInfo._calculate_mem_consumed = consumed


def _tracker():
    """torch's MemTracker, with no gradient hook on frozen parameters (LoRA's base) and the global peak only."""
    from torch.distributed._tools.mem_tracker import MemTracker, _MemRefType

    class Tracker(MemTracker):
        def _track_module_params_and_buffers(self, module, install_grad_hooks=True):
            param_memory = 0
            for param in module.parameters():
                winfos = self._update_and_maybe_create_winfos(param, _MemRefType.PARAM)
                param_memory += sum(w.mem_consumed for w in winfos)
                if param.grad is not None:
                    self._update_and_maybe_create_winfos(param.grad, _MemRefType.GRAD)
                if (install_grad_hooks and param.requires_grad
                        and self._param_to_grad_hook_handles.get(param, None) is None):
                    def hook(grad):
                        self._update_and_maybe_create_winfos(grad, _MemRefType.GRAD)

                    self._param_to_grad_hook_handles[param] = (
                        param.register_hook(hook),
                        param.register_post_accumulate_grad_hook(lambda p: hook(p.grad)))
            buffer_memory = 0
            for buffer in module.buffers():
                winfos = self._update_and_maybe_create_winfos(buffer, _MemRefType.BUFFER)
                buffer_memory += sum(w.mem_consumed for w in winfos)
            return param_memory, buffer_memory

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if "scaled_dot_product" in func.__name__:
                self.attention_ops.add(func.__name__)
            return super().__torch_dispatch__(func, types, args, kwargs)

        def _update_peak_stats(self, peak_state):
            for dev, dev_snap in self._curr_mem_snap.items():
                if self._peak_mem.get(dev, 0) < dev_snap["Total"]:
                    self._peak_mem[dev] = dev_snap["Total"]
                    self._peak_mem_snap[dev] = dict(dev_snap)

    t = Tracker()
    t.attention_ops = set()  # the fused SDPA kernels that ran (none: SDPA took its math path)
    return t
