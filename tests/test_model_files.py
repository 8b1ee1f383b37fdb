"""Models from their files: exact weight bytes from safetensors headers (a local folder, or a Hub repo through
huggingface_hub against a loopback server), architecture and bytes from GGUF files; --dtype checkpoint."""

import json
import os
import subprocess
import sys

import pytest
from hub_server import safetensors_bytes, serve

import aicalc

CONFIG = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
          "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 256, "max_position_embeddings": 512,
          "tie_word_embeddings": False}


def gptq_tensors():
    """A GPTQ-style 4-bit checkpoint: int32-packed qweight (8 weights each), fp16 scales per group of 32 rows and
    int32-packed zeros per group, 16-bit embedding, head and norms."""
    t = {"model.embed_tokens.weight": ("F16", [256, 64]), "lm_head.weight": ("F16", [256, 64]),
         "model.norm.weight": ("F16", [64])}
    shapes = {"q_proj": (64, 64), "k_proj": (64, 32), "v_proj": (64, 32), "o_proj": (64, 64),
              "gate_proj": (64, 128), "up_proj": (64, 128), "down_proj": (128, 64)}
    for i in range(2):
        for name, (k, n) in shapes.items():
            mod = "self_attn" if name[0] in "qkvo" else "mlp"
            p = f"model.layers.{i}.{mod}.{name}"
            t[f"{p}.qweight"] = ("I32", [k // 8, n])
            t[f"{p}.scales"] = ("F16", [k // 32, n])
            t[f"{p}.qzeros"] = ("I32", [k // 32, n // 8])
        t[f"model.layers.{i}.input_layernorm.weight"] = ("F16", [64])
        t[f"model.layers.{i}.post_attention_layernorm.weight"] = ("F16", [64])
    return t


def nbytes(tensors, keep=lambda name: True):
    size = {"F16": 2, "BF16": 2, "I32": 4, "F32": 4}
    total = 0
    for name, (dt, shape) in tensors.items():
        if keep(name):
            n = size[dt]
            for s in shape:
                n *= s
            total += n
    return total


def test_local_safetensors_folder_gives_exact_bytes(tmp_path):
    cfg = CONFIG | {"quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 32}}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    t = gptq_tensors()
    (tmp_path / "model.safetensors").write_bytes(safetensors_bytes(t))
    kv = aicalc.kv_cache(str(tmp_path), context=16, dtype="checkpoint", block_size=None)
    linear = nbytes(t, lambda n: "layers" in n and "norm" not in n)
    edge = nbytes(t, lambda n: "embed" in n or "lm_head" in n)
    norms = (2 * 2 + 1) * 64 * 2
    assert kv.weights_bytes_per_device[0] == pytest.approx(linear + edge + norms)
    spec = aicalc.load_model(str(tmp_path))
    assert spec.checkpoint.quant_method == "gptq" and spec.checkpoint.tensors == len(t)
    # its bits per weight (4 + scales + zeros = ~4.6) name the math: weight-only int4
    r = aicalc.roofline(str(tmp_path), "h100-sxm", dtype="checkpoint")
    assert r.meta["setup"].dtype == "int4" and r.meta["setup"].formats.quantized


def test_fp8_kv_from_quantization_config(tmp_path):
    cfg = CONFIG | {"quantization_config": {"quant_method": "compressed-tensors",
                                            "kv_cache_scheme": {"num_bits": 8, "type": "float"}}}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    (tmp_path / "model.safetensors").write_bytes(safetensors_bytes({"model.embed_tokens.weight": ("BF16", [256, 64])}))
    auto = aicalc.kv_cache(str(tmp_path), context=1000, kv_dtype="auto", block_size=None)
    fp8 = aicalc.kv_cache(str(tmp_path), context=1000, kv_dtype="fp8", block_size=None)
    assert auto.kv_cache_bytes[0] == fp8.kv_cache_bytes[0]


def test_gguf_file_gives_architecture_and_bytes(tmp_path):
    gguf = pytest.importorskip("gguf")
    import numpy as np

    path = tmp_path / "tiny.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(2)
    w.add_embedding_length(64)
    w.add_feed_forward_length(128)
    w.add_head_count(4)
    w.add_head_count_kv(2)
    w.add_context_length(512)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_token_list([f"t{i}" for i in range(256)])
    tensors = {"token_embd.weight": np.zeros((256, 64), np.float16), "output.weight": np.zeros((256, 64), np.float16),
               "output_norm.weight": np.zeros(64, np.float32)}
    for i in range(2):
        for name, shape in (("attn_q", (64, 64)), ("attn_k", (32, 64)), ("attn_v", (32, 64)), ("attn_output", (64, 64)),
                            ("ffn_gate", (128, 64)), ("ffn_up", (128, 64)), ("ffn_down", (64, 128))):
            tensors[f"blk.{i}.{name}.weight"] = np.zeros(shape, np.float16)
        tensors[f"blk.{i}.attn_norm.weight"] = np.zeros(64, np.float32)
        tensors[f"blk.{i}.ffn_norm.weight"] = np.zeros(64, np.float32)
    for name, arr in tensors.items():
        w.add_tensor(name, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    spec = aicalc.load_model(str(path))
    a = spec.arch
    assert (a.hidden, a.layers, a.heads, a.kv_heads, a.ffn, a.vocab) == (64, 2, 4, 2, 128, 256)
    assert spec.checkpoint.total_bytes == sum(t.nbytes for t in tensors.values())
    kv = aicalc.kv_cache(str(path), context=16, dtype="checkpoint", block_size=None)
    assert kv.weights_bytes_per_device[0] == pytest.approx(spec.checkpoint.total_bytes, rel=0.01)


def _hub_cli(endpoint, cache, *argv, offline=False):
    env = {**os.environ, "HF_ENDPOINT": endpoint, "HF_HUB_CACHE": str(cache), "HF_HUB_DISABLE_TELEMETRY": "1",
           "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
    env.pop("HF_HUB_OFFLINE", None)
    if offline:
        env["HF_HUB_OFFLINE"] = "1"
    return subprocess.run([sys.executable, "-m", "aicalc", *argv], env=env, capture_output=True, text=True, timeout=60)


def test_hub_id_through_huggingface_hub_on_loopback(tmp_path):
    pytest.importorskip("huggingface_hub")
    t = {"model.embed_tokens.weight": ("BF16", [256, 64]), "lm_head.weight": ("BF16", [256, 64]),
         "model.layers.0.self_attn.q_proj.weight": ("BF16", [64, 64])}
    srv, endpoint = serve({("org/tiny", "config.json"): json.dumps(CONFIG).encode(),
                           ("org/tiny", "model.safetensors"): safetensors_bytes(t)})
    try:
        r = _hub_cli(endpoint, tmp_path, "presets", "show", "org/tiny", "--json")
        assert r.returncode == 0, r.stderr
        row = json.loads(r.stdout)["rows"][0]
        assert row["layers"] == 2 and row["hidden"] == 64
        r = _hub_cli(endpoint, tmp_path, "kv-cache", "org/tiny", "--context", "512", "--json")
        assert r.returncode == 0, r.stderr
        missing = _hub_cli(endpoint, tmp_path, "kv-cache", "org/missing")
        assert missing.returncode == 2 and missing.stderr.count("\n") == 1
    finally:
        srv.shutdown()
    cached = _hub_cli("http://127.0.0.1:9", tmp_path, "kv-cache", "org/tiny", "--json", offline=True)
    assert cached.returncode == 0, cached.stderr  # the cached config answers offline
    gone = _hub_cli("http://127.0.0.1:9", tmp_path, "kv-cache", "org/other", offline=True)
    assert gone.returncode == 2 and "HF_HUB_OFFLINE" in gone.stderr
