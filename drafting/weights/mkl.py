"""``mkl``: float32 Linear layers whose tree steps run MKL's packed product (weight packed once), one-row steps torch's.

torch's default float32 Linear calls MKL's sgemm, which packs the weight into its blocked layout on every call:
for the few rows of a tree step that repacking is a large share of the cost. MKL can pack a weight once
(``cblas_sgemm_pack``, torch's ``mkl::_mkl_reorder_linear_weight``) and multiply any number of rows against the
packed copy (``cblas_sgemm_compute``, ``mkl::_mkl_linear``). One-row steps keep torch's own kernel (the numbers
of plain decoding in ``float``, bit for bit), as do prefill blocks; tree steps of 2 to ``PACKED_MAX_ROWS`` rows
take the packed product, which computes each row to float rounding like every other float32 kernel here.
torch's own call stays faster for a few rows more on some machines (MKL's path for tiny products, measured on an
AMX Xeon: 2 or 3 rows for most weight shapes, up to 8 for some, docs/measurements.md), so ``split_rows`` times
both on the model's own layers at load, shape by shape, and hands torch's call every row count up to the last
one where it wins.

MKL documents the packed layout as made for one row count; torch's wrapper asks for the row count at call time,
so ``works_here`` checks on this machine, at load, that a copy packed once gives the right numbers for every row
count it serves before the format is offered. Figures: docs/measurements.md.
"""

from __future__ import annotations

import functools
import statistics
import time

import torch

from drafting.disk_cache import DiskCache
from drafting.machine.identity import machine_identity
from drafting.machine.load import LoadMeter
from drafting.weights.base import LinearStandIn
from drafting.weights.float import FLOAT
from drafting.weights.weight_format import WeightFormat

PACKED_ROWS = 16  # the row count handed to the packing call; the check covers the others
# Above this many rows (prefill, very wide trees) torch's own call is as fast or faster: its repacking is then a
# small share of the product. Both give the same numbers there (MKL's sgemm either way).
PACKED_MAX_ROWS = 32
SPLIT_TRIED = (2, 3, 4, 5, 6, 8)  # few-row counts where torch's own call may beat the packed product
SPLIT_PARAMS = 300_000_000  # weights timed by split_rows (all shapes together); a larger model is sampled


class MKLPackedLinear(LinearStandIn):
    """Drop-in for ``nn.Linear`` in float32 inference: the plain weight for one row, an MKL-packed copy for more."""

    def __init__(self, linear: torch.nn.Linear):
        super().__init__(linear)
        weight = linear.weight.detach()
        if weight.dtype != torch.float32 or weight.device.type != "cpu":
            raise ValueError("MKL's packed matrix product takes float32 weights on the CPU.")
        self.register_buffer("weight", weight, persistent=False)
        self.register_buffer("packed", torch.ops.mkl._mkl_reorder_linear_weight(weight, PACKED_ROWS),
                             persistent=False)
        self.torch_rows = 1  # row counts up to this take torch's own call (set by split_rows)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.numel() // self.in_features
        if n <= self.torch_rows or n > PACKED_MAX_ROWS:  # plain decoding steps and prefill blocks: torch's own call
            return torch.nn.functional.linear(x, self.weight, self.bias)
        y = torch.ops.mkl._mkl_linear(x.reshape(n, self.in_features), self.packed, self.weight, self.bias, n)
        return y.reshape(*x.shape[:-1], self.out_features)


def split_rows(net: torch.nn.Module, rounds: int = 5) -> dict[tuple[int, int], int]:
    """For each weight shape among ``net``'s MKL layers, time torch's own call against the packed product at each
    of ``SPLIT_TRIED`` row counts (interleaved, median of ``rounds``), give torch's call every count up to the
    last one where it is faster, and return {(out, in): that count} (1: the packed product from two rows up).
    Shapes differ (docs/measurements.md). The layers are timed as a forward meets them, every one of a shape in
    turn, so their weights stream from memory; ``cached_split`` keeps the answer per machine."""
    groups = _by_shape(net)
    gen = torch.Generator().manual_seed(0)
    splits = {}
    with torch.inference_mode():
        for shape, layers in groups.items():
            share = SPLIT_PARAMS // len(groups)  # each shape's timed layers: a bounded, representative sample
            timed = layers[:: max(1, round(len(layers) * shape[0] * shape[1] / share))]  # all, up to the cap
            splits[shape] = _split_of(timed, rounds, gen)
    _apply(groups, splits)
    return splits


def _by_shape(net: torch.nn.Module) -> dict[tuple[int, int], list[MKLPackedLinear]]:
    """``net``'s MKL layers grouped by weight shape (out, in)."""
    groups: dict[tuple[int, int], list[MKLPackedLinear]] = {}
    for m in net.modules():
        if isinstance(m, MKLPackedLinear):
            groups.setdefault((m.out_features, m.in_features), []).append(m)
    return groups


