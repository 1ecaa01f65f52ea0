"""`--weights auto`: the probe that times the formats, its cache per machine fingerprint, the row-dispatching
`dual` format, and its exactness against plain decoding."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from support.tinymodel import tiny_llama

from drafting.weights import mkl as mkl_linear, onednn as onednn_linear
from drafting.weights.formats import WEIGHT_FORMATS

# the formats whose one-row steps run float's kernel and tree steps another: exact only if trees match steps
ROW_DISPATCH = [name for name, f in WEIGHT_FORMATS.items() if f.same_numbers and f.one_row_as is not None]

needs_onednn = pytest.mark.skipif(not onednn_linear.available(), reason="this torch build has no oneDNN")


def test_decide_keeps_the_fastest_one_row_format_and_dual_only_for_faster_trees():
    from drafting.weights.probe import decide

    assert decide({"float": [0.030, 0.062], "onednn": [0.037, 0.058]}) == "dual"  # float alone, oneDNN for trees
    assert decide({"float": [0.030, 0.050], "onednn": [0.037, 0.058]}) == "float"
    assert decide({"float": [0.038, 0.061], "onednn": [0.027, 0.035]}) == "onednn"
    # oneDNN faster at one row but slower for trees: plain decoding still takes the faster one-row format
    assert decide({"float": [0.038, 0.040], "onednn": [0.027, 0.050]}) == "onednn"
    # MKL's packed product only runs trees: chosen when it beats both at the tree size and float wins one row
    assert decide({"float": [0.030, 0.062], "onednn": [0.037, 0.058], "mkl": [0.030, 0.052]}) == "mkl"
    assert decide({"float": [0.030, 0.062], "onednn": [0.037, 0.050], "mkl": [0.030, 0.052]}) == "dual"
    assert decide({"float": [0.038, 0.061], "onednn": [0.027, 0.035], "mkl": [0.020, 0.030]}) == "onednn"


def _fresh_tiny():
    return tiny_llama(128, 64, 512, bos=1, eos_ids={127}, name="tiny-probe")


@needs_onednn
def test_probe_is_cached_per_fingerprint_and_redone_when_it_changes(tmp_path, monkeypatch):
    from drafting.weights.probe import cache_path, candidates, choose_format, fingerprint
    from drafting.weights.formats import SAME_NUMBERS

    monkeypatch.setenv("GOOSE_CACHE", str(tmp_path))
    lm = _fresh_tiny()
    cpu = torch.device("cpu")
    first = choose_format(lm.model, lm.name, cpu, torch.float32)
    assert not first.cached and set(first.seconds) == set(candidates(torch.float32))
    assert all(len(s) == 2 and all(t > 0 for t in s) for s in first.seconds.values())
    assert first.weights in SAME_NUMBERS
    fp = fingerprint(_fresh_tiny().model, lm.name, cpu, torch.float32)
    path = cache_path(fp)
    assert path.exists()  # (a busy machine's probe too, for a few minutes)
    again = choose_format(_fresh_tiny().model, lm.name, cpu, torch.float32)
    assert again.cached and again.weights == first.weights and again.seconds == first.seconds
    # another model identity is another fingerprint: a new probe
    other = choose_format(_fresh_tiny().model, "another-model", cpu, torch.float32)
    assert not other.cached
    # the stored fingerprint no longer matching the machine (a CPU or torch change) forces a new probe too
    doc = json.loads(path.read_text())
    doc["fingerprint"]["torch"] = "0.0-elsewhere"
    path.write_text(json.dumps(doc))
    redone = choose_format(_fresh_tiny().model, lm.name, cpu, torch.float32)
    assert not redone.cached
    assert "chose" in redone.describe() and "ms per forward" in redone.describe()


@needs_onednn
def test_the_chosen_format_is_what_the_model_runs(tmp_path, monkeypatch):
    from drafting.weights.probe import choose_format
    from drafting.weights.formats import WEIGHT_FORMATS

    monkeypatch.setenv("GOOSE_CACHE", str(tmp_path))
    lm = _fresh_tiny()
    choice = choose_format(lm.model, lm.name, torch.device("cpu"), torch.float32)
    head = lm.model.get_output_embeddings()
    if choice.weights == "float":
        assert type(head) is torch.nn.Linear
    else:
        assert type(head) is WEIGHT_FORMATS[choice.weights].layer


@needs_onednn
def test_dual_layer_dispatches_on_rows_and_matches_both_kernels():
    from drafting.weights.dual import RowDispatchLinear
    from drafting.weights.onednn import OneDNNLinear

    torch.manual_seed(0)
    dense = torch.nn.Linear(64, 48)
    dual, packed = RowDispatchLinear(dense), OneDNNLinear(dense)
    with torch.inference_mode():
        one = torch.randn(1, 1, 64)
        assert torch.equal(dual(one), dense(one))  # one row: torch's own kernel, bit for bit
        many = torch.randn(1, 16, 64)
        assert torch.equal(dual(many), packed(many))  # more rows: oneDNN's kernel
        assert torch.allclose(dual(many), dense(many), atol=1e-5, rtol=1e-5)


needs_mkl = pytest.mark.skipif(not mkl_linear.available(), reason="this torch build has no working MKL packed product")


@needs_mkl
def test_mkl_layer_dispatches_on_rows_and_matches_torch_kernel():
    from drafting.weights.mkl import MKLPackedLinear

    torch.manual_seed(0)
    dense = torch.nn.Linear(64, 48)
    layer = MKLPackedLinear(dense)
    with torch.inference_mode():
        one = torch.randn(1, 1, 64)
        assert torch.equal(layer(one), dense(one))  # one row: torch's own kernel, bit for bit
        for rows in (2, 7, 16, 33, 200):  # any row count against a weight packed once
            many = torch.randn(1, rows, 64)
            assert layer(many).shape == (1, rows, 48)
            assert torch.allclose(layer(many), dense(many), atol=1e-5, rtol=1e-5), rows


@needs_mkl
def test_mkl_split_gives_torchs_call_the_rows_it_chose_and_the_packed_product_the_rest():
    from drafting.weights.mkl import SPLIT_TRIED, MKLPackedLinear, row_split_of, split_rows

    torch.manual_seed(0)
    net = torch.nn.Sequential(MKLPackedLinear(torch.nn.Linear(64, 48)), MKLPackedLinear(torch.nn.Linear(48, 32)),
                              MKLPackedLinear(torch.nn.Linear(64, 48)))
    chosen = split_rows(net, rounds=1)
    assert set(chosen) == {(48, 64), (32, 48)} and set(chosen.values()) <= {1, *SPLIT_TRIED}
    assert net[0].torch_rows == net[2].torch_rows == chosen[(48, 64)] and net[1].torch_rows == chosen[(32, 48)]
    net[0].torch_rows = net[2].torch_rows = 1
    net[1].torch_rows = 4
    assert row_split_of(net) == "32x48<=4"
    net[1].torch_rows = 1
    assert row_split_of(net) is None
    layer = net[0]
    layer.torch_rows = 3
    with torch.inference_mode():
        for rows in (2, 3, 4, 9):
            x = torch.randn(rows, 64)
            own = torch.nn.functional.linear(x, layer.weight, layer.bias)
            packed = torch.ops.mkl._mkl_linear(x, layer.packed, layer.weight, layer.bias, rows)
            assert torch.equal(layer(x), own if rows <= 3 else packed), rows


@needs_mkl
def test_mkl_split_is_measured_once_per_machine_and_shapes(tmp_path, monkeypatch):
    from drafting.weights import mkl as mkl_linear
    from drafting.weights.mkl import MKLPackedLinear, cached_split

    monkeypatch.setenv("GOOSE_CACHE", str(tmp_path))
    make = lambda: torch.nn.Sequential(MKLPackedLinear(torch.nn.Linear(64, 48)), MKLPackedLinear(torch.nn.Linear(48, 32)))
    monkeypatch.setattr(mkl_linear, "split_rows", lambda net: {(48, 64): 5, (32, 48): 1})
    assert cached_split(make()) == {(48, 64): 5, (32, 48): 1}
    monkeypatch.setattr(mkl_linear, "split_rows", lambda net: pytest.fail("measured again"))
    again = make()
    assert cached_split(again) == {(48, 64): 5, (32, 48): 1}  # read back, applied without timing
    assert again[0].torch_rows == 5 and again[1].torch_rows == 1
    other = torch.nn.Sequential(MKLPackedLinear(torch.nn.Linear(64, 40)))
    with pytest.raises(pytest.fail.Exception):
        cached_split(other)  # other shapes: measured


def test_mkl_format_is_refused_outside_float32_on_cpu():
    from drafting.errors import WeightsError
    from drafting.weights.formats import check_format

    with pytest.raises(WeightsError, match="float32"):
        check_format("mkl", torch.device("cpu"), torch.bfloat16)


def _skip_unless_available(fmt: str) -> None:
    if not WEIGHT_FORMATS[fmt].available(torch.device("cpu"), torch.float32):
        pytest.skip(f"--weights {fmt} cannot run with this torch build")


@pytest.mark.parametrize("fmt", ROW_DISPATCH)
def test_row_dispatch_tree_logits_match_sequential_steps(tiny_lm, fmt):
    """The exactness premise of `dual` and `mkl` in fp32: a tree pass through oneDNN's or MKL's packed kernel
    scores each node as sequential one-row passes through torch's kernel do, to float rounding."""
    from drafting.engine.decode import Decoder
    from drafting.speculators import create
    from drafting.weights.formats import apply_format
    from dataclasses import replace

    _skip_unless_available(fmt)
    lm = replace(tiny_lm, model=apply_format(copy.deepcopy(tiny_lm.model), fmt), weights=fmt, eos_ids=set())
    prompt = [5, 17, 33, 2, 90, 41, 5, 17, 33]
    ar = Decoder(lm, create("ar")).generate(prompt, 24).output_ids
    for spec in ("pld", "goose"):
        assert Decoder(lm, create(spec)).generate(prompt, 24).output_ids == ar


