"""A serving deployment under continuous batching: TTFT, TPOT, tokens/s, fit, latency targets and cost."""

from __future__ import annotations

from aicalc.api.results import Table
from aicalc.tuples import Named

BLOCK = 16  # vLLM's paged-cache block


class KvMemory(Named):
    """A device's memory as an engine splits it (:func:`kv_memory`): ``budget`` (bytes for the KV cache, 0 when
    none), ``utilization`` (the share of the memory in use: vLLM's gpu_memory_utilization, TensorRT-LLM's
    free_gpu_memory_fraction, SGLang's --mem-fraction-static), ``overhead`` (bytes the engine holds besides weights
    and KV cache: the generic runtime overhead, or the share SGLang keeps for activations and CUDA graphs),
    ``reserve`` (SGLang's derivation of its default share, :func:`aicalc.catalog.profiles.static_reserve`; None for
    another engine) and ``given`` (the share was given, not the engine's default)."""

    budget: float
    utilization: float
    overhead: float
    reserve: object = None
    given: bool = False


def kv_memory(chip, opts: dict, arch, weights, tp: int = 1, pp: int = 1, attention_dp: int = 1,
              utilization=None) -> KvMemory:
    """The KV budget per device of an engine (its profile's ``opts``) on ``chip`` beside ``weights`` bytes per
    device. An engine with a ``mem_fraction_static_reserve`` (SGLang) takes ``utilization`` (its
    --mem-fraction-static) or else its default share of the memory for weights and KV pool
    (:func:`aicalc.catalog.profiles.static_reserve` for the replica's ``tp``, ``pp`` and ``attention_dp``), and
    the pool is that share less the weights (model_runner_kv_cache_mixin.py: 'rest_memory = available_gpu_memory -
    total_gpu_memory * (1 - mem_fraction_static)'); what the share leaves is its reserve for activations and CUDA
    graphs, so the generic runtime overhead (:func:`aicalc.core.capacity.runtime_overhead_bytes`, an estimate of
    the same activations and graphs) is not taken off too. Other engines: ``utilization`` (default 0.9) of the
    whole memory or of what the weights leave (their ``kv_budget``), less that runtime overhead."""
    from aicalc.api import inputs
    from aicalc.catalog import profiles
    from aicalc.core import capacity

    mem = float(chip.usable_memory_bytes)
    given = utilization is not None
    reserve = profiles.static_reserve(opts, chip, arch, tp, pp, attention_dp)
    if reserve is not None:
        share = inputs.fraction("utilization", utilization) if given else reserve.fraction
        budget = float(capacity.kv_budget_bytes(mem, share, weights, 0.0, "total"))
        return KvMemory(budget, share, mem * (1.0 - share), reserve, given)
    share = inputs.fraction("utilization", utilization) if given else capacity.DEFAULT_UTILIZATION
    overhead = capacity.runtime_overhead_bytes(arch, tp)
    return KvMemory(float(capacity.kv_budget_bytes(mem, share, weights, overhead, opts.get("kv_budget", "total"))),
                    share, overhead, None, given)


class Serving(Table):
    """Columns: ``concurrency``, ``prompt``, ``gen``, ``replicas``, ``tp``, ``chips``, ``batch_per_replica``,
    ``ttft_s``, ``tpot_s``, ``output_tokens_per_s`` (whole deployment), ``output_tokens_per_s_per_chip``,
    ``tokens_per_s_per_sequence``, ``ideal_ttft_s``, ``ideal_tpot_s``, ``ideal_output_tokens_per_s``,
    ``weights_bytes_per_device``, ``kv_cache_bytes_per_device``, ``total_bytes_per_device``, ``fits``,
    ``meets_slo``; with a price ``usd_per_million_output_tokens`` and ``usd_per_request``; with a TDP
    ``joules_per_output_token``. For a model with recurrent layers (linear attention, Mamba) ``kv_cache_bytes_per_device``
    includes each running sequence's conv + recurrent state (``kv-cache`` shows it apart)."""


