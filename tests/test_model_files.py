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
    (tmp_path / "model.safetensors").write_bytes(safetensors_bytes({"model.embed_tokens.weight": ("BF16", [256, 64]),
                                                                    "model.layers.0.mlp.up_proj.weight": ("BF16", [128, 64])}))
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


# --- hostile model files (docs/robustness.md): one clear line and exit 2, never a hang, exit 3 or a bad number ---

LINEAR = {"model.layers.0.mlp.up_proj.weight": ("BF16", [128, 64])}


def model_folder(tmp_path, name="m"):
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(CONFIG))
    return folder


def raw_safetensors(path, header, data=b"", length=None):
    """A safetensors file of a header given as JSON text (so that it can hold what json.dumps never writes)."""
    head = header.encode() if isinstance(header, str) else header
    path.write_bytes((len(head) if length is None else length).to_bytes(8, "little") + head + data)


def refused(cli, target, *words, argv=("kv-cache",), opts=("--dtype", "checkpoint")):
    """``aicalc ARGV TARGET OPTS --json`` ends in exit 2 with one line naming ``words``."""
    r = cli(*argv, target, *opts, "--json")
    assert r.code == 2, (r.code, r.out[:300], r.err)
    assert r.err.count("\n") == 1 and r.err.startswith("aicalc: error: ") and "Traceback" not in r.err, r.err
    for w in words:
        assert w in r.err, r.err
    return r.err


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_or_folder_in_the_model_folder_is_refused_without_blocking(tmp_path, cli):
    fifo = model_folder(tmp_path, "fifo")
    os.mkfifo(fifo / "model.safetensors")
    # a fresh process: a read that blocks would hang the test run, not just fail it
    for argv in (["kv-cache", str(fifo)], ["presets", "show", str(fifo)]):
        r = subprocess.run([sys.executable, "-m", "aicalc", *argv], capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
        assert "model.safetensors: not a regular file (a FIFO)" in r.stderr
    folder = model_folder(tmp_path, "dir")
    (folder / "model.safetensors").mkdir()
    refused(cli, folder, "model.safetensors: not a regular file (a folder)")
    # a shard named by the index is checked the same way
    indexed = model_folder(tmp_path, "indexed")
    os.mkfifo(indexed / "model-00001-of-00001.safetensors")
    (indexed / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"model.layers.0.mlp.up_proj.weight": "model-00001-of-00001.safetensors"}}))
    refused(cli, indexed, "model-00001-of-00001.safetensors: not a regular file (a FIFO)")


@pytest.mark.parametrize("shard", ["../outside.safetensors", "/etc/passwd", "sub/../../x.safetensors", "", 5, None,
                                   "a\\..\\b.safetensors"])
def test_index_shards_outside_the_folder_are_refused(tmp_path, cli, shard):
    folder = model_folder(tmp_path)
    (tmp_path / "outside.safetensors").write_bytes(safetensors_bytes(LINEAR))
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"w": shard}}))
    refused(cli, folder, "model.safetensors.index.json", "not a file name inside the model folder")


def test_index_names_the_shards_read(tmp_path, cli):
    folder = model_folder(tmp_path)
    # a Hugging Face cache snapshot: each shard a symlink to a blob outside the folder, which is fine
    blobs = tmp_path / "blobs"
    blobs.mkdir()
    shards = {"model-00001-of-00002.safetensors": {"model.embed_tokens.weight": ("BF16", [256, 64])},
              "model-00002-of-00002.safetensors": LINEAR}
    for name, tensors in shards.items():
        (blobs / name).write_bytes(safetensors_bytes(tensors))
        (folder / name).symlink_to(blobs / name)
    weight_map = {t: name for name, tensors in shards.items() for t in tensors}
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 49152},
                                                                     "weight_map": weight_map}))
    (folder / "consolidated.safetensors").write_bytes(safetensors_bytes(LINEAR))  # not in the index: not counted
    spec = aicalc.load_model(str(folder))
    assert spec.checkpoint.total_bytes == (256 + 128) * 64 * 2 and spec.checkpoint.tensors == 2
    # a partial download is refused rather than counted short; an index without its shards leaves the config alone
    (folder / "model-00002-of-00002.safetensors").unlink()
    refused(cli, folder, "2 shards, 1 of them missing", "model-00002-of-00002.safetensors")
    (folder / "model-00001-of-00002.safetensors").unlink()
    assert cli("kv-cache", folder, "--json").code == 0
    assert aicalc.load_model(str(folder)).checkpoint is None