@pytest.mark.heavy  # the embedded model loaded again per format; the tiny model proves the same rows match above
@pytest.mark.slow
@pytest.mark.parametrize("fmt", ROW_DISPATCH)
def test_row_dispatch_weights_keep_goose_identical_to_ar_on_real_prompts(real_prompts, fmt):
    """fp32 `dual` and `mkl` are offered as exact only because this holds: one-row steps through torch's kernel
    and tree steps through oneDNN's or MKL's packed kernel give the very tokens of plain decoding on the
    embedded model."""
    from drafting.engine.decode import Decoder
    from drafting.models.loader import load_model
    from drafting.speculators import create

    _skip_unless_available(fmt)
    lm = load_model(dtype="float32", weights=fmt)
    # a fixed budget of the GOOSE paper's size: wide trees through the packed kernel, and no cost curve to measure
    ar, goose = Decoder(lm, create("ar")), Decoder(lm, create("goose:budget=60"))
    for pid, ids in real_prompts[::3]:
        assert goose.generate(ids, 40).output_ids == ar.generate(ids, 40).output_ids, pid


def test_a_model_the_probe_cannot_time_keeps_float(tmp_path, monkeypatch):
    """A sliding-window cache cannot roll a timed step back; the probe gives up cleanly and keeps float."""
    from transformers import MistralConfig, MistralForCausalLM

    from drafting.weights.probe import choose_format
    from drafting.weights.formats import SAME_NUMBERS

    monkeypatch.setenv("GOOSE_CACHE", str(tmp_path))
    config = MistralConfig(vocab_size=300, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                           num_attention_heads=2, num_key_value_heads=1, sliding_window=32, max_position_embeddings=256)
    net = MistralForCausalLM(config).eval()
    choice = choose_format(net, "windowed", torch.device("cpu"), torch.float32)
    if choice.error is None:  # this transformers can roll the window back: then the probe simply ran
        assert choice.weights in SAME_NUMBERS
        return
    assert choice.weights == "float" and type(net.get_output_embeddings()) is torch.nn.Linear
    assert "kept float" in choice.describe()


