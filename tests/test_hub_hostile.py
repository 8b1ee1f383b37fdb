"""The Hub as hostile input (docs/robustness.md): a loopback server (tests/hub_server.py) that loops redirects,
drops connections, stalls, drips, ignores Range, sends huge documents or hostile shard names. Every run ends in
exit 0 or one line and exit 2, reads no more than its caps and leaves nothing over a cap in the cache. Work is
bounded by what the server counts (requests, bytes sent), never by wall time."""

import json
import os
import subprocess
import sys

import pytest
from hub_server import AUTH, REQUESTS, SENT, closed_port, redirect, safetensors_bytes, serve, status, stop
from hub_server import Hostile as H

pytest.importorskip("huggingface_hub")

CONFIG = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
          "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 256, "max_position_embeddings": 512,
          "tie_word_embeddings": False}
CFG = json.dumps(CONFIG).encode()
TENSORS = {"model.embed_tokens.weight": ("BF16", [256, 64]), "lm_head.weight": ("BF16", [256, 64]),
           "model.layers.0.mlp.up_proj.weight": ("BF16", [128, 64])}
WEIGHT_BYTES = 2 * (256 * 64 * 2 + 128 * 64)  # the shapes above, BF16 2 bytes an element
MIB = 1 << 20


def run(endpoint, cache, *argv, timeout="5", token=None):
    env = {**os.environ, "HF_ENDPOINT": endpoint, "HF_HUB_CACHE": str(cache), "HF_HUB_DISABLE_TELEMETRY": "1",
           "AICALC_HUB_TIMEOUT": timeout, "HF_HOME": str(cache / "home")}
    for k in ("HF_HUB_OFFLINE", "HF_HUB_DISABLE_PROGRESS_BARS", "HF_TOKEN", "HTTP_PROXY", "HTTPS_PROXY", "http_proxy",
              "https_proxy"):
        env.pop(k, None)
    if token:
        env["HF_TOKEN"] = token
    return subprocess.run([sys.executable, "-m", "aicalc", *argv], env=env, capture_output=True, text=True,
                          timeout=120)


def hub(files, tmp_path, *argv, **kw):
    srv, endpoint = serve(files)
    try:
        return run(endpoint, tmp_path / "hf", *(argv or ("kv-cache", "org/m", "--dtype", "checkpoint", "--json")), **kw)
    finally:
        stop(srv)


def one_line(r, *words):
    assert r.returncode == 2, (r.returncode, r.stdout[:300], r.stderr)
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("aicalc: error: ") and "Traceback" not in r.stderr
    for w in words:
        assert w in r.stderr, r.stderr
    return r.stderr


def cached_configs(tmp_path):
    return [p for p in (tmp_path / "hf").rglob("config.json")] if (tmp_path / "hf").exists() else []


def test_a_good_repo_reads_exact_bytes_and_prints_no_progress(tmp_path):
    r = hub({("org/m", "config.json"): CFG, ("org/m", "model.safetensors"): safetensors_bytes(TENSORS)}, tmp_path,
            "presets", "show", "org/m", "--json")
    assert r.returncode == 0 and r.stderr == "", r.stderr  # no progress bar on stderr, progress env or not
    assert checkpoint_of(r) == (WEIGHT_BYTES, 3)
    assert len(cached_configs(tmp_path)) == 1  # cached where huggingface_hub's try_to_load_from_cache looks


def test_transport_failures_are_exit_2_saying_the_hub_failed(tmp_path):
    dead = f"http://127.0.0.1:{closed_port()}"
    cases = {
        "redirect loop": {("org/m", "config.json"): redirect("/org/m/resolve/main/config.json")},
        "connection refused": {("org/m", "config.json"): redirect(f"{dead}/org/m/resolve/main/config.json")},
        "connection was dropped": {("org/m", "config.json"): H(body=CFG + b" " * 1000, drop_after=10)},
    }
    for how, files in cases.items():
        one_line(hub(files, tmp_path), "the Hugging Face Hub at http://127.0.0.1:", "failed reading config.json", how)
    one_line(run(dead, tmp_path / "hf", "kv-cache", "org/m"), "connection refused")
    one_line(run("http://127.0.0.1:99999", tmp_path / "hf", "kv-cache", "org/m"), "HF_ENDPOINT", "not a usable URL")
    assert cached_configs(tmp_path) == []