HEADERS = {  # name: (header JSON text, words the one-line error holds)
    "negative dimension": ('{"model.layers.0.mlp.up_proj.weight": {"dtype": "BF16", "shape": [-1000000000, 1000],'
                           ' "data_offsets": [0, 0]}}', "not a list of non-negative integers: -1000000000"),
    "shape is a text": ('{"w": {"dtype": "BF16", "shape": "12", "data_offsets": [0, 4]}}',
                        "shape that is not a list of integers: '12'"),
    "boolean dimension": ('{"w": {"dtype": "BF16", "shape": [true], "data_offsets": [0, 2]}}', "integers: True"),
    "float dimension": ('{"w": {"dtype": "BF16", "shape": [1e300, 1e300], "data_offsets": [0, 2]}}', "1e+300"),
    "2^50 elements": ('{"w": {"dtype": "BF16", "shape": [' + ", ".join(["1000000000000000"] * 30) + "]}}",
                      "more than 2^50 elements"),
    "one huge dimension": ('{"w": {"dtype": "BF16", "shape": [18446744073709551615]}}', "above aicalc's cap of 2^50"),
    "infinity": ('{"w": {"dtype": "BF16", "shape": [Infinity]}}', "Infinity is not a number"),
    "NaN": ('{"w": {"dtype": "BF16", "shape": [NaN]}}', "NaN is not a number"),
    "float overflow": ('{"w": {"dtype": "BF16", "shape": [1e400]}}', "1e400 is out of range"),
    "5000-digit integer": ('{"w": {"dtype": "BF16", "shape": [' + "9" * 5000 + "]}}", "an integer of 5,000 digits"),
    "unknown dtype": ('{"w": {"dtype": "Q4", "shape": [2], "data_offsets": [0, 2]}}', "unknown dtype 'Q4'"),
    "dtype not a text": ('{"w": {"dtype": 2, "shape": [2], "data_offsets": [0, 2]}}', "unknown dtype 2"),
    "no shape": ('{"w": {"dtype": "BF16"}}', "tensor 'w' has no dtype and shape"),
    "no offsets": ('{"w": {"dtype": "BF16", "shape": [2]}}', "no data_offsets"),
    "negative offsets": ('{"w": {"dtype": "BF16", "shape": [2], "data_offsets": [-5, -1]}}', "0 ≤ begin ≤ end"),
    "offsets and shape disagree": ('{"w": {"dtype": "BF16", "shape": [2], "data_offsets": [0, 2]}}',
                                   "has 2 bytes of data, but its BF16 shape [2] needs 4"),
    "data past the end": ('{"w": {"dtype": "BF16", "shape": [1000], "data_offsets": [0, 2000]}}',
                          "past the end of the file's 0 bytes of data"),
    "duplicate tensor": ('{"w": {"dtype": "BF16", "shape": [0], "data_offsets": [0, 0]}, "w": {}}',
                         "duplicate key 'w'"),
    "metadata not texts": ('{"__metadata__": {"format": [1]}}', "__metadata__ is not a mapping of texts"),
    "not a mapping": ("[1, 2]", "not a mapping"),
    "nested 10^5 deep": ("[" * 100_000 + "]" * 100_000, "cannot read the safetensors header"),
    "no tensors": ("{}", "holds 0 tensor(s) of embeddings and norms only"),
    "no block weights": ('{"model.embed_tokens.weight": {"dtype": "BF16", "shape": [0, 64], "data_offsets": [0, 0]}}',
                         "holds 1 tensor(s) of embeddings and norms only"),
}


@pytest.mark.parametrize("case", HEADERS)
def test_hostile_safetensors_headers_are_refused(tmp_path, cli, case):
    header, words = HEADERS[case]
    folder = model_folder(tmp_path)
    raw_safetensors(folder / "model.safetensors", header)
    if "embeddings and norms only" in words:  # a readable header without block weights: only --dtype checkpoint,
        refused(cli, folder, words)          # which sizes the weights from them, cannot use it
        assert cli("kv-cache", folder, "--json").code == 0
        return
    refused(cli, folder, "model.safetensors", words)
    with pytest.raises(aicalc.AicalcError, match="model.safetensors"):
        aicalc.load_model(str(folder))


