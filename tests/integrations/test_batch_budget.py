"""The step budget of GooseProposer (drafting/integrations/batch_budget.py): which draft tokens a batched step keeps,
the measured knee, per-token acceptance; and the proposer drafting less as its batch grows. No vLLM needed."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from drafting.integrations.batch_budget import (KNEE_PRIOR, KNEE_RANGE, ChainAcceptance, StepCost, keep_paying,
                                                token_chances)
from drafting.integrations.goose_chain import SPINE
from drafting.integrations.token_adjacency import TokenAdjacency
from drafting.integrations.vllm import GooseProposer, SettingsError, parse_settings


def tokens_per_cost(chances: list[list[float]], keep: list[int], knee: float) -> float:
    """Expected tokens a step yields per unit of its cost (knee + verified tokens, in units of t1)."""
    e = len(chances) + sum(sum(ps[:n]) for ps, n in zip(chances, keep))
    return e / (knee + len(chances) + sum(keep))


def allot(chances: list[list[float]], knee: float) -> list[int]:
    """The step budget where every step costs knee + verified tokens (in units of t1)."""
    return keep_paying(chances, StepCost(fixed=knee))


def test_the_budget_keeps_the_prefixes_that_maximise_tokens_per_cost():
    rng = random.Random(5)
    for _ in range(200):
        knee = rng.choice([0.5, 2.0, 8.0, 32.0, 300.0])
        chances = []
        for _ in range(rng.randrange(1, 4)):
            alpha = rng.random()
            chances.append(token_chances(alpha, rng.randrange(0, 5)))
        keep = allot(chances, knee)
        assert all(0 <= n <= len(ps) for n, ps in zip(keep, chances))
        best = max(tokens_per_cost(chances, list(c), knee)
                   for c in itertools.product(*(range(len(ps) + 1) for ps in chances)))
        assert tokens_per_cost(chances, keep, knee) == pytest.approx(best)


def test_a_larger_batch_keeps_fewer_tokens_per_request_down_to_none():
    alpha = 0.6
    per_request = []
    for batch in (1, 4, 16, 64):
        keep = allot([token_chances(alpha, 8)] * batch, knee=16.0)
        per_request.append(sum(keep) / batch)
    assert per_request == sorted(per_request, reverse=True)
    assert per_request[0] >= 3 and per_request[-1] == 0
    # a sure draft still pays in a large batch, a coin flip does not
    assert allot([[0.99, 0.98]] * 64, knee=16.0) == [2] * 64
    assert allot([[0.5]] * 64, knee=16.0) == [0] * 64
    # where verifying is nearly free (a large knee) a single request drafts all it has
    assert allot([token_chances(0.5, 8)], knee=4000.0) == [8]


def test_step_cost_measures_the_knee_from_step_times():
    rng = random.Random(1)
    cost = StepCost()
    assert cost.knee == KNEE_PRIOR
    t0, t1 = 0.050, 0.002  # knee 25
    for i in range(200):
        tokens = rng.randrange(1, 40)
        cost.add(tokens, t0 + t1 * tokens + rng.gauss(0, 0.001))
    assert cost.knee == pytest.approx(25, rel=0.15)
    # a pause between requests (a step 10x the line) does not move it
    knee = cost.knee
    cost.add(5, 10 * (t0 + t1 * 5))
    assert cost.knee == knee
    # the fit follows a machine that changes (weights now cost twice as much to read)
    for i in range(400):
        tokens = rng.randrange(1, 40)
        cost.add(tokens, 2 * t0 + t1 * tokens)
    assert cost.knee == pytest.approx(50, rel=0.1)


def test_step_cost_keeps_the_prior_until_the_steps_can_tell_a_slope_then_reads_flat_and_fixed_free_steps():
    cost = StepCost(prior=20.0)
    for _ in range(100):
        cost.add(16, 0.1)  # always the same token count: no slope to read
    assert cost.knee == 20.0
    flat = StepCost(prior=20.0)
    for tokens in range(1, 100):
        flat.add(tokens, 0.1)  # more tokens cost nothing: every draft pays
    assert flat.knee == KNEE_RANGE[1]
    per_token = StepCost(prior=20.0)
    for tokens in range(1, 100):
        per_token.add(tokens, 0.01 * tokens)  # no fixed part: a draft token pays only where it is sure
    assert per_token.knee == KNEE_RANGE[0]
    assert StepCost(fixed=7.0).knee == 7.0
    huge = StepCost()
    for tokens in range(1, 200):
        huge.add(tokens, 1.0 + 1e-4 * tokens)
    assert huge.knee == KNEE_RANGE[1]


def test_chain_acceptance_reads_acceptances_and_rejections():
    a = ChainAcceptance()
    assert a.alpha() == 0.5 and a.alpha(0.8) == pytest.approx(0.8)
    for _ in range(10):
        a.observe(8, 8)  # every token accepted
    assert a.alpha() > 0.95
    b = ChainAcceptance()
    for _ in range(10):
        b.observe(0, 4)  # the first token rejected every time
    assert b.alpha() < 0.15
    low = b.alpha()
    for _ in range(100):
        b.idle()  # held back: the evidence fades and the source is tried again
    assert low < b.alpha() == pytest.approx(0.5, abs=0.05)
    c = ChainAcceptance()
    c.observe(3, 6)  # 3 accepted, then one rejected: alpha = (3 + 1) / (3 + 1 + 1 + 1)
    assert c.alpha() == pytest.approx(4 / 6)


def test_budget_settings():
    s = parse_settings("")
    assert (s["budget"], s["knee"], s["knee_prior"]) == ("cost", "auto", KNEE_PRIOR)
    assert parse_settings("knee=12+budget=off")["knee"] == 12.0
    assert parse_settings("")["jump"] == "auto" and parse_settings("jump=off")["jump"] == "off"
    for bad in ("budget=maybe", "knee=-1", "knee=fast", "knee_prior=0", "jump=maybe"):
        with pytest.raises(SettingsError):
            parse_settings(bad)


class Clock:
    """A step clock: each engine step takes t0 + t1 * the tokens the proposer's drafts made it verify."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def misleading(seed: int, prompt_len: int = 120, length: int = 420) -> list[int]:
    """A prompt of repeated phrases, then a continuation where each phrase starts as before and goes on
    differently: the context matcher drafts the old phrase and its first token is rejected."""
    rng = random.Random(seed)
    phrases = [[rng.randrange(3, 400) for _ in range(rng.randrange(5, 10))] for _ in range(6)]
    out: list[int] = []
    while len(out) < prompt_len:
        out += rng.choice(phrases)
    out = out[:prompt_len]
    while len(out) < length:
        phrase = rng.choice(phrases)
        out += phrase[:2] + [rng.randrange(500, 50000) for _ in phrase[2:]]
    return out[:length]


