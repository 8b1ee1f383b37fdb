"""The roofline's sweep path (a lean forward pass priced in closed form, ``pricing.price_sums``) against the
op-by-op definition: every op of the full forward pass priced by ``pricing.op_times`` and summed, as the
per-operation breakdown does. Both must give the same FLOPs, bytes and times to rounding, whatever the model,
chip, engine, efficiency factors and sweep (a fixed or varying TP, chunks where an op crosses its ridge or its
GEMV crossover, times so small that their squares leave the normal range)."""

from __future__ import annotations

import numpy as np
import pytest

from aicalc.api.roofline import cost_setup
from aicalc.core import latency
from aicalc.core.efficiency import Efficiency
from aicalc.core.pricing import Roofs, price

SETUPS = [
    ("llama-3.1-8b", "h100-sxm", {}),
    ("llama-3.1-70b", "b200", {"dtype": "fp8", "engine": "trtllm"}),
    ("llama-3.1-8b", "rtx-4090", {"dtype": "q4_k_m", "engine": "llama.cpp"}),
    ("llama-3.1-8b", "apple-m2-ultra", {"dtype": "int4"}),
    ("gemma-2-9b", "h100-sxm", {"attention": "materialized"}),
    ("gemma-2-9b", "tpu-v5e", {}),
    ("qwen3-30b-a3b", "h100-sxm", {"engine": "vllm"}),
    ("qwen3-next-80b-a3b", "h100-sxm", {"engine": "vllm"}),  # Gated DeltaNet layers: the delta rule per sequence
    ("gpt-oss-20b", "b200", {}),
    ("gpt-oss-20b", "tpu7x", {}),  # 64-wide heads laid along 128 lanes (attention_lanes)
    ("deepseek-v3", "h100-sxm", {"dtype": "fp8", "engine": "sglang"}),
    ("mixtral-8x7b", "groq-lpu", {}),
]

OVERRIDES = [
    {},
    {"overlap_p": 1.0},
    {"overlap_p": 3.0, "gemv_efficiency": 0.6},
    {"gemv_efficiency": 0.0, "gemm_half_dim": 0.0},
    {"gemv_efficiency": 0.7, "dequant_ops_per_weight": 4.0},
]


def op_by_op(s, roofs, fm, eff, B, T, P, tp, logits, chips, par):
    """(FLOPs, bytes, ideal, estimate) of one pass from every op of the full forward pass, priced one by one."""
    ops = latency.forward_ops(s, fm, B, T, P, tp, logits, par)
    price(ops, roofs, eff, tp, True)
    spread, hops = latency.dataflow(s, chips)
    scale = latency._dataflow_scale(s, B, T, spread)
    t_ideal = sum(o.t_ideal * scale.get(o.name, 1.0) for o in ops) / spread
    t_est = sum(o.t_est * scale.get(o.name, 1.0) for o in ops) / spread + latency.pass_overhead(s, eff, hops)
    return sum(o.flop for o in ops), sum(o.bytes for o in ops), t_ideal, t_est


def sweep(n=3000, seed=0, tp=None, batches=600):
    rng = np.random.default_rng(seed)
    B = rng.integers(1, batches, n).astype(float)
    B[:50] = 1.0  # chunks that reach single-sequence decode (GEMV) and long prefills (compute-bound)
    S = rng.integers(1, 40000, n).astype(float)
    G = rng.integers(1, 5000, n).astype(float)
    TP = np.full(n, 1.0) if tp is None else tp
    return B, S, G, TP


def check(cs, eff, B, S, G, TP, chips=1.0, par=latency.Par()):
    s, roofs, fm = cs.shape, cs.roofs, cs.formats
    for T, P, logits in ((S, 0.0 * S, 1.0), (np.ones_like(S), S + G / 2.0, None)):
        got = latency._sums(s, roofs, fm, eff, B, T, P, TP, logits, chips, par)
        want = op_by_op(s, roofs, fm, eff, B, T, P, TP, logits, chips, par)
        for g, w, what in zip(got, want, ("flop", "bytes", "ideal", "estimate"), strict=True):
            g, w = np.broadcast_to(g, np.shape(B)), np.broadcast_to(w, np.shape(B))
            assert np.allclose(g, w, rtol=1e-12, atol=0), (cs.model.arch, what, np.max(np.abs(g / w - 1)))


