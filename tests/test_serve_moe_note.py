"""serve: a mixture of experts served on plain TP is told what the same chips serve with expert parallelism."""

import re


def _best(cli, *extra):
    rows = cli("serve", "deepseek-v3", "--chip", "h100-sxm", "--tp", 16, "--max-ttft", "2s", "--max-tpot", "200ms",
               *extra, "--json").json["rows"]
    best = max((r for r in rows if r["meets_slo"]), key=lambda r: r["output_tokens_per_s"])
    return best["output_tokens_per_s"], best["concurrency"]


def test_plain_tp_names_the_layout_that_serves_more(cli):
    """DeepSeek-V3 on 16 H100s: plain TP holds every request's MLA latent on every rank; EP 16 with DP attention
    serves about three times the tokens within the same targets. The note's figures are serve's own rows with those
    flags (the JSON of each layout)."""
    out = cli("serve", "deepseek-v3", "--chip", "h100-sxm", "--tp", 16, "--max-ttft", "2s", "--max-tpot", "200ms").out
    line = next(x for x in out.splitlines() if x.startswith("a mixture of experts"))
    m = re.search(r"EP 16 and DP attention .* serve ([\d,]+) output tokens/s within the targets at concurrency "
                  r"(\d+) \(this table: ([\d,]+)\); --ep 16 --attention-dp 16", line)
    assert m, line
    dep, plain = _best(cli, "--ep", 16, "--attention-dp", 16), _best(cli)
    assert abs(int(m[1].replace(",", "")) - dep[0]) <= 0.5 and int(m[2]) == dep[1]
    assert abs(int(m[3].replace(",", "")) - plain[0]) <= 0.5
    assert dep[0] > 2 * plain[0]


def test_no_note_for_a_dense_model_or_a_layout_given(cli):
    for args in (("llama-3.1-70b", "--chip", "h100-sxm", "--tp", 4),
                 ("deepseek-v3", "--chip", "h100-sxm", "--tp", 16, "--ep", 16, "--attention-dp", 16)):
        assert "a mixture of experts" not in cli("serve", *args).out
