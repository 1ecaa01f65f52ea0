"""How many draft tokens a batched engine step should verify, from what a proposer inside the engine observes.

A step that verifies T tokens (each request's own token plus its drafts) costs about t0 + t1*T: t0 is what
every step pays whatever it carries (reading the weights, launching, scheduling), t1 what one more token adds.
Their ratio, the **knee** t0 / t1, is the number of tokens a step verifies for the price of its fixed part. A
step that yields E tokens (accepted drafts + one per request) for T verified ones produces E / (t0 + t1*T)
tokens per second; one more draft token that is accepted with probability p raises that exactly when

    p > E / (knee + T)

So a step takes the candidate draft tokens most likely to be accepted first; with a cost that grows along a line
the best set is where the first token fails that test. With one request and a large knee (a GPU, or a CPU reading
big weights) nearly every plausible token pays; with many requests E approaches T and only tokens that are almost
surely accepted pay, down to none: then the step costs what a step without speculation costs.

The knee is measured, not assumed (``StepCost``): the time between two proposals is one engine step, whose
verified token count the proposer knows (what it drafted plus one per request), so a least-squares line through
(tokens, seconds) over recent steps gives t0 and t1. Until the line is trustworthy (enough steps, enough spread
in token counts) the prior knee is used.

An engine may also take a dearer path as soon as any request carries drafts (vLLM's CPU build does): the fit
then gives steps with drafts a fixed part of their own, t0 + jump. And a step's cost need not follow the line at
every size (a matrix kernel may be slow for one row count and fast for the next): the proposer also keeps the
mean time of each (batch size, verified tokens) it has run often enough, and reads it in place of the line. So
``keep_paying`` scores every prefix of the likeliest-first order, none at all included, by E over its cost, and
keeps the best.
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
JUMP_MIN_STEPS = 3.0  # steps (of weight) of each kind, with and without drafts, before a jump between them is fitted
SIZE_MIN_STEPS = 5.0  # steps (of weight) of one (batch, tokens) size before its own mean replaces the line there
SIZE_MAX_TOKENS = 64  # sizes above this many verified tokens are read off the line only


class _DecayedSums:
    """Sums of weight, tokens, seconds and their products over the steps of one kind, older steps fading."""

    def __init__(self):
        self.w = self.x = self.y = self.xx = self.xy = 0.0

    def fade(self, d: float) -> None:
        self.w, self.x, self.y, self.xx, self.xy = (d * v for v in (self.w, self.x, self.y, self.xx, self.xy))

    def add(self, x: float, y: float) -> None:
        self.w += 1.0
        self.x += x
        self.y += y
        self.xx += x * x
        self.xy += x * y

    def merged(self, other: "_DecayedSums") -> "_DecayedSums":
        out = _DecayedSums()
        out.w, out.x, out.y, out.xx, out.xy = (a + b for a, b in zip(
            (self.w, self.x, self.y, self.xx, self.xy), (other.w, other.x, other.y, other.xx, other.xy)))
        return out

    def centred(self) -> tuple[float, float]:
        """(sum of squared token deviations, sum of token x seconds deviations) about this kind's own means."""
        if self.w <= 0:
            return 0.0, 0.0
        return self.xx - self.x * self.x / self.w, self.xy - self.x * self.y / self.w