@pytest.mark.parametrize(("model", "chip", "kw"), SETUPS)
def test_sweep_sums_are_the_op_by_op_sums(model, chip, kw):
    cs = cost_setup(model, chip, tp_needs_link=True, **kw)
    B, S, G, TP = sweep()
    chips = 8.0 if cs.dataflow else 1.0
    for over in OVERRIDES:
        eff = cs.efficiency.with_overrides(over)
        check(cs, eff, B, S, G, TP, chips)
        check(cs, eff, B, S, G, np.full_like(B, 2.0), chips)
        check(cs, eff, *sweep(4000, 5, batches=64), chips)  # few batch sizes: decode tabulated by batch


def test_varying_tp_and_attention_dp():
    cs = cost_setup("deepseek-v3", "h100-sxm", "fp8", tp_needs_link=True)
    B, S, G, _ = sweep(seed=1)
    check(cs, cs.efficiency, B, S, G, np.random.default_rng(2).choice([1.0, 2.0, 4.0, 8.0], B.size))
    check(cs, cs.efficiency, B / 4, S, G, np.full_like(B, 2.0), par=latency.Par(4.0, 4.0, 32.0))


def test_times_whose_squares_leave_the_normal_range():
    """A chip 10²⁹⁰ times faster than any: times near 1e-290 s, whose squares underflow; the closed form must
    fall back to the exact overlap (hypot) as the op-by-op path does."""
    cs = cost_setup("llama-3.1-8b", "h100-sxm", tp_needs_link=True)
    huge = Roofs(peak_flop_per_s=1e300, bandwidth_bytes_per_s=1e300, link_bytes_per_s=1e300,
                 vector_flop_per_s=1e299)
    cs = cs._replace(roofs=huge)
    B, S, G, TP = sweep(seed=3)
    eff = Efficiency(kernel_overhead_s=0.0, collective_latency_s=0.0)
    check(cs, eff, B, S, G, TP)
    check(cs, eff.with_overrides({"gemv_efficiency": 0.5}), B, S, G, TP)
    check(cs, eff, *sweep(4000, 4, batches=64))


def test_empty_and_two_dimensional_sweeps():
    """No points: empty columns (no reduction over nothing); a 2-D grid: each point what the flat sweep gives."""
    cs = cost_setup("llama-3.1-8b", "h100-sxm")
    e = np.zeros(0)
    pre, dec, out = latency.inference(cs.shape, cs.roofs, cs.formats, cs.efficiency, e, e, e, e)
    assert pre.t_est.shape == dec.t_est.shape == out["est"]["ttft_s"].shape == (0,)
    B, S, G, TP = sweep(600, 6, batches=64)
    flat = latency.inference(cs.shape, cs.roofs, cs.formats, cs.efficiency, B, S, G, TP)
    grid = latency.inference(cs.shape, cs.roofs, cs.formats, cs.efficiency, *(a.reshape(20, 30) for a in (B, S, G, TP)))
    for a, b in ((flat[0].t_est, grid[0].t_est), (flat[1].t_ideal, grid[1].t_ideal),
                 (flat[2]["est"]["output_tokens_per_s"], grid[2]["est"]["output_tokens_per_s"])):
        assert b.shape == (20, 30) and np.allclose(a, b.reshape(-1), rtol=1e-12, atol=0)