def test_a_busy_probe_expires_and_never_replaces_an_idle_one(tmp_path, monkeypatch):
    from drafting.weights.probe import BUSY_TTL_S, FormatChoice, cache_path, read_cached, write_cached

    monkeypatch.setenv("GOOSE_CACHE", str(tmp_path))
    fp = {"cpu": "test", "model": "m"}
    idle = FormatChoice(dtype="float32", weights="float", seconds={"float": [1.0, 2.0], "onednn": [1.5, 2.5]})
    busy = FormatChoice(dtype="float32", weights="onednn", seconds={"float": [9.0, 9.0], "onednn": [1.0, 1.0]},
                      busy="other processes used 1.8 of 2 cores")
    write_cached(fp, idle)
    write_cached(fp, busy)
    assert read_cached(fp).weights == "float"
    cache_path(fp).unlink()
    write_cached(fp, busy)
    assert read_cached(fp).weights == "onednn"  # kept for the next minutes of runs
    doc = json.loads(cache_path(fp).read_text())
    doc["written"] -= BUSY_TTL_S + 1
    cache_path(fp).write_text(json.dumps(doc))
    assert read_cached(fp) is None  # then probed again


def test_decide_without_room_for_two_copies_keeps_the_one_row_format():
    from drafting.weights.probe import decide

    assert decide({"float": [0.030, 0.062], "onednn": [0.037, 0.058]}, two_copies=False) == "float"
    assert decide({"float": [0.030, 0.062], "onednn": [0.037, 0.058], "mkl": [0.030, 0.052]},
                  two_copies=False) == "float"
    assert decide({"float": [0.038, 0.061], "onednn": [0.027, 0.035]}, two_copies=False) == "onednn"


