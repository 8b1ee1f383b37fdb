"""A latent MoE (Nemotron 3 Super: ``moe_latent_size``) is priced on its latent: the routed experts' GEMMs, the token
permutation and the dispatch run on the latent width ℓ, with the two dense projections H → ℓ and ℓ → H around them
(transformers ``NemotronHMoE.forward``: ``fc1_latent_proj``, experts, ``fc2_latent_proj``).

Figures by hand from the preset's config (H 4096, ℓ 1024, F_e 2688 non-gated experts, 22 of 512 per token, 40 MoE
blocks) and its release (routed experts NVFP4, 4.5 bits; block linears FP8, 1 byte), and one published measurement.
"""

import json

import pytest

import aicalc
from aicalc.cli import main

from conftest import preset_config

H, LAT, F, K, LM = 4096, 1024, 2688, 22, 40


def _decode_ops(capsys, model="nemotron-3-super-120b-a12b"):
    """``roofline --ops --json`` of one token's decode step on a B200, by operation."""
    assert main(["roofline", model, "--chip", "b200", "--batch", "1", "--prompt", "1", "--gen", "2", "--ops",
                 "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    return {row["op"]: row for row in rows if row["phase"] == "decode"}


def test_experts_run_on_the_latent_width(capsys):
    ops = _decode_ops(capsys)
    # one token: its 22 experts, each an up (ℓ → F) and a down (F → ℓ) projection in each of the 40 MoE blocks
    assert ops["moe_up"]["flop"] == pytest.approx(2 * K * F * LAT * LM, rel=1e-12)
    assert ops["moe_down"]["flop"] == pytest.approx(2 * K * LAT * F * LM, rel=1e-12)
    weights = K * LM * F * LAT * 4.5 / 8  # the 22 experts' NVFP4 weights read
    activations = K * (F + LAT) * 2 * LM  # 16-bit rows in and out
    assert ops["moe_up"]["bytes"] == pytest.approx(weights + activations, rel=1e-12)
    # the permutation gathers 22 latent copies and reads the token's latent once per block
    assert ops["moe_permute"]["bytes"] == pytest.approx(K * LAT * (1 + 1 / K) * 2 * LM, rel=1e-12)


def test_latent_projections_are_priced(capsys):
    ops = _decode_ops(capsys)
    for name in ("moe_latent_in", "moe_latent_out"):
        assert ops[name]["flop"] == pytest.approx(2 * H * LAT * LM, rel=1e-12)
        # FP8 weights (the release's block linears) and the 16-bit input and output of one token
        assert ops[name]["bytes"] == pytest.approx(H * LAT * LM * 1 + (H + LAT) * 2 * LM, rel=1e-12)


def test_a_plain_moe_has_no_latent_ops(capsys):
    ops = _decode_ops(capsys, "nemotron-3-nano-30b-a3b")
    assert "moe_latent_in" not in ops and "moe_latent_out" not in ops
    assert ops["moe_up"]["flop"] == pytest.approx(2 * 6 * 1856 * 2688 * 23, rel=1e-12)  # on H = 2688


def test_lambda_b200_throughput():
    """Lambda's vLLM run of the NVFP4 release on one B200: 1,517 generated tok/s at 32 requests of 8192 + 1024
    tokens (validation/cases/moe-serving.yaml MS-41); with the experts on H instead of the latent aicalc gave 559."""
    r = aicalc.roofline("nemotron-3-super-120b-a12b", chip="b200", batch=32, prompt=8192, gen=1024, kv_dtype="fp8",
                        engine="vllm-v1")
    assert float(r["output_tokens_per_s"][0]) == pytest.approx(1517, rel=0.10)


def _super_shape():
    from aicalc.catalog.hf_config import arch_from_config
    from aicalc.core.forward import shape_of

    return shape_of(arch_from_config(preset_config("nemotron-3-super-120b-a12b")))


def test_training_reads_the_latent_too():
    """train-time's expert width, the weights a token touches in a MoE block and the routed experts' parameters
    (whose gradients the experts' data-parallel group reduces) by hand: 22 experts of 2688 on the 1024-wide latent
    (up and down), the shared expert of 5376 (up and down), the 512 × 4096 router and the two 4096 × 1024
    projections; 512 × 1024 × 2 × 2688 × 40 = 112,742,891,520 routed-expert parameters, which transformers' count
    of the whole model (tests/data/validation/params.json, 120,668,687,360) holds."""
    from aicalc.core.train_time import expert_width, moe_params_per_token

    s = _super_shape()
    assert expert_width(s) == LAT
    assert moe_params_per_token(s) == K * LAT * 2 * F + H * (2 * 5376 + 512) + 2 * H * LAT
    routed = s.moe_layers * s.experts * expert_width(s) * (s.expert_in + s.expert_ffn)
    assert routed == 512 * LAT * 2 * F * LM == 112_742_891_520
    assert routed < s.total_params == 120_668_687_360


def test_latent_dispatch_is_a_quarter_of_the_hidden_one(capsys):
    """EP's all-to-all carries each token's latent (1024 of H = 4096): the same model and layout priced with the
    experts on H (moe_latent_size removed, a plain MoE of the same experts) exchanges 4 times the bytes."""
    from aicalc.api.train_time import train_time

    cfg = preset_config("nemotron-3-super-120b-a12b")
    kw = dict(chip="b200", dp=64, tp=1, pp=1, ep=8, seq=4096, global_batch=512, micro_batch=1)
    latent = train_time(cfg, **kw)
    plain = train_time({**cfg, "moe_latent_size": None}, **kw)
    assert float(plain["ep_comm_s"][0]) > 3.0 * float(latent["ep_comm_s"][0])
