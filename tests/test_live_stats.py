"""The chat stats bar's arithmetic on fixture records."""

from tracefixtures import goose_records
from tui.stats import LiveStats


def test_speed_speedup_acceptance_and_sparkline():
    stats = LiveStats()
    for i, record in enumerate(goose_records()):
        stats.add(record, elapsed=0.1 * (i + 1))
    assert (stats.tokens, stats.steps) == (16, 4)
    assert stats.mean_accepted == 4.0 and abs(stats.tokens_per_s - 40.0) < 1e-9
    # plain decoding at 50 ms/token would need 0.8 s for 16 tokens; this took 0.4 s
    assert abs(stats.speedup(0.05) - 2.0) < 1e-9 and stats.speedup(None) is None
    assert stats.accepted["spine"] == 4 + 1 + 4 and stats.accepted["spine-branch"] == 3
    assert stats.sparkline(10) == "███▂"
    text = stats.render(0.05).plain
    assert "2.00× vs ar (50 ms/token measured at start)" in text and "spine 9/" in text
