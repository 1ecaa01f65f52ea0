"""Lossless sampling, proven by statistics: every speculator's 3-token continuations follow the exact distribution.

A tiny random Llama with 16 tokens (its output layer scaled up so the distributions are peaked like a trained
model's) makes the exact distribution of a 3-token continuation computable by enumerating all 16^3 continuations
with plain forwards. Each speculator then samples many continuations through the real decoder and its drafts,
and a chi-square test compares the counts with the exact probabilities. The prompt is the model's own greedy
text, which repeats itself, so context-matching speculators draft tokens the model often takes: the test checks
that drafts were offered, sometimes accepted and sometimes rejected, otherwise it would prove nothing.

Tree budgets (PTD's ``rows=auto``, GOOSE's ``budget=auto``, priced PLD) read a fixed verify cost curve here, a
GPU-like one where extra rows cost little, not this machine's measurement: on a busy machine the measured curve
can say that no draft pays, and a speculator that drafts nothing proves nothing.

Power check: the same test against verifiers with a known bias (PTD's public code emits the argmax of the residual
when every child is rejected; a common slip samples the rejected child's own distribution again) must fail.
"""

from __future__ import annotations

from collections import Counter
from itertools import product

import pytest
from support.tinymodel import tiny_llama
import torch

from drafting.engine.acceptance import make_acceptor
from drafting.engine.decode import Decoder
from drafting.engine.sampling import warp
from drafting.engine.sampling_params import SamplingParams
from drafting.speculators import create, registry
from support.flat_cost import priced_flat
from support.sampling_reference import chi_square, reference_warp

VOCAB = 16
LENGTH = 3  # tokens per sampled continuation
SAMPLES = 2000

SETTINGS = {
    "temperature": SamplingParams(temperature=0.8, seed=11),
    "top-k": SamplingParams(temperature=1.2, top_k=4, seed=12),
    "top-p": SamplingParams(temperature=1.0, top_p=0.7, seed=13),
}

# The seeds are fixed, but the draws are not the same on every machine: logits round differently from one CPU to
# another, so a correct verifier fails a test with chance ALPHA on each machine. Spread 1e-3 over all the tests
# of this file (Bonferroni); the biased verifiers of the power check still score p = 0 (chi-square over 1,600).
ALPHA = 1e-3 / (len(registry()) * len(SETTINGS) + 3)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """A model this small runs fastest on one thread (and leaves the other core to the rest of the machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def peaked_lm():
    lm = tiny_llama(VOCAB, 32, 256, bos=0, eos_ids=set(), name="tiny-peaked-llama-16")
    model = lm.model
    with torch.no_grad():
        model.lm_head.weight.mul_(16.0)  # random logits are nearly flat; a trained model's are peaked
    return priced_flat(lm)  # the same sizing on every machine, however busy (see the module's text)


@pytest.fixture(scope="module")
def prompt(peaked_lm) -> list[int]:
    """The model's own greedy continuation of a short start: it falls into a loop, so it repeats itself."""
    ids = [1, 2, 3]
    with torch.inference_mode():
        for _ in range(30):
            ids.append(int(peaked_lm.model(torch.tensor([ids])).logits[0, -1].argmax()))
    tail = tuple(ids[-3:])
    assert any(tuple(ids[i : i + 3]) == tail for i in range(len(ids) - 4)), "the prompt should repeat itself"
    return ids


@torch.inference_mode()
def exact_distribution(lm, prompt: list[int], params: SamplingParams) -> dict[tuple, float]:
    """P(a, b, c | prompt) for every continuation, from plain full-sequence forwards and the reference warp."""

    def next_probs(prefixes: list[list[int]]) -> list[list[float]]:
        logits = lm.model(torch.tensor([prompt + p for p in prefixes])).logits[:, -1]
        return [reference_warp(row, params.temperature, params.top_k, params.top_p) for row in logits.tolist()]

    probs: dict[tuple, float] = {(): 1.0}
    for _ in range(LENGTH):
        prefixes = [list(k) for k, v in probs.items() if v > 0]
        rows = next_probs(prefixes)
        probs = {
            tuple(pre) + (tok,): probs[tuple(pre)] * row[tok]
            for pre, row in zip(prefixes, rows)
            for tok in range(VOCAB)
            if row[tok] > 0
        }
    return probs