def test_a_sweep_over_several_tp_degrees():
    """More points than a chunk over four TP degrees, evaluated a degree at a time: each point's FLOPs, bytes and
    times are the op-by-op ones."""
    cs = cost_setup("llama-3.1-70b", "h100-sxm", tp_needs_link=True)
    B, S, G, _ = sweep(40000, 7)
    TP = np.random.default_rng(8).choice([1.0, 2.0, 4.0, 8.0], B.size)
    s, roofs, fm, eff = cs.shape, cs.roofs, cs.formats, cs.efficiency
    pre, dec, _ = latency.inference(s, roofs, fm, eff, B, S, G, TP)
    for phase, (T, P, logits) in ((pre, (S, 0.0 * S, 1.0)), (dec, (np.ones_like(S), S + G / 2.0, None))):
        want = op_by_op(s, roofs, fm, eff, B, T, P, TP, logits, 1.0, latency.Par())
        for g, w in zip((phase.flop, phase.bytes, phase.t_ideal, phase.t_est), want, strict=True):
            assert np.allclose(g, w, rtol=1e-12, atol=0)
    cbb = latency.compute_bound_batch(s, roofs, fm, S + G / 2.0, TP)
    one = [latency.compute_bound_batch(s, roofs, fm, S[i:i + 1] + G[i:i + 1] / 2.0, TP[i:i + 1])[0]
           for i in range(0, B.size, 997)]
    assert np.array_equal(cbb[::997], one)


def test_tp_collective_across_domains_hand_derived():
    """A ring all-reduce of 1 MB over TP 16 on nodes of 8 (450 GB/s NVLink, 50 GB/s NIC per GPU): the 8 chips of
    each node reduce over NVLink (2·7/8 of the payload), then each exchanges its 1/8 share with the other node over
    its NIC (2·1/2 of it); TP 8 stays on NVLink; a chip with no domain puts the whole ring on its link."""
    from aicalc.core.pricing import Roofs, tp_collective_seconds

    r = Roofs(peak_flop_per_s=1e15, bandwidth_bytes_per_s=3e12, link_bytes_per_s=450e9, domain=8,
              out_bytes_per_s=50e9)
    mb = 1e6
    assert float(tp_collective_seconds(r, mb, 16)) == pytest.approx(2 * 7 / 8 * mb / 450e9 + 2 * 1 / 2 * mb / 8 / 50e9)
    assert float(tp_collective_seconds(r, mb, 8)) == pytest.approx(2 * 7 / 8 * mb / 450e9)
    flat = Roofs(peak_flop_per_s=1e15, bandwidth_bytes_per_s=3e12, link_bytes_per_s=450e9)
    assert float(tp_collective_seconds(flat, mb, 16)) == pytest.approx(2 * 15 / 16 * mb / 450e9)


def test_tp_across_nodes_slows_the_decode_step():
    """The same 405B decode at TP 16 costs more per token on H100 nodes of 8 than if all 16 shared one NVLink
    domain (the all-reduces' cross-node half runs at 50 GB/s, not 450)."""
    import numpy as np

    from aicalc.api.roofline import cost_setup
    from aicalc.core import latency

    cs = cost_setup("llama-3.1-405b", "h100-sxm", "bf16", "bf16", tp_needs_link=True)
    one = cs.roofs._replace(domain=16.0)
    B, S, G, TP = (np.array([64.0]), np.array([1024.0]), np.array([256.0]), np.array([16.0]))
    nodes = latency.inference(cs.shape, cs.roofs, cs.formats, cs.efficiency, B, S, G, TP)[1].t_est
    flat = latency.inference(cs.shape, one, cs.formats, cs.efficiency, B, S, G, TP)[1].t_est
    assert float(nodes[0]) > float(flat[0])