def test_the_token_goes_to_the_endpoint_only(tmp_path):
    """A redirect to another host (a CDN, or anywhere a hostile mirror points) gets no Authorization header."""
    srv, endpoint = serve({("org/m", "config.json"): redirect("REPLACED"), ("org/m", "real.json"): CFG})
    other = endpoint.replace("127.0.0.1", "localhost")
    from hub_server import FILES

    FILES[("org/m", "config.json")] = redirect(f"{other}/org/m/resolve/main/real.json")
    try:
        r = run(endpoint, tmp_path / "hf", "presets", "show", "org/m", "--json", token="hf_secret")
    finally:
        stop(srv)
    assert r.returncode == 0, r.stderr
    assert AUTH[:2] == [("/org/m/resolve/main/config.json", "Bearer hf_secret"), ("/org/m/resolve/main/real.json", None)]


def test_http_errors_name_the_status_not_a_missing_file(tmp_path):
    one_line(hub({("org/m", "config.json"): status(500)}, tmp_path), "HTTP 500 (a server error)")
    r = hub({("org/m", "config.json"): status(404, X_Error_Code="RepoNotFound")}, tmp_path)
    one_line(r, "no Hugging Face Hub repo 'org/m'")
    one_line(hub({("org/x", "config.json"): CFG}, tmp_path), "Hub repo 'org/m' has no config.json")
    # a server error on the headers is no silent "no safetensors" either
    one_line(hub({("org/m", "config.json"): CFG, ("org/m", "model.safetensors"): status(502)}, tmp_path),
             "reading the safetensors header of model.safetensors", "HTTP 502")


def test_a_long_retry_after_is_refused_at_once_and_a_short_one_waited(tmp_path):
    r = hub({("org/m", "config.json"): status(429, Retry_After="100000")}, tmp_path)
    one_line(r, "HTTP 429 asking to retry after 100000 s")
    assert [m for m, *_ in REQUESTS] == ["GET"]  # refused on the first answer, no retry loop
    r = hub({("org/m", "config.json"): status(503, Retry_After="0")}, tmp_path)
    one_line(r, "HTTP 503 (a server error)")
    assert len(REQUESTS) == 4  # one try and three retries, then the error


def test_stalled_and_dripping_answers_end_at_the_deadline(tmp_path):
    one_line(hub({("org/m", "config.json"): H(body=CFG, stall=60)}, tmp_path, timeout="1"),
             "within 1 s (AICALC_HUB_TIMEOUT)")
    r = hub({("org/m", "config.json"): H(body=CFG, drip=0.2)}, tmp_path, timeout="1")
    one_line(r, "within 1 s (AICALC_HUB_TIMEOUT)")
    assert SENT.get("/org/m/resolve/main/config.json", 0) < len(CFG)  # cut off mid-body
    assert cached_configs(tmp_path) == []
    one_line(run("http://127.0.0.1:1", tmp_path / "hf", "kv-cache", "org/m", timeout="never"), "AICALC_HUB_TIMEOUT")


def test_documents_over_their_cap_are_refused_unread_and_not_cached(tmp_path):
    big = (2 << 30, ord(" "))  # 2 GiB, generated as sent
    one_line(hub({("org/m", "config.json"): H(body=big)}, tmp_path), "more than the 4 MiB")
    assert SENT.get("/org/m/resolve/main/config.json", 0) < 64 * MIB  # refused by its Content-Length
    one_line(hub({("org/m", "config.json"): H(body=big, length=False)}, tmp_path), "more than the 4 MiB")
    assert SENT["/org/m/resolve/main/config.json"] < 64 * MIB  # cut at the cap, socket buffers aside
    assert cached_configs(tmp_path) == []
    r = hub({("org/m", "config.json"): CFG,
             ("org/m", "model.safetensors.index.json"): H(body=(600 * MIB, ord(" ")), length=False)}, tmp_path)
    one_line(r, "more than the 16 MiB")
    assert SENT["/org/m/resolve/main/model.safetensors.index.json"] < 64 * MIB


