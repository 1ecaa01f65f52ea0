"""How many draft tokens a batched engine step should verify, from what a proposer inside the engine observes.

A step that verifies T tokens (each request's own token plus its drafts) costs about t0 + t1*T: t0 is what
every step pays whatever it carries (reading the weights, launching, scheduling), t1 what one more token adds.
Their ratio, the **knee** t0 / t1, is the number of tokens a step verifies for the price of its fixed part. A
step that yields E tokens (accepted drafts + one per request) for T verified ones produces E / (t0 + t1*T)
tokens per second; one more draft token that is accepted with probability p raises that exactly when

    p > E / (knee + T)

So a step takes the candidate draft tokens most likely to be accepted first, and stops at the first one that
fails the test (``allot``). With one request and a large knee (a GPU, or a CPU reading big weights) nearly every
plausible token pays; with many requests E approaches T and only tokens that are almost surely accepted pay,
down to none: then the step costs what a step without speculation costs.

The knee is measured, not assumed (``StepCost``): the time between two proposals is one engine step, whose
verified token count the proposer knows (what it drafted plus one per request), so a least-squares line through
(tokens, seconds) over recent steps gives t0 and t1. Until the line is trustworthy (enough steps, enough spread
in token counts) the prior knee is used.
"""

from __future__ import annotations

import math

KNEE_PRIOR = 32.0  # tokens; used until the step timings say otherwise (GOOSE_VLLM_SETTINGS knee_prior=)
KNEE_RANGE = (1.0, 4096.0)  # a measured knee outside this is clamped (a CPU step is never free, a GPU's never flat)
FIT_DECAY = 0.98  # each step's weight in the fit fades by this per later step (about the last 50 steps count)
FIT_MIN_STEPS = 20  # steps (of weight) before the fitted line is used
FIT_MIN_SPREAD = 1.0  # tokens: standard deviation of the verified token counts the fit needs to see a slope
FLAT = 1e-3  # a slope that adds less than this share to the mean step is read as no slope at all
OUTLIER = 4.0  # a step slower than this many times the fitted line (a pause between requests) is not fitted


class StepCost:
    """Online least-squares fit of step seconds = t0 + t1 * verified tokens, with exponential forgetting."""

    def __init__(self, prior: float = KNEE_PRIOR, fixed: float | None = None):
        self.prior = prior
        self.fixed = fixed  # a knee given by the user: no fitting
        self._w = self._x = self._y = self._xx = self._xy = 0.0

    def add(self, tokens: int, seconds: float) -> None:
        """One engine step that verified ``tokens`` tokens in ``seconds``."""
        if self.fixed is not None or tokens <= 0 or not seconds > 0 or not math.isfinite(seconds):
            return
        line = self.line()  # a pause is a step far above a line that predicts a positive time at all
        if line is not None and 0 < line[0] + line[1] * tokens < seconds / OUTLIER:
            return
        d = FIT_DECAY
        self._w = d * self._w + 1.0
        self._x = d * self._x + tokens
        self._y = d * self._y + seconds
        self._xx = d * self._xx + tokens * tokens
        self._xy = d * self._xy + tokens * seconds

    def line(self) -> tuple[float, float] | None:
        """(t0, t1) of the fitted line, or None while the steps seen cannot tell a slope (too few, or their
        token counts too alike)."""
        if self._w < FIT_MIN_STEPS:
            return None
        mx, my = self._x / self._w, self._y / self._w
        var = self._xx / self._w - mx * mx
        if var < FIT_MIN_SPREAD ** 2:
            return None
        t1 = (self._xy / self._w - mx * my) / var
        return my - t1 * mx, t1

    @property
    def knee(self) -> float:
        """Tokens a step verifies for the price of its fixed part: the fitted t0 / t1 (clamped, so a line with no
        fixed part gives the smallest), else the prior. Steps whose cost does not grow with their tokens give
        the largest: every draft pays."""
        if self.fixed is not None:
            return self.fixed
        line = self.line()
        if line is None:
            knee = self.prior
        elif line[1] * self._x <= FLAT * self._y:  # the slope adds (next to) nothing to the mean step
            knee = KNEE_RANGE[1]
        else:
            knee = line[0] / line[1]
        return min(max(knee, KNEE_RANGE[0]), KNEE_RANGE[1])


def threshold(yielded: float, verified: float, knee: float) -> float:
    """The acceptance chance one more draft token must beat in a step that so far yields ``yielded`` tokens for
    ``verified`` verified ones: E / (knee + T)."""
    return yielded / (knee + verified)


def allot(chances: list[list[float]], knee: float) -> list[int]:
    """Draft tokens to keep per request: ``chances[r][j]`` is the probability that request r's draft token j
    is accepted (with all before it; non-increasing in j). Takes tokens most likely first while each one's
    chance exceeds E / (knee + T), E the tokens the step yields so far and T those it verifies."""
    keep = [0] * len(chances)
    e = t = float(len(chances))  # every request yields and verifies its own token
    order = sorted(((p, j, r) for r, ps in enumerate(chances) for j, p in enumerate(ps)),
                   key=lambda c: (-c[0], c[1]))
    for p, j, r in order:
        if p <= threshold(e, t, knee):
            break
        if j != keep[r]:
            continue  # a chain is verified in order: a token after one left out is no draft
        keep[r] += 1
        e += p
        t += 1
    return keep


def token_chances(alpha: float, n: int) -> list[float]:
    """Acceptance chance of each of ``n`` chained draft tokens when each is accepted with probability ``alpha``
    given the ones before it: alpha, alpha**2, ..."""
    return [alpha ** (j + 1) for j in range(n)]


ALPHA_PRIOR = 0.5  # per-token acceptance assumed for a source nothing has been learned about
PRIOR_WEIGHT = 2.0  # drafts' worth of evidence the prior (or the process-wide estimate) counts for
REQUEST_DECAY = 0.9  # a request's own evidence fades by this per verified draft of that source
IDLE_DECAY = 0.95  # and by this per step without one, so a source held back is tried again later


class ChainAcceptance:
    """Per-token acceptance probability of a chain source, from verified drafts: with each token accepted with
    probability alpha given those before it, a draft of n tokens of which ``got`` were accepted says got
    acceptances and (got < n) one rejection; alpha = acceptances / (acceptances + rejections), the counts decayed
    so that recent drafts count most, over a prior (``base``: usually the process-wide estimate)."""

    def __init__(self, decay: float = REQUEST_DECAY):
        self.decay = decay
        self.accepted = 0.0
        self.rejected = 0.0

    def observe(self, got: int, drafted: int) -> None:
        if drafted <= 0:
            return
        self.accepted = self.decay * self.accepted + got
        self.rejected = self.decay * self.rejected + (1.0 if got < drafted else 0.0)

    def idle(self) -> None:
        self.accepted *= IDLE_DECAY
        self.rejected *= IDLE_DECAY

    def alpha(self, base: float = ALPHA_PRIOR) -> float:
        a = self.accepted + PRIOR_WEIGHT * base
        return a / (a + self.rejected + PRIOR_WEIGHT * (1.0 - base))