@pytest.fixture(scope="module")
def exact(peaked_lm, prompt):
    cache: dict[str, dict] = {}

    def get(setting: str) -> dict[tuple, float]:
        if setting not in cache:
            cache[setting] = exact_distribution(peaked_lm, prompt, SETTINGS[setting])
            assert abs(sum(cache[setting].values()) - 1.0) < 1e-9
        return cache[setting]

    return get


def sample_continuations(lm, spec: str, acceptor, prompt: list[int], n: int = SAMPLES):
    """``n`` continuations through the real decoder; also counts drafted, accepted and rejected draft tokens."""
    decoder = Decoder(lm, create(spec), acceptor=acceptor)
    counts: Counter = Counter()
    drafts = {"offered": 0, "accepted": 0, "rejected_at": 0}
    for _ in range(n):
        result = decoder.generate(prompt, LENGTH)
        assert len(result.output_ids) == LENGTH
        counts[tuple(result.output_ids)] += 1
        for rec in result.records:
            drafts["offered"] += len(rec.tokens) - 1
            drafts["accepted"] += len(rec.accepted) - 1
            drafts["rejected_at"] += rec.accepted[-1] in rec.parents  # the walk stopped at a node with children
    return counts, drafts


# `make test` proves every speculator under temperature alone; the heavy tier adds the top-k and top-p cuts
LIGHT_SETTING = "temperature"


@pytest.mark.parametrize("setting", [s if s == LIGHT_SETTING else pytest.param(s, marks=pytest.mark.heavy)
                                     for s in SETTINGS])
@pytest.mark.parametrize("spec", list(registry()))
def test_sampling_distribution_matches_exact(peaked_lm, prompt, exact, spec, setting):
    counts, drafts = sample_continuations(peaked_lm, spec, make_acceptor(SETTINGS[setting]), prompt)
    stat, df, p_value = chi_square(counts, exact(setting))
    assert p_value > ALPHA, f"{spec} under {setting}: chi-square {stat:.1f} on {df} df, p = {p_value:.2e}"
    if spec != "ar":
        assert drafts["offered"] > 0 and drafts["accepted"] > 0 and drafts["rejected_at"] > 0, (
            f"{spec} under {setting} did not exercise verification: {drafts}"
        )


class SequentialVerifier:
    """A second, literal implementation of the tree rule (one sibling at a time, in float64), whose fallback
    when every child is rejected can be swapped for a biased one."""

    def __init__(self, params: SamplingParams, fallback: str):
        self.params = params
        self.fallback = fallback
        self.gen = torch.Generator().manual_seed(params.seed)

    def draw(self, weights: torch.Tensor) -> int:
        return int(torch.multinomial(weights, 1, generator=self.gen))

    def __call__(self, tree, logits):
        node, path = 0, [0]
        while True:
            p = warp(logits[node], self.params).double()
            children = [i for i in range(1, len(tree)) if tree.parents[i] == node]
            if not children:
                return path, self.draw(p)
            r = p.clone()
            for child in children:
                x = tree.tokens[child]
                if float(torch.rand(1, generator=self.gen, dtype=torch.float64)) < float(r[x] / r.sum()):
                    node = child
                    path.append(child)
                    break
                r[x] = 0.0
            else:
                if self.fallback == "argmax":  # PTD's public code
                    return path, int(r.argmax())
                if self.fallback == "target":  # forgets that the rejected children are excluded
                    return path, self.draw(p)
                return path, self.draw(r)


@pytest.mark.parametrize("fallback,biased", [("residual", False), ("argmax", True), ("target", True)])
def test_sampling_distribution_power_check(peaked_lm, prompt, exact, fallback, biased):
    params = SETTINGS["temperature"]
    counts, drafts = sample_continuations(peaked_lm, "pld", SequentialVerifier(params, fallback), prompt)
    assert drafts["rejected_at"] > 0
    stat, df, p_value = chi_square(counts, exact("temperature"))
    if biased:
        assert p_value < ALPHA, f"the {fallback} fallback went undetected: chi-square {stat:.1f} on {df} df"
    else:
        assert p_value > ALPHA, f"the literal rule failed: chi-square {stat:.1f} on {df} df, p = {p_value:.2e}"