def max_concurrency(model, chip="h100-sxm", *, tp: int | None = None, chips: int | None = None, prompt=1024, gen=256,
                    dtype: str = "release", kv_dtype: str = "bf16", utilization=None, engine: str | None = None,
                    ep: int = 1, attention_dp: int = 1, redundant_experts: int = 0, pp: int = 1,
                    swa_full_tokens_ratio: float | None = None) -> int:
    """Requests of ``prompt + gen`` tokens the whole deployment holds in its KV budget (0 when none) — each at its
    live context, or its whole prompt + gen where the ``engine`` reserves it at admission (its profile's
    ``kv_reserve``: TensorRT-LLM) — and no more per scheduler than the ``engine``'s runs at once by default
    (:func:`aicalc.catalog.profiles.max_running`: vLLM V1 1024 on a chip of 70 GiB or more that is no A100, else
    256; SGLang's cap derived from its KV pool and the model's context length);
    with attention DP each of a replica's ``attention_dp`` groups holds its own sequences' cache and runs its own
    scheduler (SGLang's and vLLM's DP ranks). ``pp``: pipeline stages per replica of ``tp·pp`` chips; each device
    holds its stage's layers of every sequence's cache; the engine's ``max_num_seqs`` still caps the replica's
    running requests (vLLM's scheduler admits no more than ``max_num_running_reqs`` whatever the pipeline's
    micro-batches in flight). ``swa_full_tokens_ratio``: SGLang's --swa-full-tokens-ratio (:func:`scheduler_limits`).
    ``utilization``: the engine's share of each device's memory, None for its default (:func:`kv_memory`)."""
    fit, cap, schedulers = scheduler_limits(model, chip, tp=tp, chips=chips, prompt=prompt, gen=gen, dtype=dtype,
                                            kv_dtype=kv_dtype, utilization=utilization, engine=engine, ep=ep,
                                            attention_dp=attention_dp, redundant_experts=redundant_experts, pp=pp,
                                            swa_full_tokens_ratio=swa_full_tokens_ratio)
    return (min(fit, cap) if cap else fit) * schedulers