def _apply(groups: dict[tuple[int, int], list[MKLPackedLinear]], splits: dict[tuple[int, int], int]) -> None:
    for shape, layers in groups.items():
        for m in layers:
            m.torch_rows = splits[shape]


def _split_of(layers: list[MKLPackedLinear], rounds: int, gen: torch.Generator) -> int:
    """The last of ``SPLIT_TRIED`` up to which torch's call beats the packed product on ``layers`` (1: none)."""
    split = 1
    for n in SPLIT_TRIED:
        xs = [torch.randn(n, m.in_features, generator=gen) for m in layers]
        own, packed = [], []
        for r in range(rounds + 1):  # the first round warms this shape up
            t0 = time.perf_counter()
            for m, x in zip(layers, xs):
                torch.nn.functional.linear(x, m.weight, m.bias)
            t1 = time.perf_counter()
            for m, x in zip(layers, xs):
                torch.ops.mkl._mkl_linear(x, m.packed, m.weight, m.bias, n)
            t2 = time.perf_counter()
            if r:
                own.append(t1 - t0)
                packed.append(t2 - t1)
        if statistics.median(own) >= statistics.median(packed):
            break
        split = n
    return split


def _parse_split(doc: dict, key: dict) -> dict[tuple[int, int], int] | None:
    """A stored split ({"576x1536": 8, ...}) as {(out, in): rows}, if it covers exactly the key's shapes."""
    found = {tuple(map(int, k.split("x"))): int(n) for k, n in doc.items()}
    return found if set(found) == set(map(tuple, key["shapes"])) else None


# a split measured while other processes held the cores is used but not kept
SPLIT_CACHE = DiskCache("mkl-split", parse=_parse_split)


def cached_split(net: torch.nn.Module) -> dict[tuple[int, int], int]:
    """``split_rows`` measured once per machine and set of weight shapes (cached under the goose cache folder;
    a measurement taken while other processes held the cores is used but not kept)."""
    groups = _by_shape(net)
    key = {"machine": machine_identity(), "shapes": sorted(groups), "tried": SPLIT_TRIED}
    found = SPLIT_CACHE.read(key)
    if found is not None:
        _apply(groups, found)
        return found
    with LoadMeter() as meter:
        splits = split_rows(net)
    SPLIT_CACHE.write(key, {f"{o}x{i}": n for (o, i), n in splits.items()},
                      busy=meter.load is not None and meter.load.busy)
    return splits


def row_split_of(net: torch.nn.Module) -> str | None:
    """What ``split_rows`` chose for ``net``, as text ("576x1536<=8 ..."; None: no MKL layer takes torch's call
    beyond one row)."""
    chosen = sorted({(*shape, m.torch_rows) for shape, layers in _by_shape(net).items() for m in layers
                     if m.torch_rows > 1})
    return " ".join(f"{o}x{i}<={n}" for o, i, n in chosen) or None


def available() -> bool:
    """This torch has MKL's packed product and it computes the right numbers here (checked once a process)."""
    return torch.backends.mkl.is_available() and torch.backends.mkldnn.is_available() and works_here()


@functools.cache
def works_here() -> bool:
    """One weight packed once, multiplied with every kind of row count it serves, against torch's own kernel."""
    try:
        gen = torch.Generator().manual_seed(0)
        dense = torch.nn.Linear(96, 80)
        with torch.no_grad():
            dense.weight.copy_(torch.randn(80, 96, generator=gen) * 0.1)
            dense.bias.copy_(torch.randn(80, generator=gen) * 0.1)
        layer = MKLPackedLinear(dense)
        with torch.inference_mode():
            for rows in (2, 3, 5, 8, 13, PACKED_ROWS, 17, 24, PACKED_MAX_ROWS):
                x = torch.randn(rows, 96, generator=gen)
                if not torch.allclose(layer(x), dense(x), rtol=1e-5, atol=1e-5):
                    return False
    except (RuntimeError, AttributeError, ValueError):
        return False
    return True


def refusal(device: torch.device, dtype: torch.dtype) -> str | None:
    if device.type != "cpu" or dtype != torch.float32:
        return "--weights mkl packs float32 weights for MKL's CPU product; use it with --device cpu --dtype float32."
    if not available():
        return "This torch build has no MKL packed product that works here, so --weights mkl cannot run."
    return None


def _split_key(net: torch.nn.Module) -> str | None:
    split = row_split_of(net)
    return f"torch {split}" if split else None  # another split is another speed


MKL = WeightFormat(name="mkl", help="float32: torch's kernel for one-row steps, MKL's product over weights packed once "
                   "for more rows, as exact", same_numbers=True, layer=MKLPackedLinear, refusal=refusal,
                   one_row_as=FLOAT.name, prepare=cached_split, key_part=_split_key, keeps_two_copies=True)