def test_serving_alltoall_on_the_links_the_ep_group_spans():
    """One MoE exchange of X bytes of tokens per device, k = 8 of 256 experts, no routing limit, 450 GB/s NVLink
    and 50 GB/s NIC per GPU in nodes of 8: EP 8 sends its 7 of 8 copies over NVLink; EP 16 over two nodes sends each
    token across once when any of its experts is on the other node (1 − (1/2)^8) and forwards 7 of its 8 copies
    inside, the slower part setting the time; a chip with no domain keeps everything on its link."""
    from aicalc.core.forward import Op
    from aicalc.core.pricing import Roofs, alltoall_seconds

    X = 1e6
    r = Roofs(peak_flop_per_s=1e15, bandwidth_bytes_per_s=3e12, link_bytes_per_s=450e9, domain=8,
              out_bytes_per_s=50e9)

    def op(ep):
        return Op("moe_alltoall", "alltoall", flop=0.0, bytes=0.0, weight_bytes=0.0, kernels=0.0, comm_bytes=X,
                  dims=(8.0, float(ep), 1.0, 1.0, 1.0))

    assert float(alltoall_seconds(r, op(8))) == pytest.approx(8 * 7 / 8 * X / 450e9)
    assert float(alltoall_seconds(r, op(16))) == pytest.approx(max((1 - 0.5 ** 8) * X / 50e9, 7 * X / 450e9))
    flat = Roofs(peak_flop_per_s=1e15, bandwidth_bytes_per_s=3e12, link_bytes_per_s=450e9)
    assert float(alltoall_seconds(flat, op(16))) == pytest.approx(8 * 15 / 16 * X / 450e9)


def test_ep_overlap_hides_that_share_of_the_exchange():
    from aicalc.core.forward import Op
    from aicalc.core.pricing import Roofs, op_times

    r = Roofs(peak_flop_per_s=1e15, bandwidth_bytes_per_s=3e12, link_bytes_per_s=450e9)
    op = Op("moe_alltoall", "alltoall", flop=0.0, bytes=0.0, weight_bytes=0.0, kernels=0.0, comm_bytes=1e6,
            dims=(8.0, 8.0, 1.0, 1.0, 1.0))
    eff = Efficiency()._replace(link=1.0, collective_latency_s=0.0, kernel_overhead_s=0.0)
    full = float(op_times(op, r, eff, 1.0)[1])
    assert full == pytest.approx(7 * 1e6 / 450e9)
    assert float(op_times(op, r, eff._replace(ep_overlap=0.6), 1.0)[1]) == pytest.approx(0.4 * full)


@pytest.mark.parametrize(("model", "chip", "kw"), SETUPS)
def test_a_grid_priced_from_tables(model, chip, kw):
    """More points than a chunk over few batch sizes and prompts at one TP and gen (``aicalc.core.grid``: the
    attention core once per prompt and per context, times the batch; the rest of decode and the LM head once per
    batch size; prefill's routed experts in closed form past the tokens that reach every expert, op by op
    before): every point's FLOPs, bytes and times are the op-by-op ones, and ``compute_bound_batch``, evaluated
    once per context, is bit for bit that of each point alone."""
    from aicalc.core import grid

    cs = cost_setup(model, chip, tp_needs_link=True, **kw)
    s, roofs, fm = cs.shape, cs.roofs, cs.formats
    rng = np.random.default_rng(9)
    n = 40000
    B = rng.integers(1, 300, n).astype(float)
    B[:50] = 1.0
    S = rng.integers(1, 8000, n).astype(float)
    for over, tp, gen in (({}, 1.0, 256.0), ({"overlap_p": 3.0, "gemv_efficiency": 0.6}, 2.0, 7.0),
                          ({"grouped_gemm_tile": 0.0, "gemm_half_dim": 0.0, "overlap_p": 1.0}, 1.0, 64.0),
                          ({"grouped_gemm_tile_min": 16.0, "grouped_gemm_half_dim": 1024.0}, 1.0, 64.0)):
        eff = cs.efficiency.with_overrides(over)
        got = grid.inference(s, roofs, fm, eff, B, S, gen, tp, latency.Par())
        assert got is not None
        for k, (T, P, logits) in enumerate(((S, 0.0 * S, 1.0), (np.ones_like(S), S + gen / 2.0, None))):
            want = op_by_op(s, roofs, fm, eff, B, T, P, np.full(n, tp), logits, 1.0, latency.Par())
            for g, w in zip(got[4 * k:4 * k + 4], want, strict=True):
                assert np.allclose(g, w, rtol=1e-12, atol=0)
        for k, (ttft, tpot) in ((8, (got[3], got[7])), (10, (got[2], got[6]))):
            assert np.allclose(got[k], ttft + (gen - 1.0) * tpot, rtol=1e-15, atol=0)
            assert np.allclose(got[k + 1], B * gen / got[k], rtol=1e-15, atol=0)
        cbb = latency.compute_bound_batch(s, roofs, fm, S + gen / 2.0, np.full(n, tp))
        one = [latency.compute_bound_batch(s, roofs, fm, S[i:i + 1] + gen / 2.0, np.full(1, tp))[0]
               for i in range(0, n, 1999)]
        assert np.array_equal(cbb[::1999], one)


