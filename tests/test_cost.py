"""Cost and energy arithmetic, checked against hand-derived figures."""

import pytest

from aicalc.core import cost


def test_usd_from_chip_hours():
    # 8 chips for 10 hours at $3.99 per chip-hour = $319.20
    assert cost.usd(8, 36_000, 3.99) == pytest.approx(319.20)


def test_usd_per_million_tokens():
    # 8 chips at $2/h = $16/h; 20,000 tokens/s = 72e6 tokens/h → $0.2222 per 1e6 tokens
    assert cost.usd_per_million_tokens(8, 20_000, 2.0) == pytest.approx(16 / 72)


def test_energy():
    # 8 × 700 W × 0.8 × 1.2 = 5,376 W for one hour = 5.376 kWh
    assert cost.kwh(8, 3600, 700) == pytest.approx(5.376)
    assert cost.joules_per_token(8, 5376, 700) == pytest.approx(1.0)
    assert cost.kwh(1, 3600, 1000, cost.PowerModel(1.0, 1.0)) == pytest.approx(1.0)


def test_article_003_split():
    # seeds/003: "$2M training, $18M annual inference → 90% : 10%"
    assert cost.lifetime_split(2e6, 18e6) == pytest.approx(0.9)
    # but its own service example, 10M requests/day × $0.002, is $7.3M a year, i.e. 78.5 % inference
    annual = 10e6 * 0.002 * 365
    assert annual == pytest.approx(7.3e6)
    assert cost.lifetime_split(2e6, annual) == pytest.approx(7.3 / 9.3)


def test_request_seconds():
    assert cost.request_seconds(0.5, 0.02, 100, 10) == pytest.approx(0.25)