def test_a_server_ignoring_range_sends_no_more_than_the_header(tmp_path):
    weights = safetensors_bytes(TENSORS)
    n = int.from_bytes(weights[:8], "little")
    whole = (weights[: 8 + n], (1 << 30, 0))  # the header, then 1 GiB of zeros

    class Ranged(H):  # a 200 with the whole file whatever the Range asked
        def size(self):
            return 8 + n + (1 << 30)

        def chunks(self):
            yield whole[0]
            yield from H(body=whole[1]).chunks()

    r = hub({("org/m", "config.json"): CFG, ("org/m", "model.safetensors"): Ranged()}, tmp_path,
            "presets", "show", "org/m", "--json")
    assert r.returncode == 0, r.stderr
    assert checkpoint_of(r) == (WEIGHT_BYTES, 3)
    assert SENT["/org/m/resolve/main/model.safetensors"] < 64 * MIB  # of 1 GiB: the body was cut at the cap


def checkpoint_of(r):
    row = json.loads(r.stdout)["rows"][0]
    return row["checkpoint_bytes"], row["checkpoint_tensors"]


def test_hub_shard_names_and_headers_are_checked_like_local_ones(tmp_path):
    index = json.dumps({"weight_map": {"w": "../../../etc/passwd"}}).encode()
    r = hub({("org/m", "config.json"): CFG, ("org/m", "model.safetensors.index.json"): index}, tmp_path)
    one_line(r, "'../../../etc/passwd', which is not a file name inside the model folder")
    assert not any("passwd" in path for _, path, _ in REQUESTS)  # never requested
    bad = b"{not json"
    r = hub({("org/m", "config.json"): CFG,
             ("org/m", "model.safetensors"): len(bad).to_bytes(8, "little") + bad}, tmp_path)
    one_line(r, "hf://org/m/model.safetensors: cannot read the safetensors header")
    shards = {"model.embed_tokens.weight": "a.safetensors", "lm_head.weight": "b.safetensors"}
    r = hub({("org/m", "config.json"): CFG,
             ("org/m", "model.safetensors.index.json"): json.dumps({"weight_map": shards}).encode(),
             ("org/m", "a.safetensors"): safetensors_bytes({"model.embed_tokens.weight": ("BF16", [256, 64])})},
            tmp_path)
    one_line(r, "names 2 shards, 1 of them missing on the Hub (b.safetensors)")


def test_an_index_of_no_shards_sizes_the_model_from_its_config(tmp_path):
    r = hub({("org/m", "config.json"): CFG, ("org/m", "model.safetensors.index.json"): b'{"weight_map": {}}'},
            tmp_path, "presets", "show", "org/m", "--json")
    assert r.returncode == 0, r.stderr
    row = json.loads(r.stdout)["rows"][0]
    assert row["layers"] == 2 and "checkpoint_bytes" not in row


def test_sharded_hub_repo_reads_every_header(tmp_path):
    shards = {k: f"model-0000{i}.safetensors" for i, k in enumerate(TENSORS)}
    files = {("org/m", "config.json"): CFG,
             ("org/m", "model.safetensors.index.json"): json.dumps({"weight_map": shards}).encode()}
    for k, v in TENSORS.items():
        files[("org/m", shards[k])] = safetensors_bytes({k: v})
    r = hub(files, tmp_path, "presets", "show", "org/m", "--json")
    assert r.returncode == 0, r.stderr
    assert checkpoint_of(r) == (WEIGHT_BYTES, 3)  # every shard's header read
