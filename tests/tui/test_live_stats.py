"""The chat stats bar's arithmetic on fixture records."""

from support.tracefixtures import goose_records
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


class _Baseline:
    """A baseline with a fixed cost per plain token, as drafting.machine.plain_speed.PlainBaseline reports it."""

    def __init__(self, step_s, busy=None):
        self._s, self.busy = step_s, busy

    def step_s(self, prefix=None):
        return self._s


def test_speedup_from_a_per_step_baseline_and_machine_busy():
    stats = LiveStats()
    base = _Baseline(0.05)
    for i, record in enumerate(goose_records()):
        stats.add(record, elapsed=0.1 * (i + 1), baseline=base)
    assert abs(stats.plain_s - 16 * 0.05) < 1e-9
    text = stats.render(None, baseline=base).plain  # read once: the machine's load is read anew at every call
    if "machine busy" not in text:  # other processes on this machine may hold the cores while the test runs
        assert abs(stats.speedup(None, base) - 2.0) < 1e-9
        assert "2.00× vs ar (50 ms/token at this context" in text
    busy = _Baseline(0.05, busy="one-row steps take 3.0x the cost curve")
    text = stats.render(None, baseline=busy).plain
    assert "machine busy" in text and "×" not in text.split("machine busy")[1].split("\n")[0]
    assert "machine busy" in stats.speed_text(None, busy)