def test_safetensors_header_length_is_checked_before_it_is_read(tmp_path, cli, monkeypatch):
    from aicalc.catalog import checkpoint

    folder = model_folder(tmp_path)
    raw_safetensors(folder / "model.safetensors", "{}", length=100 << 20)  # a 100 MiB header, refused by its length
    refused(cli, folder, "a 104,857,600-byte safetensors header is more than the 16 MiB aicalc reads")
    raw_safetensors(folder / "model.safetensors", "{}", length=1000)  # a length past the end of the file
    refused(cli, folder, "its safetensors header says 1,000 bytes, but the file holds only 2")
    raw_safetensors(folder / "model.safetensors", b"\xff\xfe{}")
    refused(cli, folder, "not UTF-8 text at byte 0")
    folder.joinpath("model.safetensors").write_bytes(b"\x01\x00")
    refused(cli, folder, "shorter than its 8-byte header length")
    # the headers of all a folder's shards together: 64 MiB (here made small)
    for i in range(3):
        (folder / f"model-{i}.safetensors").write_bytes(safetensors_bytes(LINEAR))
    folder.joinpath("model.safetensors").unlink()
    assert cli("kv-cache", folder, "--dtype", "checkpoint", "--json").code == 0
    monkeypatch.setattr(checkpoint, "MAX_FOLDER_BYTES", 2 * int.from_bytes(safetensors_bytes(LINEAR)[:8], "little"))
    refused(cli, folder, "the safetensors headers of this folder add up to more than")