def test_a_grid_that_is_not_whole_numbers_is_priced_point_by_point():
    """A batch with a fraction (attention DP's share of a replica's sequences) is not tabulated: the grid path
    declines and the chunked path prices it."""
    from aicalc.core import grid

    cs = cost_setup("llama-3.1-8b", "h100-sxm")
    B, S, _, _ = sweep(40000, 10)
    S = np.minimum(S, 8000.0)  # 8,000 prompts over 40,000 points: a table pays
    assert grid.inference(cs.shape, cs.roofs, cs.formats, cs.efficiency, B + 0.5, S, 256.0, 1.0, latency.Par()) is None
    assert grid.inference(cs.shape, cs.roofs, cs.formats, cs.efficiency, B, S, 256.0, 1.0, latency.Par()) is not None


def test_a_grid_whose_squared_times_leave_the_normal_range():
    """The grid's plan over a chip 10²⁹⁰ times faster than any (times near 1e-290 s, whose squares underflow)
    falls back to the exact overlap as the op-by-op path does."""
    from aicalc.core import grid

    cs = cost_setup("llama-3.1-8b", "h100-sxm", tp_needs_link=True)
    huge = Roofs(peak_flop_per_s=1e300, bandwidth_bytes_per_s=1e300, link_bytes_per_s=1e300,
                 vector_flop_per_s=1e299)
    eff = Efficiency(kernel_overhead_s=0.0, collective_latency_s=0.0)
    rng = np.random.default_rng(11)
    B, S = rng.integers(1, 300, 40000).astype(float), rng.integers(1, 8000, 40000).astype(float)
    for e in (eff, eff.with_overrides({"gemv_efficiency": 0.5})):
        got = grid.inference(cs.shape, huge, cs.formats, e, B, S, 64.0, 1.0, latency.Par())
        want = op_by_op(cs.shape, huge, cs.formats, e, B, S, 0.0 * S, np.ones_like(S), 1.0, 1.0, latency.Par())
        for g, w in zip(got[:4], want, strict=True):
            assert np.allclose(g, w, rtol=1e-12, atol=0)


def test_expert_saturation_and_padding_thresholds():
    """From ``saturation_tokens`` on, ``experts_touched`` is every expert slot, exactly (Qwen3-style 8 of 128,
    Mixtral 2 of 8, with redundant slots and over EP 4); from ``padded_from``'s m0 on, ``padded_rows`` is m + pad
    for a fixed tile, a chosen tile and none."""
    from aicalc.core import moe

    for E, k, ep, red in ((128.0, 8.0, 1.0, 0.0), (8.0, 2.0, 1.0, 0.0), (256.0, 8.0, 4.0, 32.0)):
        n = moe.saturation_tokens(E, k, ep, red)
        tokens = n + np.arange(0.0, 5000.0)
        assert np.all(moe.experts_touched(E, k, tokens, ep, red) == (E + red) / ep)
        assert moe.experts_touched(E, k, 1.0, ep, red) < (E + red) / ep
    for tile, tile_min in ((64.0, 0.0), (128.0, 16.0), (0.0, 0.0)):
        m0, pad = moe.padded_from(tile, tile_min)
        m = m0 + np.linspace(0.0, 1e5, 20001)
        assert np.allclose(moe.padded_rows(m, tile, tile_min), m + pad, rtol=1e-15, atol=0)
