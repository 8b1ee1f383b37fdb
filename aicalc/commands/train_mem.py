"""``aicalc train-mem``: training and fine-tuning memory per device, itemized, and a layout search.

Flow: options → catalog (model, chip) → core (``aicalc.core.train_memory``, ``aicalc.core.activations``,
vectorized over the sweep grid) → Result. See docs/train-mem.md for what each number includes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from aicalc.core.train_peak import evaluate
from aicalc.errors import AicalcError, ExitCode
from aicalc.result import Result

RECOMPUTE = ("none", "selective", "full")
SEARCH_STEP = 1 << 18  # layouts evaluated per slice of a --search
FRAMEWORKS = ("hf", "megatron")
ATTENTION = ("eager", "sdpa", "flash")
OFFLOAD = ("none", "optimizer", "params")
LOSSES = ("full", "chunked")
LORA_DTYPES = ("fp32", "bf16", "fp16")


@dataclass
class Options:
    model: str
    batch: list[float] = field(default_factory=lambda: [1.0])
    seq: list[float] = field(default_factory=lambda: [2048.0])
    precision: str = "bf16-mixed"
    optimizer: str = "adamw"
    zero: list[float] = field(default_factory=lambda: [0.0])
    dp: list[float] = field(default_factory=lambda: [1.0])
    tp: list[float] = field(default_factory=lambda: [1.0])
    pp: list[float] = field(default_factory=lambda: [1.0])
    cp: list[float] = field(default_factory=lambda: [1.0])
    ep: int = 1
    sp: bool = False
    virtual_stages: int = 1
    microbatches: int | None = None
    recompute: str = "none"
    framework: str = "hf"
    attention: str = "sdpa"
    grad_dtype: str | None = None
    optimizer_dtype: str | None = None
    lora_rank: int | None = None
    lora_targets: str = "q,v"
    lora_dtype: str = "fp32"
    loss: str = "full"
    optimizer_in_backward: bool = False
    quant: str = "none"
    offload: str = "none"
    dropout: float | None = None
    chip: str | None = None
    budget: int | None = None
    overhead: float | None = None
    search: bool = False
    chips: int | None = None
    top: int = 20
    progress: Callable[[int, int], None] | None = None  # (layouts done, layouts in all) during --search


def _check_choice(value: str, choices: tuple[str, ...], option: str) -> None:
    if value not in choices:
        raise AicalcError(f"{option} must be one of {', '.join(choices)}, got '{value}'")


def _ints(values, option: str, minimum: int = 1):
    import numpy as np

    arr = np.asarray(values, dtype=np.float64)
    if np.any(arr != np.round(arr)) or np.any(arr < minimum):
        raise AicalcError(f"{option} takes whole numbers of at least {minimum}, got {values}")
    return arr


def _check_layout(arch, tp, pp, ep, zero, cp=None, seq=None, sp=False, attention="sdpa") -> None:
    """Impossible layouts are bad input (exit 2), with the reason."""
    import numpy as np

    if cp is not None and np.any(cp > 1):
        # causal load balancing splits the sequence into 2·cp chunks, two per rank (Megatron-LM
        # get_batch_on_this_cp_rank; TransformerEngine's p2p CP; torch context_parallel's head-tail balancer)
        bad = (seq % (2 * cp)) != 0
        if np.any(bad):
            i = int(np.flatnonzero(bad)[0])
            raise AicalcError(f"--cp {int(cp[i])} does not divide the sequence {int(seq[i])} into 2·cp = "
                              f"{int(2 * cp[i])} equal chunks (causal load balancing)")
        if attention == "eager":
            raise AicalcError("--cp needs --attention sdpa or flash (ring attention replaces the fused "
                              "attention kernel; eager attention has no context-parallel path)")
    if sp and seq is not None:
        local = seq / (cp if cp is not None else 1.0)
        bad = (local % tp) != 0
        if np.any(bad):
            i = int(np.flatnonzero(bad)[0])
            raise AicalcError(f"--sp: --tp {int(np.broadcast_to(tp, bad.shape)[i])} does not divide the "
                              f"{int(local[i])} tokens per context-parallel rank")

    from aicalc.core.layout import check_tp

    for t in np.unique(tp):
        check_tp(arch, int(t))
        if arch.ffn % int(t):
            raise AicalcError(f"--tp {int(t)} does not divide the FFN size {arch.ffn}")
    for p in np.unique(pp):
        if arch.layers % int(p):
            raise AicalcError(f"--pp {int(p)} does not divide the {arch.layers} layers")
    if ep > 1 and (arch.moe is None or arch.moe.experts % ep):
        what = "the model has no experts" if arch.moe is None else f"it does not divide the {arch.moe.experts} experts"
        raise AicalcError(f"--ep {ep}: {what}")
    if np.any((zero < 0) | (zero > 3)):
        raise AicalcError("--zero takes stages 0 to 3")


def _inputs(o: Options) -> dict:
    return {k: v for k, v in o.__dict__.items() if v is not None and k != "progress"}


def run(o: Options) -> Result:
    import numpy as np

    from aicalc.catalog import store
    from aicalc.result import rows_from_columns
    from aicalc.sweep import grid

    _check_choice(o.recompute, RECOMPUTE, "--recompute")
    _check_choice(o.framework, FRAMEWORKS, "--framework")
    _check_choice(o.attention, ATTENTION, "--attention")
    _check_choice(o.offload, OFFLOAD, "--offload")
    _check_choice(o.loss, LOSSES, "--loss")
    _check_choice(o.lora_dtype, LORA_DTYPES, "--lora-dtype")
    if o.framework == "megatron" and o.loss != "full":
        raise AicalcError("--loss chunked is torchtune's chunked cross-entropy; Megatron's fused vocab-parallel "
                          "loss is the --loss full model with --framework megatron")
    if o.optimizer_in_backward and (o.microbatches or 1) > 1:
        raise AicalcError("--optimizer-in-backward steps each parameter as its gradient is ready, so it cannot "
                          "accumulate gradients over --microbatches > 1")
    if o.framework == "hf" and o.recompute == "selective":
        raise AicalcError("--recompute selective is Megatron's; with --framework hf use none or full "
                          "(gradient checkpointing)")
    if o.framework == "hf" and (o.sp or o.virtual_stages > 1):
        raise AicalcError("--sp and --virtual-stages are Megatron features; add --framework megatron")
    spec = store.resolve_model(o.model)
    arch = spec.arch
    chip, count = None, 1
    if o.chip:
        chip, count = store.resolve_chip(o.chip)
    if o.search:
        return _search(spec, o, chip, count)
    g = grid(batch=_ints(o.batch, "--batch"), seq=_ints(o.seq, "--seq"), dp=_ints(o.dp, "--dp"),
             tp=_ints(o.tp, "--tp"), pp=_ints(o.pp, "--pp"), cp=_ints(o.cp, "--cp"),
             zero=_ints(o.zero, "--zero", 0))
    _check_layout(arch, g["tp"], g["pp"], o.ep, g["zero"], g["cp"], g["seq"], o.sp, o.attention)
    if o.offload == "params" and np.any(g["zero"] < 3):
        raise AicalcError("--offload params needs --zero 3 (ZeRO-Infinity / FSDP CPU offload)")
    cols = evaluate(arch, o, g)
    cols = {"model": spec.id, **cols}
    warnings: list[str] = []
    code = ExitCode.OK
    limit = o.budget
    if chip is not None:
        cols["chip_memory_bytes"] = float(chip.memory_bytes)
        limit = chip.memory_bytes if limit is None else min(limit, chip.memory_bytes)
    if limit is not None:
        fits = cols["peak_bytes"] <= limit
        cols["fits"] = fits
        bad = np.flatnonzero(~np.broadcast_to(fits, np.shape(g["batch"])))
        if bad.size:
            code = ExitCode.BUDGET
            what = f"{o.chip} memory" if o.budget is None else "the budget"
            rows = ", ".join(str(i + 1) for i in bad[:10]) + (" …" if bad.size > 10 else "")
            warnings.append(f"peak memory per device exceeds {what} ({limit:,} B) in row(s) {rows}")
    rows = rows_from_columns(cols)
    for r in rows:
        for k in ("batch", "seq", "dp", "tp", "pp", "cp", "zero", "params", "trainable_params"):
            r[k] = int(r[k])
    columns = ["batch", "seq", "dp", "tp", "pp", *(["cp"] if np.any(g["cp"] > 1) else []), "zero",
               "trainable_params", "weights_bytes", "gradients_bytes",
               "optimizer_bytes", "activations_bytes", "transient_bytes", "peak_bytes"]
    if "fits" in cols:
        columns.append("fits")
    notes = [f"{spec.id}: {rows[0]['params']:,} params; {o.precision} + {o.optimizer}; framework {o.framework}, "
             f"attention {o.attention}, recompute {o.recompute}",
             "peak = weights + gradients + optimizer + activations + transients (loss, largest layer's workspace, "
             f"ZeRO-3 gather) + {rows[0]['overhead_bytes'] / 2**30:.2g} GiB CUDA context/allocator overhead; "
             "see docs/train-mem.md"]
    return Result("train-mem", _inputs(o), rows, warnings, code, title=f"train-mem {spec.id}", notes=notes,
                  columns=columns)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _search(spec, o: Options, chip, chip_count: int = 1) -> Result:
    """Enumerate TP × PP × DP × ZeRO × micro-batch × recompute for ``chips`` devices in one vectorized
    pass, keep the layouts whose peak fits the chip (or ``--budget``), rank by headroom."""
    import numpy as np

    from aicalc.result import rows_from_columns

    arch = spec.arch
    if chip is None and o.budget is None:
        raise AicalcError("--search needs --chip (or --budget) to know what fits")
    if not o.chips and chip_count > 1:
        o = Options(**{**o.__dict__, "chips": chip_count})  # a node preset: all its chips
    if not o.chips:
        raise AicalcError("--search needs --chips N, the number of devices to lay the model out on")
    limit = min(x for x in (o.budget, chip.memory_bytes if chip else None) if x is not None)
    tps = [t for t in _divisors(o.chips) if arch.heads % t == 0 and arch.ffn % t == 0
           and (arch.kv_heads % t == 0 or t % arch.kv_heads == 0) and t <= 64]
    pps = [p for p in _divisors(o.chips) if arch.layers % p == 0]
    # context parallelism is searched over the --cp values given (default 1 only: CP is worth it for long
    # sequences, and each value multiplies the layouts); eager attention has no CP path
    cps = sorted({int(c) for c in _ints(o.cp, "--cp")})
    if o.attention == "eager":
        cps = [1]
    layouts = [(t, p, c, o.chips // (t * p * c)) for t in tps for p in pps for c in cps
               if o.chips % (t * p * c) == 0]
    if not layouts:
        raise AicalcError(f"no TP × PP × CP layout divides {o.chips} devices")
    max_b = int(max(o.batch))
    mbs = [b for b in (1, 2, 4, 8, 16, 32, 64, 128, 256) if b <= max_b] or [1]
    recomputes = ["none", "full"] + (["selective"] if o.framework == "megatron" else [])
    parts = []
    lay = np.asarray(layouts, dtype=np.float64)
    ix, Z, MB, SQ = (m.ravel() for m in np.meshgrid(np.arange(len(layouts)), np.arange(4.0),
                                                    np.asarray(mbs, float), np.asarray(o.seq, float), indexing="ij"))
    total, done = MB.size * len(recomputes), 0
    for rc in recomputes:
        oo = Options(**{**o.__dict__, "recompute": rc})
        for i in range(0, MB.size, SEARCH_STEP):  # in slices, so a long search can report progress
            sl = slice(i, i + SEARCH_STEP)
            mb, sq = MB[sl], SQ[sl]
            g = {"batch": mb, "seq": sq, "tp": lay[ix[sl], 0], "pp": lay[ix[sl], 1], "cp": lay[ix[sl], 2],
                 "dp": lay[ix[sl], 3], "zero": Z[sl], "recompute": np.full(mb.shape, rc)}
            cols = evaluate(arch, oo, g)
            cols["recompute"] = g["recompute"]
            # a CP degree must split each sequence into 2·cp chunks; with SP, tp must divide the local tokens
            valid = (sq % (2 * g["cp"]) == 0) | (g["cp"] == 1)
            if o.sp:
                valid &= (sq / g["cp"]) % g["tp"] == 0
            cols["valid"] = valid
            parts.append({k: np.broadcast_to(np.asarray(v), mb.shape) for k, v in cols.items()})
            done += mb.size
            if o.progress:
                o.progress(done, total)
    cols = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    headroom = limit - cols["peak_bytes"]
    valid = cols.pop("valid")
    keep = (headroom >= 0) & valid
    n_total = int(valid.sum())
    order = np.argsort(-headroom[keep], kind="stable")[: o.top]
    sel = {k: v[keep][order] for k, v in cols.items()}
    sel["headroom_bytes"] = headroom[keep][order]
    rows = rows_from_columns({"model": np.full(len(order), spec.id), **sel}) if len(order) else []
    for r in rows:
        for k in ("batch", "seq", "dp", "tp", "pp", "cp", "zero", "params", "trainable_params"):
            r[k] = int(r[k])
    warnings = []
    code = ExitCode.OK
    if not rows:
        code = ExitCode.BUDGET
        warnings.append(f"no layout of {o.chips} devices fits {limit:,} B per device")
    columns = ["tp", "pp", *(["cp"] if max(cps) > 1 else []), "dp", "zero", "batch", "seq", "recompute",
               "weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes", "peak_bytes", "headroom_bytes"]
    notes = [f"{int(keep.sum()):,} of {n_total:,} layouts fit; ranked by memory headroom (top {o.top})"]
    return Result("train-mem", _inputs(o), rows, warnings, code, title=f"train-mem --search {spec.id}",
                  notes=notes, columns=columns)