class StepCost:
    """Online least-squares fit of step seconds = t0 + jump * [the step verified drafts] + t1 * verified tokens,
    with exponential forgetting: one slope, and a fixed part of its own for steps with and without drafts
    (an engine may take another, dearer path once any request carries drafts)."""

    def __init__(self, prior: float = KNEE_PRIOR, fixed: float | None = None, jump: bool = True):
        self.prior = prior
        self.fixed = fixed  # a knee given by the user: no fitting
        self.jump = jump  # False: one line through every step, with and without drafts
        self._plain = _DecayedSums()  # steps that verified no drafts
        self._drafted = _DecayedSums()  # steps that verified some
        self._fit: tuple[float, float, float] | None = None  # refitted once per step added, read many times
        # (requests, tokens) -> [weight, seconds sum, steps added when last faded]: each size's own mean
        self._sizes: dict[tuple[int, int], list[float]] = {}
        self._steps = 0

    def add(self, tokens: int, seconds: float, drafted: bool = True, requests: int | None = None) -> None:
        """One engine step of ``requests`` requests (None: not told) that verified ``tokens`` tokens in ``seconds``
        (``drafted``: some of them drafts)."""
        if self.fixed is not None or tokens <= 0 or not seconds > 0 or not math.isfinite(seconds):
            return
        drafted = drafted or not self.jump
        kind = self._drafted if drafted else self._plain
        # a pause is a step far above a fit that predicts a positive time at all, for steps of its kind: the
        # first steps with drafts may well be far above a fit of steps without
        if kind.w >= JUMP_MIN_STEPS and self._fit is not None:
            if 0 < self.seconds(tokens, drafted) < seconds / OUTLIER:
                return
        self._plain.fade(FIT_DECAY)
        self._drafted.fade(FIT_DECAY)
        kind.add(tokens, seconds)
        self._fit = self._refit()
        self._steps += 1
        if requests is not None and tokens <= SIZE_MAX_TOKENS:
            size = self._size((requests, tokens))
            size[0] += 1.0
            size[1] += seconds

    def fit(self) -> tuple[float, float, float] | None:
        """(t0, jump, t1), or None while the steps seen cannot tell a slope (too few, or their token counts too
        alike) nor a jump. The jump is 0 until both kinds of step have been seen enough to tell it; where both
        have, but the token counts within each are too alike to tell a slope, the slope is taken as 0."""
        return self._fit

    def seconds(self, tokens: float, drafted: bool) -> float:
        """What the fit says a step of ``tokens`` verified tokens costs (call only where ``fit()`` is not None)."""
        t0, jump, t1 = self._fit
        return t0 + (jump if drafted else 0.0) + t1 * tokens

    def _size(self, key: tuple[int, int]) -> list[float]:
        """One size's [weight, seconds sum, step], faded to now (its steps fade as the fit's do)."""
        size = self._sizes.setdefault(key, [0.0, 0.0, self._steps])
        if size[2] != self._steps:
            fade = FIT_DECAY ** (self._steps - size[2])
            size[0], size[1], size[2] = size[0] * fade, size[1] * fade, self._steps
        return size

    def cost(self, requests: int, tokens: int) -> float:
        """What a step of ``requests`` requests verifying ``tokens`` tokens (drafts where tokens > requests) costs,
        in units only comparable with each other: that size's own mean where it has run often enough, else the
        fitted line, else knee + tokens (units of t1) from the prior or the given knee."""
        drafted = tokens > requests
        if self.fixed is not None or self._fit is None:
            return self.knee + tokens
        if tokens <= SIZE_MAX_TOKENS and (requests, tokens) in self._sizes:
            weight, total, _ = self._size((requests, tokens))
            if weight >= SIZE_MIN_STEPS:
                return total / weight
        return max(self.seconds(tokens, drafted), 1e-9)  # a fit with a negative fixed part: small steps are cheapest

    def _refit(self) -> tuple[float, float, float] | None:
        both = self._plain.merged(self._drafted)
        if both.w < FIT_MIN_STEPS:
            return None
        kinds = [k for k in (self._plain, self._drafted) if k.w >= JUMP_MIN_STEPS]
        if len(kinds) < 2:
            kinds = [both]  # one kind (or too little of the other): a single line
        sxx, sxy = (sum(part) for part in zip(*(k.centred() for k in kinds)))
        if sxx / both.w >= FIT_MIN_SPREAD ** 2:
            t1 = sxy / sxx
        elif len(kinds) == 2:
            t1 = 0.0  # each kind alike in tokens: what tells them apart is the jump (a slope shows once drafts vary)
        else:
            return None
        if t1 * both.x <= FLAT * both.y:
            t1 = 0.0  # the slope adds (next to) nothing to the mean step: more tokens cost nothing measurable
        if len(kinds) == 1:
            return (both.y - t1 * both.x) / both.w, 0.0, t1
        t0 = (self._plain.y - t1 * self._plain.x) / self._plain.w
        return t0, (self._drafted.y - t1 * self._drafted.x) / self._drafted.w - t0, t1

    @property
    def knee(self) -> float:
        """Tokens a step with drafts verifies for the price of its fixed part: (t0 + jump) / t1 (clamped, so a
        line with no fixed part gives the smallest), else the prior. Steps whose cost does not grow with their
        tokens give the largest: every draft pays."""
        if self.fixed is not None:
            return self.fixed
        if self._fit is None:
            return self.prior
        t0, jump, t1 = self._fit
        knee = KNEE_RANGE[1] if t1 <= 0 else (t0 + jump) / t1
        return min(max(knee, KNEE_RANGE[0]), KNEE_RANGE[1])