def sloped_step(drafts: list[list[int]]) -> float:
    """0.05 s plus 0.005 s per verified token (knee 10)."""
    return 0.05 + 0.005 * sum(1 + len(d) for d in drafts)


def jumping_step(drafts: list[list[int]]) -> float:
    """0.118 s without drafts, 0.183 s with any, plus 0.2 ms per verified token (vLLM's CPU build, measured)."""
    return 0.118 + (0.065 if any(drafts) else 0.0) + 0.0002 * sum(1 + len(d) for d in drafts)


def run_batch(settings: str, requests: int, steps: int = 60, step_seconds=sloped_step,
              text=misleading) -> list[int]:
    """Drive a proposer over ``requests`` streams (by default ones whose drafts are mostly wrong), each engine
    step lasting ``step_seconds`` of the drafts it verifies; the draft tokens it proposed per step."""
    from tests.integrations.test_vllm_proposer import FakeBatch

    clock = Clock()
    p = GooseProposer(num_speculative_tokens=8, max_model_len=512, table=TokenAdjacency(), settings=settings,
                      clock=clock)
    batch = FakeBatch(max_reqs=requests, max_len=512)
    for r in range(requests):
        batch.add(text(r), prompt_len=120)
    drafted = []
    for _ in range(steps):
        sampled = batch.step()
        clock.now += step_seconds(batch.drafts)
        drafts = batch.run(p, sampled)
        drafted.append(sum(map(len, drafts)))
    for row in range(requests):  # whatever was drafted, every request followed its own stream
        n = int(batch.num_tokens_no_spec[row])
        assert list(batch.token_ids_cpu[row, :n]) == batch.targets[row][:n]
    return drafted


def test_proposer_drafts_less_per_request_as_the_batch_grows_and_stops_when_drafts_fail():
    one = sum(run_batch("", requests=1))
    many = sum(run_batch("", requests=16))
    off = sum(run_batch("budget=off", requests=16))
    assert one > 0
    assert many / 16 < one  # per request, the large batch drafts less
    assert many < off / 4  # and far less than GOOSE's own lengths, which ignore the batch
    p = GooseProposer(num_speculative_tokens=8, max_model_len=512, table=TokenAdjacency(), settings="")
    assert p.cost.knee == KNEE_PRIOR