@pytest.mark.skipif(sys.platform == "win32", reason="resource is Unix only")
def test_a_header_at_the_cap_is_refused_in_seconds_and_well_under_a_gib(tmp_path):
    """The most expensive header aicalc parses: 16 MiB of empty lists (~5.6 million Python objects)."""
    folder = model_folder(tmp_path)
    filler = "[]," * ((16 << 20) // 3 - 20)
    raw_safetensors(folder / "model.safetensors", '{"w": {"dtype": "BF16", "shape": [' + filler + "[]]}}")
    assert (folder / "model.safetensors").stat().st_size - 8 <= 16 << 20
    code = ("import resource, sys\nfrom aicalc.cli import main\ncode = main(sys.argv[1:])\n"
            "print(f'maxrss_kb={resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}', file=sys.stderr)\n"
            "sys.exit(code)\n")
    r = subprocess.run([sys.executable, "-c", code, "kv-cache", str(folder)], capture_output=True, text=True,
                       timeout=60)
    err, _, rss = r.stderr.rpartition("maxrss_kb=")
    assert r.returncode == 2 and "tensor 'w' has a shape that is not a list of non-negative integers" in err, err
    assert int(rss) * 1024 < 2**30


def tiny_gguf(path, drop=(), extra=(), tensors=None):
    """A small llama GGUF (two layers' worth of metadata, one block tensor), leaving out the keys in ``drop`` and
    adding ``extra``: (key, value, GGUFValueType[, sub-type]) written as given, whatever its type."""
    gguf = pytest.importorskip("gguf")
    import numpy as np

    w = gguf.GGUFWriter(str(path), "llama")
    meta = {"llama.block_count": 2, "llama.embedding_length": 64, "llama.feed_forward_length": 128,
            "llama.attention.head_count": 4, "llama.attention.head_count_kv": 2, "llama.context_length": 512,
            "llama.vocab_size": 256}
    for key, value in meta.items():
        if key not in drop:
            w.add_uint32(key, value)
    for key, value, vtype, *sub in extra:
        w.add_key_value(key, value, vtype, *sub)
    for name, arr in (tensors or {"blk.0.attn_q.weight": np.zeros((64, 64), np.float16)}).items():
        w.add_tensor(name, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _gguf_wrong_types():
    gguf = pytest.importorskip("gguf")
    t = gguf.GGUFValueType
    nan, inf = float("nan"), float("inf")
    return [  # (key replaced, value, its type, words of the error)
        ("llama.embedding_length", "abc", t.STRING, "llama.embedding_length is STRING, not an integer"),
        ("llama.embedding_length", nan, t.FLOAT32, "llama.embedding_length is FLOAT32, not an integer"),
        ("llama.embedding_length", inf, t.FLOAT64, "llama.embedding_length is FLOAT64, not an integer"),
        ("llama.embedding_length", [64, 64], t.ARRAY, "llama.embedding_length is ARRAY/UINT32, not an integer"),
        ("llama.vocab_size", "x", t.STRING, "llama.vocab_size is STRING, not an integer"),
        ("llama.block_count", True, t.BOOL, "llama.block_count is BOOL, not an integer"),
        ("llama.attention.layer_norm_rms_epsilon", "x", t.STRING,
         "llama.attention.layer_norm_rms_epsilon is STRING, not a finite number"),
        ("llama.attention.layer_norm_rms_epsilon", nan, t.FLOAT32, "layer_norm_rms_epsilon is nan, not a finite"),
        ("llama.attention.layer_norm_rms_epsilon", -1.0, t.FLOAT32, "layer_norm_rms_epsilon is -1.0, not a finite"),
        ("llama.attention.key_length", nan, t.FLOAT32, "llama.attention.key_length is FLOAT32, not an integer"),
        ("llama.attention.key_length", "16", t.STRING, "llama.attention.key_length is STRING, not an integer"),
        ("general.file_type", "\x1b[31mX", t.STRING, "general.file_type is STRING, not an integer"),
        ("tokenizer.ggml.tokens", 256, t.UINT32, "tokenizer.ggml.tokens is UINT32, not a list of texts"),
        ("llama.embedding_length", -64, t.INT32, "field 'hidden_size' must be a positive integer, got -64"),
        ("llama.context_length", 2**63, t.UINT64, "'max_position_embeddings' is 9223372036854775808, above"),
    ]


@pytest.mark.parametrize("case", range(15))
def test_gguf_metadata_of_the_wrong_type_is_refused_by_its_key(tmp_path, cli, case):
    gguf = pytest.importorskip("gguf")
    key, value, vtype, words = _gguf_wrong_types()[case]
    sub = (gguf.GGUFValueType.UINT32,) if vtype == gguf.GGUFValueType.ARRAY else ()
    path = tiny_gguf(tmp_path / "m.gguf", drop=(key,), extra=[(key, value, vtype, *sub)])
    refused(cli, path, str(path), words)
    refused(cli, path, words, argv=("presets", "show"), opts=())


def test_gguf_files_are_bounded_before_they_are_parsed(tmp_path, cli, monkeypatch):
    import struct

    from aicalc.catalog import checkpoint

    gguf = pytest.importorskip("gguf")
    ok = tiny_gguf(tmp_path / "ok.gguf")
    assert cli("kv-cache", ok, "--dtype", "checkpoint", "--json").code == 0
    data = ok.read_bytes()

    def variant(name, blob):
        (tmp_path / name).write_bytes(blob)
        return tmp_path / name

    header = b"GGUF" + struct.pack("<I", 3)
    refused(cli, variant("tensors.gguf", header + struct.pack("<QQ", 10**7, 1) + data[24:]),
            "10,000,000 tensors is more than aicalc's cap of 1,048,576")
    refused(cli, variant("keys.gguf", header + struct.pack("<QQ", 1, 2**62) + data[24:]),
            "4,611,686,018,427,387,904 metadata keys is more than aicalc's cap of 65,536")
    refused(cli, variant("version.gguf", b"GGUF" + struct.pack("<I", 99) + data[8:]), "GGUF version 99")
    refused(cli, variant("cut.gguf", data[:200]), "not a readable GGUF file", "a truncated file?")
    refused(cli, variant("cut-data.gguf", data[:-100]), "tensor 'blk.0.attn_q.weight' ends at byte")
    refused(cli, variant("empty.gguf", b""), "0 bytes is too short for a GGUF file")
    # a vocabulary is a list of texts, each skipped: the texts of all lists together are capped (4 Mi; here 100)
    words = tiny_gguf(tmp_path / "words.gguf", extra=[("tokenizer.ggml.tokens", [f"t{i}" for i in range(256)],
                                                        gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.STRING)])
    assert aicalc.load_model(str(words)).arch.vocab == 256
    monkeypatch.setattr(checkpoint, "MAX_GGUF_ELEMENTS", 100)
    refused(cli, words, "more than aicalc's cap of 100 texts and lists")
    # a GGUF of embeddings alone sizes no weights
    import numpy as np

    embed = tiny_gguf(tmp_path / "embed.gguf", tensors={"token_embd.weight": np.zeros((256, 64), np.float16)})
    refused(cli, embed, "holds 1 tensor(s) of embeddings and norms only")
    if hasattr(os, "mkfifo"):
        os.mkfifo(tmp_path / "fifo.gguf")
        refused(cli, tmp_path / "fifo.gguf", "fifo.gguf")


def test_hub_headers_are_checked_as_local_ones_are(tmp_path):
    pytest.importorskip("huggingface_hub")
    head = (b'{"model.layers.0.mlp.up_proj.weight": {"dtype": "BF16", "shape": [-1000000000, 1000], '
            b'"data_offsets": [0, 2]}}')
    srv, endpoint = serve({("org/neg", "config.json"): json.dumps(CONFIG).encode(),
                           ("org/neg", "model.safetensors"): len(head).to_bytes(8, "little") + head + b"\0\0"})
    try:
        r = _hub_cli(endpoint, tmp_path, "kv-cache", "org/neg", "--dtype", "checkpoint", "--json")
    finally:
        srv.shutdown()
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "hf://org/neg/model.safetensors: tensor 'model.layers.0.mlp.up_proj.weight' has a shape" in r.stderr


def test_the_bounded_gguf_reader_agrees_with_the_gguf_package(tmp_path):
    """aicalc reads GGUF tensor infos with its own bounded reader (GGUFReader builds an object per vocabulary
    entry: seconds and hundreds of MB for a 300k-token vocabulary); the package's reader is the oracle for what
    each tensor stores, quantized types included."""
    gguf = pytest.importorskip("gguf")
    import numpy as np

    from aicalc.catalog.checkpoint import _GGUF

    path = tmp_path / "q.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(1)
    w.add_token_list([f"t{i}" for i in range(300)])
    rng = np.random.default_rng(0)
    for name, qtype in (("a", gguf.GGMLQuantizationType.Q8_0), ("b", gguf.GGMLQuantizationType.Q4_0),
                        ("c", gguf.GGMLQuantizationType.F16), ("d", gguf.GGMLQuantizationType.F32)):
        arr = rng.standard_normal((64, 256)).astype(np.float32)
        data = gguf.quants.quantize(arr, qtype) if qtype not in (gguf.GGMLQuantizationType.F32,) else arr
        w.add_tensor(f"blk.0.{name}.weight", data, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    oracle = {t.name: int(t.n_bytes) for t in gguf.GGUFReader(str(path)).tensors}
    assert _GGUF(path).tensors == oracle


@pytest.mark.parametrize("repo, offline", [("meta-llama/Llama-3.1-8B", False),
                                           ("META-LLAMA/llama-3.1-8b-instruct", False),
                                           ("meta-llama/Llama-3.1-8B-Instruct", True)])
def test_a_presets_hub_id_answers_from_the_preset_when_the_hub_is_unreachable(tmp_path, repo, offline):
    """No connection (port 9 refuses it) or HF_HUB_OFFLINE with nothing cached: the built-in preset whose hf_repo is
    the id (or the id less a chat suffix) stands in, and says so. Llama 3.1 8B's KV cache per token, by hand:
    2 (K and V) x 32 layers x 8 KV heads x 128 x 2 bytes = 131,072 B."""
    pytest.importorskip("huggingface_hub")
    r = _hub_cli("http://127.0.0.1:9", tmp_path, "kv-cache", repo, "--context", "1", "--block-size", "1", "--json",
                 offline=offline)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["inputs"]["model"] == "llama-3.1-8b"
    assert doc["rows"][0]["kv_bytes_per_token"] == 2 * 32 * 8 * 128 * 2
    shown = _hub_cli("http://127.0.0.1:9", tmp_path, "presets", "show", repo, "--json", offline=offline)
    assert shown.returncode == 0 and "built-in preset llama-3.1-8b for hf://" in shown.stdout
    # a repo no preset copies keeps the Hub's error: one line, exit 2
    other = _hub_cli("http://127.0.0.1:9", tmp_path, "kv-cache", "meta-llama/Llama-9-8B", offline=offline)
    assert other.returncode == 2 and other.stderr.count("\n") == 1
