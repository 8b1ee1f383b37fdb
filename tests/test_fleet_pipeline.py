"""The fleet search (``serve --search`` with a traffic, ``compare``'s fleet) tries pipelines as the deployment
search does: a TP group that fills a node, over 2 and 4 nodes (vLLM's multi-node layout). Each pipelined row is a
fleet the traffic simulation itself (``aicalc.simulate`` with ``--pp``) finds meets the targets, with one replica
fewer missing them."""

from __future__ import annotations

import pytest

import aicalc

RATE, TTFT, TPOT = 11.57, 2.0, 0.1


def _fleet():
    return aicalc.size_fleet("llama-3.1-405b", "h100-sxm", rate=RATE, max_ttft=TTFT, max_tpot=TPOT,
                             dtypes=("bf16",), disaggregate=False)


def test_pipelined_layouts_are_sized():
    rows = _fleet().meta["row_dicts"]
    piped = {r["pp"]: r for r in rows if r["pp"] > 1}
    assert set(piped) == {2, 4}  # an H100 node holds 8: TP 8 over 2 and 4 nodes
    for r in rows:
        assert r["chips"] == r["tp"] * r["pp"] * r["replicas"]
    assert all(r["tp"] == 8 for r in piped.values())


def test_a_pipelined_fleet_meets_the_targets_and_one_replica_fewer_does_not():
    row = next(r for r in _fleet().meta["row_dicts"] if r["pp"] == 2)

    def p99(chips):
        t = aicalc.simulate("llama-3.1-405b", "h100-sxm", rate=RATE, tp=8, pp=2, chips=chips, dtype="bf16",
                            num_requests=1000, max_ttft=TTFT, max_tpot=TPOT)
        return float(t["p99_ttft_s"][0]), float(t["p99_tpot_s"][0])

    ttft, tpot = p99(row["chips"])
    assert ttft <= TTFT and tpot <= TPOT
    # the same simulation as the fleet's (its arrival times scaled the other way round: last digits only)
    assert (ttft, tpot) == pytest.approx((row["p99_ttft_s"], row["p99_tpot_s"]), rel=1e-9)
    fewer = p99(row["chips"] - 16)
    assert fewer[0] > TTFT or fewer[1] > TPOT