def test_proposer_measures_its_steps_and_keeps_sure_drafts_in_a_large_batch():
    from tests.integrations.test_vllm_proposer import FakeBatch

    clock = Clock()
    p = GooseProposer(num_speculative_tokens=8, max_model_len=512, table=TokenAdjacency(), settings="", clock=clock)
    batch = FakeBatch(max_reqs=16, max_len=512)
    cycle = list(range(10, 30))
    for r in range(16):
        batch.add(cycle * 20, prompt_len=45)  # a text that repeats itself exactly: every draft is accepted
    drafted = []
    for _ in range(40):
        sampled = batch.step()
        clock.now += 0.05 + 0.005 * sum(1 + len(d) for d in batch.drafts)
        drafted.append(sum(map(len, batch.run(p, sampled))))
    assert p.cost.knee == pytest.approx(10, rel=0.05)  # measured from the steps, not the prior
    assert min(drafted[-10:]) >= 16 * 4  # sure drafts pay even with 16 requests
    st = p._rows[0]
    assert st.acceptance[SPINE].alpha() > 0.9
    # every request still follows its target exactly (the batch verifier checks accepted drafts)
    for row in range(16):
        n = int(batch.num_tokens_no_spec[row])
        assert list(batch.token_ids_cpu[row, :n]) == batch.targets[row][:n]


def test_step_cost_measures_a_jump_between_steps_with_and_without_drafts():
    rng = random.Random(2)
    cost = StepCost()
    for _ in range(300):
        drafted = rng.random() < 0.7
        tokens = rng.randrange(2, 10) if drafted else 1
        cost.add(tokens, jumping_step([[0] * (tokens - 1)]) + rng.gauss(0, 0.002), drafted)
    t0, jump, t1 = cost.fit()
    assert t0 == pytest.approx(0.118, abs=0.005) and jump == pytest.approx(0.065, abs=0.005)
    assert cost.knee > 200  # once a step drafts, more draft tokens are nearly free
    # one request: a drafting step (9 tokens) costs 1.56 plain steps, so it must yield more than that
    assert keep_paying([token_chances(0.05, 8)], cost) == [0]  # 1.05 tokens for 1.56 steps
    assert keep_paying([token_chances(0.5, 8)], cost) == [8]  # 2.0 tokens: every token, the jump is paid once
    line = StepCost()
    for tokens in range(1, 100):
        line.add(tokens, 0.05 + 0.001 * tokens)  # only steps with drafts: no jump can be told, none assumed
    assert line.fit()[1] == 0.0 and keep_paying([[0.02]], line) == [1]
    off = StepCost(jump=False)
    for _ in range(100):
        drafted = rng.random() < 0.7
        off.add(9 if drafted else 1, jumping_step([[0] * 8] if drafted else [[]]), drafted)
    assert off.fit()[1] == 0.0 and off.knee < 200  # jump=off: the jump is read as a slope, as before


def repeating(seed: int) -> list[int]:
    return list(range(10 + seed, 30 + seed)) * 20  # every draft of the context spine is accepted


def test_proposer_speculates_only_where_drafts_pay_for_the_jump():
    # drafts that win about one token each pay for vLLM's measured jump, but not for one five times as high
    def steep(drafts: list[list[int]]) -> float:
        return jumping_step(drafts) + (0.26 if any(drafts) else 0.0)

    paying = run_batch("", requests=1, steps=120, step_seconds=jumping_step)
    steep_budget = run_batch("", requests=1, steps=120, step_seconds=steep)
    steep_off = run_batch("budget=off", requests=1, steps=120, step_seconds=steep)
    steps = {name: sum(map(bool, drafted[-60:])) for name, drafted in
             (("paying", paying), ("steep", steep_budget), ("off", steep_off))}
    assert steps["off"] > 5 and steps["paying"] > steps["off"] / 2 > steps["steep"], steps
    # drafts that are all accepted keep their whole chain
    sure = run_batch("", requests=1, steps=30, step_seconds=jumping_step, text=repeating)  # the text's end: 31
    assert min(sure[-20:]) == 8


def test_a_step_size_dearer_than_its_neighbours_is_measured_and_avoided():
    # one request; verifying 2 tokens (one draft) is slower than 3 (a matrix kernel slow for two rows), the rest
    # follow a line
    def seconds(tokens: int) -> float:
        return 0.062 if tokens == 2 else 0.049 + 0.001 * (tokens - 1)

    cost, line = StepCost(), StepCost()
    rng = random.Random(3)
    for _ in range(300):
        tokens = rng.randrange(1, 10)
        cost.add(tokens, seconds(tokens), tokens > 1, requests=1)
        line.add(tokens, seconds(tokens) if tokens != 2 else 0.050, tokens > 1, requests=1)
    assert cost.cost(1, 2) == pytest.approx(0.062) and cost.cost(1, 2) > cost.cost(1, 3)
    # one likely token: drafted where the line holds, not where one draft makes the step dearer than two
    assert keep_paying([[0.2]], line) == [1]
    assert keep_paying([[0.2]], cost) == [0]
    # two: both, rather than the first alone
    assert keep_paying([[0.6, 0.1]], cost) == [2]
    # a size not run for a while is read off the line again, so it is measured again
    for _ in range(300):
        tokens = rng.randrange(3, 10)
        cost.add(tokens, seconds(tokens), True, requests=1)
    assert cost.cost(1, 2) == pytest.approx(0.050, abs=0.001)