def scheduler_limits(model, chip="h100-sxm", *, tp: int | None = None, chips: int | None = None, prompt=1024,
                     gen=256, dtype: str = "release", kv_dtype: str = "bf16", utilization=None,
                     engine: str | None = None, ep: int = 1, attention_dp: int = 1, redundant_experts: int = 0,
                     pp: int = 1, swa_full_tokens_ratio: float | None = None) -> tuple[int, int | None, int]:
    """(requests one scheduler's KV budget holds, the ``engine``'s default cap on one scheduler's running
    requests or None, schedulers in the deployment: replicas × attention-DP groups), as :func:`max_concurrency`
    counts them. The cap is :func:`aicalc.catalog.profiles.max_running` on the chip, with the scheduler's KV pool
    in tokens (its budget over one token's bytes on every layer) and the model's context length.

    An engine that sizes a hybrid sliding-window model's pools apart (SGLang: its profile's
    ``swa_full_tokens_ratio``, a model's own default in ``model_defaults``, or ``swa_full_tokens_ratio`` given
    here, the server's --swa-full-tokens-ratio) holds what its pools hold (:func:`aicalc.core.capacity.swa_fit`),
    and its pool of T tokens is the full pool's."""
    from aicalc.api import inputs
    from aicalc.api.catalog import kv_format, load_decoder, load_node_or_chip, node_split, resident_weights
    from aicalc.core import capacity
    from aicalc.core.kv_cache import kv_shape

    spec = load_decoder(model, "serve")
    arch = spec.arch
    kv_dtype = kv_format(spec, kv_dtype)
    chip_obj, count = load_node_or_chip(chip)
    tp, chips = node_split(count, tp, chips)
    tp = inputs.whole("tp", tp)
    pp = inputs.whole("pp", pp)
    stage = stage_share(arch, pp)
    replicas = (inputs.whole("chips", chips) if chips is not None else tp * pp) // (tp * pp)
    ep, attention_dp = inputs.whole("ep", ep), inputs.whole("attention_dp", attention_dp)
    from aicalc.core.geometry import check_parallel

    redundant = inputs.count("redundant_experts", redundant_experts, minimum=0)
    check_parallel(arch, tp, ep, attention_dp, redundant)
    weights = resident_weights(spec, dtype, tp, ep=ep, attention_dp=attention_dp, redundant=redundant, pp=pp)
    opts = {}
    if engine is not None:
        from aicalc.catalog import profiles

        opts = profiles.load("engine", engine).options
    budget = kv_memory(chip_obj, opts, arch, weights, tp, pp, attention_dp, utilization).budget
    from aicalc.core.serving import held_context

    longest = float(held_context(inputs.positive("prompt", prompt, whole=True).max(),
                                 inputs.positive("gen", gen, whole=True).max(),
                                 opts.get("kv_reserve", "live")))  # whole tokens, as serve's
    shape = kv_shape(arch, kv_dtype, tp // attention_dp)
    fit = int(capacity.max_batch(shape, budget / stage, longest, BLOCK)[0]) if budget > 0 else 0
    pool = budget / stage / shape.bytes_per_token if budget > 0 and shape.bytes_per_token > 0 else 0.0
    from aicalc.catalog import profiles

    ratio = pool_ratio(opts, engine, arch, shape, swa_full_tokens_ratio)
    if ratio is not None:  # SGLang's full and SWA pools
        fit, pool = capacity.swa_fit(shape, budget / stage, ratio, longest)
    cap = None
    if opts:
        cap = profiles.max_running(opts, chip_obj, pool_tokens=pool, context=arch.max_context,
                                   model_type=arch.family, schedulers=attention_dp)
    return fit, cap, attention_dp * replicas


def pool_ratio(opts: dict, engine, arch, shape, given=None) -> float | None:
    """SWA-pool tokens per full-pool token of an engine that sizes a hybrid sliding-window model's pools apart
    (SGLang: ``given``, its --swa-full-tokens-ratio, else the model's default or the profile's,
    :func:`aicalc.catalog.profiles.swa_ratio`); None for a model with no sliding layer or another engine. A ratio
    given for an engine with one pool is refused."""
    if given is not None and opts.get("swa_full_tokens_ratio") is None:
        from aicalc.errors import ParameterError

        raise ParameterError("swa_full_tokens_ratio", given, f"applies to an engine that sizes a sliding-window pool "
                             f"apart (sglang), not {engine or 'no engine'}")
    from aicalc.catalog import profiles

    ratio = profiles.swa_ratio(opts, arch.family, given)  # a given ratio is checked, whatever the model
    return ratio if shape.sliding_layers else None


# A deployment given no chips and no TP is one replica of the smallest TP group of this many chips, or fewer, that
# holds the model (a server of 8 GPUs or accelerators, a TPU host's 8 chips: HGX/DGX, MI300X platforms, Gaudi 3 and
# TPU v5e/v6e hosts, the chip presets' ``interconnect.domain`` for most); a system-on-chip or NPU serves on one.
TP_POOL = 8
TP_POOL_KINDS = ("gpu", "tpu", "accelerator")


def best_row(model, chip, *, tp: int, prompt=1024, gen=256, dtype: str = "release", kv_dtype: str = "bf16",
             max_ttft=None, max_tpot=None, engine: str | None = None, ep: int = 1, attention_dp: int = 1,
             one: bool = False) -> dict | None:
    """The row of one replica of ``tp`` chips (``ep``, ``attention_dp``) with the most output tokens/s inside the
    latency targets (else the most that fit): :func:`serve` over a concurrency ladder up to the most requests its KV
    budget holds (:func:`max_concurrency`; ``one``: one request, as a device serving its own user), None where that
    budget holds no request or no row fits. The row :func:`aicalc.compare` prices a layout by and the one serve's
    MoE note compares."""
    from aicalc.core.serving import concurrency_ladder

    most = 1.0 if one else max_concurrency(model, chip, tp=tp, prompt=prompt, gen=gen, dtype=dtype, kv_dtype=kv_dtype,
                                           engine=engine, ep=ep, attention_dp=attention_dp)
    if most < 1:  # not one request beside the weights: no row of this layout fits (serve's own fits)
        return None
    res = serve(model, chip, [1.0] if one else concurrency_ladder(most), prompt, gen, tp=tp, dtype=dtype,
                kv_dtype=kv_dtype, max_ttft=max_ttft, max_tpot=max_tpot, engine=engine, ep=ep,
                attention_dp=attention_dp).rows()
    ok = [r for r in res if r["meets_slo"]] or [r for r in res if r["fits"]]
    return max(ok, key=lambda r: r["output_tokens_per_s"]) if ok else None


def tp_pool(chip) -> int:
    """The chips :func:`default_layout` may group when a deployment names no chips and no TP (:data:`TP_POOL`)."""
    from aicalc.api.catalog import load_node_or_chip

    return TP_POOL if load_node_or_chip(chip)[0].kind in TP_POOL_KINDS else 1


def default_layout(model, chip, chips: int | None, *, concurrency=1, pp: int = 1, **kw) -> tuple[int, bool]:
    """``(tp, holds)`` of a deployment on one kind of chip given no TP (:func:`fitting_layout`): with ``chips``, the
    smallest TP whose replicas hold ``concurrency``; without, one replica of the smallest TP of up to
    :func:`tp_pool` chips that holds the weights and one request (a ``concurrency`` sweep keeps that TP and shows
    where its KV budget ends)."""
    if chips is None:
        return fitting_layout(model, chip, tp_pool(chip) * pp, concurrency="max", pp=pp, **kw)
    return fitting_layout(model, chip, chips, concurrency=concurrency, pp=pp, **kw)


def fitting_layout(model, chip, chips: int, *, prompt=1024, gen=256, concurrency=1, dtype: str = "release",
                   kv_dtype: str = "bf16", utilization=None, engine: str | None = None, ep: int = 1,
                   attention_dp: int = 1, redundant_experts: int = 0, pp: int = 1,
                   swa_full_tokens_ratio: float | None = None) -> tuple[int, bool]:
    """The tensor-parallel degree a deployment of ``chips`` chips gets when none is given: the smallest divisor
    of ``chips / pp`` whose replicas hold ``concurrency`` requests of the longest ``prompt + gen`` in their KV
    budget (:func:`max_concurrency`; ``"max"``: one request) with the layout valid (``ep``, ``attention_dp``,
    heads: :func:`aicalc.core.geometry.check_parallel`) — the way an engine user picks ``--tensor-parallel-size``:
    as many replicas as fit, each as small as holds the weights and the load (vLLM's data-parallel deployment
    guide); with whether it holds them. None holds it: the largest valid one, whose ``fits`` column then says no.
    No valid one: 1 (the
    layout's own error follows). A chip whose only memory is on-chip SRAM (Groq, Cerebras) keeps 1: its replica is
    a pipeline over the chips its bytes fill, whatever the TP (:func:`_sram_chips`)."""
    import numpy as np

    from aicalc.api import inputs
    from aicalc.api.catalog import SRAM_KINDS, load_chip, load_decoder
    from aicalc.core.geometry import check_parallel
    from aicalc.errors import ParameterError

    if load_chip(chip).kind in SRAM_KINDS:  # as compare tells them apart
        return 1, True
    spec = load_decoder(model, "serve")
    n, pp = inputs.whole("chips", chips), inputs.whole("pp", pp)
    need = 1.0 if isinstance(concurrency, str) else float(np.max(inputs.positive("concurrency", concurrency,
                                                                                  whole=True)))
    valid = []
    for t in (d for d in range(1, n // pp + 1) if (n // pp) % d == 0):
        try:
            check_parallel(spec.arch, t, ep, attention_dp, redundant_experts)
        except ParameterError:
            continue
        valid.append(t)
        if max_concurrency(spec, chip, tp=t, chips=n // pp * pp, prompt=prompt, gen=gen, dtype=dtype,
                           kv_dtype=kv_dtype, utilization=utilization, engine=engine, ep=ep,
                           attention_dp=attention_dp, redundant_experts=redundant_experts, pp=pp,
                           swa_full_tokens_ratio=swa_full_tokens_ratio) >= need:
            return t, True
    return (valid[-1] if valid else 1), False


def serve(model, chip="h100-sxm", concurrency=1, prompt=1024, gen=256, *, tp: int | None = None, chips: int | None = None,
          dtype: str = "release", kv_dtype: str = "bf16", max_ttft=None, max_tpot=None, price=None,
          utilization=None, engine: str | None = None, efficiency=None, draft=None, draft_tokens: int = 4,
          acceptance=0.7, prefix_hit=0.0, ep: int = 1, attention_dp: int = 1, redundant_experts: int = 0,
          pp: int = 1, swa_full_tokens_ratio: float | None = None) -> Serving:
    """``concurrency`` requests of ``prompt`` + ``gen`` tokens over ``chips`` chips in replicas of TP ``tp``
    (arrays broadcast); no ``tp``: with ``chips``, the smallest TP whose replicas hold ``concurrency``
    (:func:`fitting_layout`), without, one replica of the smallest TP of up to :data:`TP_POOL` chips that holds the
    weights and one request (a node: its chips); ``concurrency="max"``: as many as the KV budget holds and the
    engine's scheduler runs (serving at full load).
    ``max_ttft`` / ``max_tpot`` (seconds or ``"500ms"``) set ``meets_slo``; ``price``: USD per chip-hour
    (default: the chip preset's); ``engine``: an engine profile (default generic).

    ``draft``: speculative decoding with a draft model (a model id, path or config) or head (``"mtp"``,
    ``"eagle"``) proposing ``draft_tokens`` tokens that the target accepts at rate ``acceptance`` each
    (:mod:`aicalc.core.speculative`). ``prefix_hit``: the share of every prompt found in the prefix cache: it is
    not prefilled, and its KV blocks are held once per replica. ``ep`` / ``attention_dp``: expert and attention-data
    parallelism inside each replica of ``tp`` chips (:func:`aicalc.core.geometry.check_parallel`): a replica's
    sequences are spread over its attention groups, which step together through the shared experts;
    ``redundant_experts``: extra expert replicas over the EP ranks (EPLB), whose weights each rank also holds.
    ``pp``: pipeline stages per replica (vLLM ``--pipeline-parallel-size``, SGLang ``--pp-size``): a replica is
    ``tp·pp`` chips, each stage holds its layers (:func:`aicalc.core.stages.serving_stage_layers`) of the weights
    and of every sequence's cache; the replica's sequences run as ``pp`` micro-batches in flight (vLLM V1's batch
    queue), each passing every stage in turn, so a micro-batch's step takes ``pp`` times the slowest stage's time
    (the whole model's at its batch for an even split) plus the ``pp − 1`` hops of its hidden states between
    stages, over the scale-up link inside a domain, else the scale-out NIC. ``swa_full_tokens_ratio``: the SGLang
    server's --swa-full-tokens-ratio, for what ``concurrency="max"`` holds (:func:`scheduler_limits`) and for
    ``fits`` (a scheduler's requests within what its two pools hold, :func:`aicalc.core.capacity.swa_requests`).
    ``utilization``: the engine's share of each device's memory (vLLM's gpu_memory_utilization, SGLang's
    --mem-fraction-static), None for its default (:func:`kv_memory`)."""
    import numpy as np

    from aicalc.api import inputs
    from aicalc.api.catalog import node_count, node_split
    from aicalc.api.roofline import cost_setup, draft_setup
    from aicalc.core import capacity, cost, latency, speculative
    from aicalc.core.efficiency import IDEAL
    from aicalc.core.geometry import check_parallel
    from aicalc.core.kv_cache import kv_cache_bytes, kv_shape
    from aicalc.core.serving import held_context, prefill_batch, steady_state
    from aicalc.errors import ParameterError

    given_chips = chips
    if tp is None and node_count(chip) == 1:  # no TP: the smallest that holds it, of the chips or a server's
        tp = default_layout(model, chip, chips, concurrency=concurrency, pp=pp, prompt=prompt, gen=gen, dtype=dtype,
                            kv_dtype=kv_dtype, utilization=utilization, engine=engine, ep=ep,
                            attention_dp=attention_dp, redundant_experts=redundant_experts,
                            swa_full_tokens_ratio=swa_full_tokens_ratio)[0]
    tp, chips = node_split(chip, tp, chips)
    tp = inputs.whole("tp", tp)
    pp = inputs.whole("pp", pp)
    chips = inputs.whole("chips", chips) if chips is not None else tp * pp
    cs = cost_setup(model, chip, dtype, kv_dtype, tp_needs_link=tp > 1, engine=engine, efficiency=efficiency)
    arch = cs.model.arch
    ep, attention_dp = inputs.whole("ep", ep), inputs.whole("attention_dp", attention_dp)
    redundant = inputs.count("redundant_experts", redundant_experts, minimum=0)
    check_parallel(arch, tp, ep, attention_dp, redundant)
    if (ep > 1 or attention_dp > 1) and draft is not None:
        raise ParameterError("draft", draft, "is not modelled with ep or attention_dp (speculative decoding is priced "
                             "on a plain TP replica)")
    if pp > 1 and draft is not None:
        raise ParameterError("pp", pp, "is not modelled with speculative decoding (priced on a plain TP replica)")
    check_pipeline(cs, pp)
    stage = stage_share(arch, pp)
    D = float(attention_dp)
    par = latency.Par(float(ep), D, float(redundant))
    if chips < 1 or chips % (tp * pp):
        raise ParameterError("chips", chips, f"is not a positive multiple of tp={tp}" + (f" × pp={pp}" if pp > 1
                                                                                        else ""))
    replicas = chips // (tp * pp)
    if _sram_only(cs):  # one pipeline over the chips its bytes fill (_sram_chips), whatever --chips says
        replicas = 1
    if isinstance(concurrency, str) and concurrency == "max":
        concurrency = max(1, max_concurrency(model, chip, tp=tp, chips=chips, prompt=prompt, gen=gen, dtype=dtype,
                                             kv_dtype=kv_dtype, utilization=utilization, engine=engine, ep=ep,
                                             attention_dp=attention_dp, redundant_experts=redundant, pp=pp,
                                             swa_full_tokens_ratio=swa_full_tokens_ratio))
    g = inputs.broadcast(concurrency=inputs.positive("concurrency", concurrency, whole=True),
                         prompt=inputs.positive("prompt", prompt, whole=True),
                         gen=inputs.positive("gen", gen, whole=True))
    C, P, G = g["concurrency"], g["prompt"], g["gen"]
    max_ttft = inputs.seconds("max_ttft", max_ttft) if max_ttft is not None else None
    max_tpot = inputs.seconds("max_tpot", max_tpot) if max_tpot is not None else None
    if price is not None:
        price = inputs.single("price", price)
    from aicalc.api.catalog import resident_weights

    weights = resident_weights(cs.model, dtype, tp, ep=ep, attention_dp=attention_dp, redundant=redundant, pp=pp)
    dtype, kv_dtype = cs.dtype_label, cs.kv_dtype
    eng_opts = cs.engine_options
    memory = kv_memory(cs.chip, eng_opts, arch, weights, tp, pp, attention_dp, utilization)
    budget, utilization, overhead = memory.budget, memory.utilization, memory.overhead
    per_rep = np.ceil(C / replicas)
    per_mb = np.ceil(per_rep / pp) if pp > 1 else per_rep  # sequences of one pipeline micro-batch
    hit = inputs.share("prefix_hit", prefix_hit)  # a number or "75%", as the command line reads it
    cached = np.floor(P * hit)  # prompt tokens found in the prefix cache
    k = prefill_batch(per_mb, G, P - cached)  # prompts prefilled together in one pass
    spec = draft_setup(draft, cs, tp, draft_tokens, acceptance)
    sram = _sram_chips(cs, weights * tp, per_rep, P, G, tp)  # SRAM-only chips: a replica spans what the bytes fill
    out = {}
    # one attention group of the replica (all of it without attention DP): its chips and its share of the work;
    # a pass priced once gives both the estimate and the ideal (roofline) time, which no efficiency enters
    pre = latency.phase(cs.shape, cs.roofs, cs.formats, cs.efficiency, k / D, P - cached, cached, tp / D,
                        logits_tokens=1.0, chips=1.0 if sram is None else sram, par=par)
    dec = latency.phase(cs.shape, cs.roofs, cs.formats, cs.efficiency, per_mb / D, 1.0, P + G / 2.0, tp / D,
                        chips=1.0 if sram is None else sram, par=par)
    # speculative decoding's draft and verify passes likewise, once for both
    rounds = None if spec is None else speculative.decode_times(cs.shape, spec["shape"], cs.roofs, cs.formats,
                                                                cs.efficiency, per_rep, P, G, tp, spec["k"],
                                                                spec["tokens"])
    for name, eff, t_pre, t_dec in (("est", cs.efficiency, pre.t_est, dec.t_est),
                                    ("ideal", IDEAL, pre.t_ideal, dec.t_ideal)):
        if pp > 1:  # a micro-batch passes every stage at the slowest one's pace, its hidden states hopping between
            t_pre = pipelined(cs, eff, pp, tp, t_pre, k * (P - cached))
            t_dec = pipelined(cs, eff, pp, tp, t_dec, per_mb)
        ttft, tpot = steady_state(t_pre, t_dec, per_mb, G, k)
        # every request in flight yields a token per TPOT of its replica; the busiest replica's (ceil(C / R)
        # sequences) bounds it: C / tpot, exact when R divides C (R × per_rep overcounted idle slots: one request
        # on two replicas is one stream, not two)
        row = [ttft, tpot, C / tpot]
        if spec is not None:  # a round: K draft passes and one target pass over K + 1 tokens per sequence
            t_tok, t_draft_pre = rounds[name]
            tpot_spec = t_tok + per_rep / G * t_pre / k
            row = [ttft + t_draft_pre, tpot_spec, C / tpot_spec, tpot / tpot_spec]
        out[name] = row
    ttft, tpot, tps = out["est"][:3]
    shape_kv = kv_shape(arch, kv_dtype, tp // attention_dp)
    held = held_context(P, G, eng_opts.get("kv_reserve", "live"))
    kv_dev = kv_cache_bytes(shape_kv, np.ceil(per_rep / D), held - cached, BLOCK) + \
        kv_cache_bytes(shape_kv, np.where(cached > 0, 1.0, 0.0), cached, BLOCK)  # the shared prefix, once
    if pp > 1:  # a device holds its stage's layers of every sequence's cache
        kv_dev = kv_dev * stage
    if spec is not None:
        weights = weights + spec["weights"]
        kv_dev = kv_dev + kv_cache_bytes(kv_shape(spec["arch"], kv_dtype, tp), per_rep, held + spec["k"],
                                         BLOCK)
    fits = (kv_dev <= budget) & (budget > 0)
    ratio = pool_ratio(eng_opts, engine, arch, shape_kv, swa_full_tokens_ratio)
    if ratio is not None and budget > 0:  # SGLang's two pools: a scheduler's requests within what they hold
        fits &= np.ceil(per_rep / D) <= capacity.swa_requests(shape_kv, budget / stage, ratio, held)
    if sram is not None:  # weights and cache spread over the replica's chips, no engine runtime beside them
        overhead, budget = 0.0, float(cs.chip.usable_memory_bytes)
        chips = sram if given_chips is None else chips
        fits = sram <= chips
        weights, kv_dev = weights * tp / sram, kv_dev * tp / sram
    meets = np.ones_like(C, dtype=bool)
    if max_ttft is not None:
        meets &= ttft <= max_ttft
    if max_tpot is not None:
        meets &= tpot <= max_tpot
    cols = {"concurrency": C.astype(np.int64), "prompt": P.astype(np.int64), "gen": G.astype(np.int64),
            "replicas": replicas, "tp": tp, "pp": pp, "ep": ep, "attention_dp": attention_dp, "redundant_experts": redundant,
            "chips": chips,
            "batch_per_replica": per_rep.astype(np.int64),
            "prefill_batch": k, "prefix_cached_tokens": cached,
            "ttft_s": ttft, "tpot_s": tpot, "output_tokens_per_s": tps,
            "output_tokens_per_s_per_chip": tps / chips, "tokens_per_s_per_sequence": 1.0 / tpot,
            "ideal_ttft_s": out["ideal"][0], "ideal_tpot_s": out["ideal"][1],
            "ideal_output_tokens_per_s": out["ideal"][2],
            "weights_bytes_per_device": weights, "kv_cache_bytes_per_device": kv_dev,
            "total_bytes_per_device": weights + overhead + kv_dev, "fits": fits, "meets_slo": meets & fits}
    if spec is not None:
        cols |= {"draft_tokens": spec["k"], "acceptance": spec["acceptance"],
                 "tokens_per_target_pass": spec["tokens"], "speculative_speedup": out["est"][3]}
    if sram is not None:
        cols["chips_needed"] = sram.astype(np.int64)
    price = price or cs.chip.price_per_hour_usd
    if price:
        cols["usd_per_million_output_tokens"] = cost.usd_per_million_tokens(chips, tps, price)
        cols["usd_per_request"] = cost.usd(chips, cost.request_seconds(ttft, tpot, G, C), price)
    if cs.chip.tdp_w:
        cols["joules_per_output_token"] = cost.joules_per_token(chips, tps, cs.chip.tdp_w)
    warnings = list(cs.warnings)
    if sram is not None:
        if not fits.all():
            warnings.append(f"{int((~fits).sum())} row(s) need more than the {chips} {cs.chip.id} chips given: "
                            "weights and KV cache live in on-chip SRAM only (see chips_needed)")
    elif budget <= 0 and memory.reserve is not None:  # SGLang: weights and KV pool within its static share
        short = weights - np.ceil(cs.chip.usable_memory_bytes * utilization)
        warnings.append(f"does not fit: weights ({weights / 2**30:.1f} GiB) per device exceed the "
                        f"{utilization:.3g} of {cs.chip.id}'s memory the engine gives weights and KV cache "
                        f"(--mem-fraction-static) by {short / 2**30:.1f} GiB; use more chips per replica (tp), a "
                        f"smaller dtype, or a larger chip")
    elif budget <= 0:
        short = weights + overhead - np.ceil(cs.chip.usable_memory_bytes * utilization)
        warnings.append(f"does not fit: weights ({weights / 2**30:.1f} GiB) and runtime overhead ({overhead / 2**30:.1f} "
                        f"GiB) per device exceed {utilization:.0%} of {cs.chip.id}'s memory by {short / 2**30:.1f} "
                        f"GiB; use more chips per replica (tp), a smaller dtype, or a larger chip")
    elif not fits.all():
        warnings.append(f"{int((~fits).sum())} row(s) do not fit: the KV cache of {int(per_rep.max())} sequences per "
                        f"replica exceeds the {budget / 2**30:.1f} GiB left per device beside weights and overhead")
    return Serving(cols, warnings, setup=cs, replicas=replicas, chips=chips, price=price, budget_bytes=budget,
                   max_ttft=max_ttft, max_tpot=max_tpot, utilization=utilization, memory=memory)


def stage_share(arch, pp: int) -> float:
    """The fullest pipeline stage's share of the decoder layers (1 without a pipeline)."""
    if pp == 1:
        return 1.0
    from aicalc.core.stages import serving_stage_layers

    return max(serving_stage_layers(arch.layers, pp)) / arch.layers


def check_pipeline(cs, pp: int) -> None:
    """``pp`` stages where an engine runs them: at most one layer per stage (vLLM's ``get_pp_indices`` gives each
    rank ``L // pp`` layers, none with more ranks than layers), and not on a chip whose replica already is a
    pipeline over the chips its bytes fill (SRAM-only chips, :func:`_sram_chips`)."""
    from aicalc.errors import ParameterError

    stage_share(cs.model.arch, pp)  # a ParameterError past one layer per stage
    if pp > 1 and _sram_only(cs):
        raise ParameterError("pp", pp, f"does not apply to {cs.chip.id}: its replica spans the chips its weights "
                             "and cache fill, already one pipeline")


def pipelined(cs, eff, pp: int, tp: int, seconds, tokens):
    """Seconds of one micro-batch's pass through a replica's ``pp`` stages of ``tp`` chips, from ``seconds``, the
    whole model's time at the micro-batch's work on one stage's chips: each stage holds its layers
    (:func:`stage_share`), the fullest sets the pace of every stage, and the micro-batch passes them in turn
    (vLLM ``--pipeline-parallel-size``: each rank runs its layers and sends ``IntermediateTensors`` to the next;
    SGLang ``--pp-size`` likewise), so ``pp`` × the fullest stage's time, plus the ``pp − 1`` sends of its
    ``tokens`` tokens' hidden states (:func:`_hops`). ``seconds`` unchanged without a pipeline."""
    if pp == 1:
        return seconds
    return seconds * stage_share(cs.model.arch, pp) * pp + _hops(cs, eff, pp, tp, tokens)


def _hops(cs, eff, pp: int, tp: int, tokens):
    """Seconds of the ``pp − 1`` sends of ``tokens`` tokens' hidden states and residuals (2·H values in 16-bit,
    vLLM's ``IntermediateTensors``) from each stage's devices to the next's: over the scale-up link where the
    ``tp·pp`` chips share a domain, else the scale-out NIC, at ``link`` of it, plus the collective latency."""
    r = cs.roofs
    inside = r.domain <= 0 or tp * pp <= r.domain
    bw = max(r.link_bytes_per_s if inside else r.out_bytes_per_s, 1.0)
    return (pp - 1) * (tokens * 2.0 * cs.shape.H * 2.0 / (bw * eff.link) + eff.collective_latency_s)


def _sram_only(cs) -> bool:
    from aicalc.api.roofline import SRAM_KINDS

    return bool(cs.dataflow and cs.chip.kind in SRAM_KINDS)


def _sram_chips(cs, weights, per_rep, P, G, tp):
    """Chips one replica spans on a chip whose only memory is on-chip SRAM (Groq LPU, Cerebras WSE): its weights
    and its sequences' KV cache spread over as many chips as they fill (roofline's ``chips_needed``, the same
    count); None on other chips. Every token crosses them in turn (:func:`aicalc.core.latency.dataflow`)."""
    if not _sram_only(cs):
        return None
    import numpy as np

    from aicalc.core.kv_cache import kv_cache_bytes, kv_shape
    from aicalc.core.serving import live_context

    kv = kv_cache_bytes(kv_shape(cs.model.arch, cs.kv_dtype, tp), per_rep, live_context(P, G)) * tp
    return np.ceil((weights + kv) / float(cs.chip.usable_memory_bytes))