@needs_onednn
def test_a_model_too_big_for_a_second_copy_is_timed_and_kept_in_one(tmp_path, monkeypatch):
    """The memory the system says is available decides: short of four copies' room, nothing is packed, neither
    to be timed nor to be kept, and the choice says why; with room again the probe is redone in full."""
    from drafting.weights import probe
    from drafting.weights.probe import FormatChoice, candidates, choose_format, copy_bytes, fingerprint, write_cached

    monkeypatch.setenv("GOOSE_CACHE", str(tmp_path))
    cpu = torch.device("cpu")
    lm = _fresh_tiny()
    need = copy_bytes(lm.model)
    monkeypatch.setattr(probe, "available_bytes", lambda: 3 * need)
    tight = choose_format(lm.model, lm.name, cpu, torch.float32)
    assert set(tight.seconds) == {"float"} and tight.weights == "float" and not tight.cached
    assert "second copy" in tight.describe() and all(type(m).__name__ == "Linear" for m in lm.model.modules()
                                                     if "Linear" in type(m).__name__)
    # a choice stored when there was room for two copies is not kept either
    fp = fingerprint(_fresh_tiny().model, "roomy", cpu, torch.float32)
    write_cached(fp, FormatChoice(dtype="float32", weights="dual", seconds={"float": [0.030, 0.062],
                                                                            "onednn": [0.037, 0.058]}))
    again = choose_format(_fresh_tiny().model, "roomy", cpu, torch.float32)
    assert again.cached and again.weights == "float" and "second copy" in again.describe()
    monkeypatch.setattr(probe, "available_bytes", lambda: 100 * need)
    roomy = choose_format(_fresh_tiny().model, lm.name, cpu, torch.float32)
    assert not roomy.cached and set(roomy.seconds) == set(candidates(torch.float32)) and roomy.memory is None