def threshold(yielded: float, verified: float, knee: float) -> float:
    """The acceptance chance one more draft token must beat in a step that so far yields ``yielded`` tokens for
    ``verified`` verified ones, where cost grows along a line: E / (knee + T)."""
    return yielded / (knee + verified)


def keep_paying(chances: list[list[float]], cost: StepCost) -> list[int]:
    """Draft tokens to keep per request: ``chances[r][j]`` is the probability that request r's draft token j
    is accepted (with all before it; non-increasing in j). Candidates are taken most likely first (a chain's
    tokens in order); of every prefix of that order, none included, the one that yields the most tokens per
    cost (``StepCost.cost``) is kept."""
    b = len(chances)
    order = sorted(((p, j, r) for r, ps in enumerate(chances) for j, p in enumerate(ps)), key=lambda c: (-c[0], c[1]))
    e, best, best_m = float(b), b / cost.cost(b, b), 0
    for m, (p, _, _) in enumerate(order, 1):
        if p <= 0:
            break
        e += p
        rate = e / cost.cost(b, b + m)
        if rate > best:
            best, best_m = rate, m
    keep = [0] * b
    for _, _, r in order[:best_m]:
        keep[r] += 1
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


KIND_DECAY = 0.995  # the counts of one kind of draft fade by this per verified draft of that kind
KIND_PRIOR_WEIGHT = 4.0  # tokens' worth of evidence the depth before (or the source's alpha) counts for
MAX_DEPTH = 64


class DepthAcceptance:
    """Over every request, per kind of draft (its source and what the source matched, e.g. the context n-gram's
    length and whether its occurrences agreed) and per depth in the chain, how often a draft token was accepted
    given that the tokens before it were. Depth j's share is shrunk towards depth j - 1's (depth 0 towards a
    given base), so a depth seldom verified reads like its neighbour instead of an arbitrary prior."""

    def __init__(self, decay: float = KIND_DECAY):
        self.decay = decay
        self._counts: dict[tuple, list[list[float]]] = {}  # kind -> per depth [accepted, tried]

    def observe(self, kind: tuple, got: int, drafted: int) -> None:
        """A draft of this kind of ``drafted`` tokens, of which the first ``got`` were accepted."""
        if drafted <= 0:
            return
        depths = self._counts.setdefault(kind, [])
        for d in depths:
            d[0] *= self.decay
            d[1] *= self.decay
        tried = min(drafted, got + 1, MAX_DEPTH)
        while len(depths) < tried:
            depths.append([0.0, 0.0])
        for j in range(tried):
            depths[j][1] += 1.0
            depths[j][0] += 1.0 if j < got else 0.0

    def chances(self, kind: tuple, n: int, base: float) -> list[float]:
        """The chance that each of a draft's first ``n`` tokens is accepted together with those before it."""
        depths = self._counts.get(kind, [])
        out, q, chance = [], base, 1.0
        for j in range(n):
            if j < len(depths):
                acc, tried = depths[j]
                q = (acc + KIND_PRIOR_WEIGHT * q) / (tried + KIND_PRIOR_WEIGHT)
            chance *= q
            out.append(chance)
        return out
