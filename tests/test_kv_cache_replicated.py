"""kv-cache says where tensor parallelism does not split the cache, and the per-device numbers agree."""

import pytest


def _per_device(cli, model, tp):
    return cli("kv-cache", model, "--tp", tp, "--context", "8k", "--batch", 4, "--json").json["rows"][0][
        "kv_cache_bytes_per_device"]


@pytest.mark.parametrize("model, tp, plateau", [
    ("deepseek-v3", 8, 1),  # MLA: one latent per token, whatever the TP
    ("llama-3.1-70b", 16, 8),  # 8 kv heads: past TP 8 each rank still holds one head's K and V
])
def test_note_where_the_cache_stops_shrinking(cli, model, tp, plateau):
    r = cli("kv-cache", model, "--tp", tp, "--context", "8k", "--batch", 4)
    line = next(x for x in r.out.splitlines() if "TP does not split it" in x or "kv heads over" in x)
    assert f"{tp} devices" in line
    assert _per_device(cli, model, tp) == _per_device(cli, model, plateau)


def test_no_note_where_tp_splits_the_heads(cli):
    out = cli("kv-cache", "llama-3.1-70b", "--tp", 8, "--context", "8k").out
    assert "kv heads over" not in out and "TP does not split" not in out
    assert _per_device(cli, "llama-3.1-70b", 8) == _per_device(cli, "llama-3.1-70b", 4) / 2
