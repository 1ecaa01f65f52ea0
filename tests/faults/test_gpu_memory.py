"""A large model on one GPU, checked on CPU: it is loaded straight onto the device (never whole on the host), a
model the GPU's free memory cannot hold is refused before loading in one sentence that says what it needs and
what is free, and the GPU running out of memory at load or in a decoding step is one sentence (how much was
needed, read from torch's message) and, from the CLI, a non-zero exit with no traceback.

The seams are goose's own: the GPU's free memory (``footprint.gpu_free_bytes``, torch.cuda.mem_get_info on a
GPU) and the engine's step, made to raise torch's own out-of-memory error."""

from __future__ import annotations

import pytest
import torch
from support.cli import run_goose
from support.tinymodel import tiny_llama
from transformers import LlamaConfig, LlamaForCausalLM

from drafting.engine.decode import Decoder
from drafting.engine.hf.forward import HFForward
from drafting.errors import EngineError, ModelError, OutOfMemory, gpu_out_of_memory
from drafting.models import footprint, loader
from drafting.models.streamed_load import load_streamed
from drafting.speculators import create

GIB = 1 << 30
# torch's own wording (2.x), figures and all
TORCH_OOM = ("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which "
             "1.25 GiB is free. Including non-PyTorch memory, this process has 77.93 GiB memory in use. Of the "
             "allocated memory 76.10 GiB is allocated by PyTorch, and 1.20 GiB is reserved by PyTorch but "
             "unallocated.")


def _one_sentence(text: str) -> bool:
    return text.endswith(".") and text.count(". ") == 0 and "\n" not in text


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    """A saved 2-layer Llama: config.json and model.safetensors, as transformers writes them."""
    config = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=128)
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("tiny-llama")
    LlamaForCausalLM(config).save_pretrained(folder)
    return folder


@pytest.fixture
def a_gpu_with(monkeypatch):
    """A CUDA GPU as far as goose's checks go, with ``free`` bytes free; nothing is placed on it."""
    def make(free: int | None):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(footprint, "gpu_free_bytes", lambda device: free)
    return make


def test_the_gpu_room_check_refuses_weights_larger_than_its_free_memory(a_gpu_with):
    a_gpu_with(GIB)
    with pytest.raises(ModelError) as err:
        footprint.check_gpu_room("Big", GIB, torch.bfloat16, torch.device("cuda"))  # 2 GiB of bfloat16 weights
    message = str(err.value)
    assert "Big does not fit on cuda: it needs about 2.0 GB for its weights in bfloat16" in message
    assert "1.0 GB of the GPU's memory is free" in message and "--device-map auto" in message
    assert _one_sentence(message), message
    with pytest.raises(ModelError, match="use --dtype bfloat16"):  # float32 could halve it
        footprint.check_gpu_room("Big", GIB, torch.float32, torch.device("cuda"))
    footprint.check_gpu_room("Small", GIB // 4, torch.bfloat16, torch.device("cuda"))  # 0.5 GiB: fits
    a_gpu_with(None)
    footprint.check_gpu_room("Big", GIB, torch.bfloat16, torch.device("cuda"))  # free memory unknown: not refused


def test_loading_onto_a_gpu_checks_the_gpu_before_anything_is_read(a_gpu_with, monkeypatch, tiny_folder):
    a_gpu_with(1000)  # fewer bytes than the tiny model's weights
    monkeypatch.setattr(footprint, "check_room", lambda *a, **k: pytest.fail("host memory checked for a GPU load"))
    monkeypatch.setattr(loader, "_load_folder", lambda *a, **k: pytest.fail("loaded although it does not fit"))
    with pytest.raises(ModelError, match="does not fit on cuda") as err:
        loader.load_model(str(tiny_folder), device="cuda")
    assert "of the GPU's memory is free" in str(err.value) and _one_sentence(str(err.value))


def test_a_cpu_load_still_checks_host_memory(monkeypatch, tiny_folder):
    monkeypatch.setattr(footprint, "gpu_free_bytes", lambda device: pytest.fail("GPU memory read for a CPU load"))
    monkeypatch.setattr(footprint, "available_bytes", lambda: 1000)
    with pytest.raises(ModelError, match="of memory is available"):
        loader.load_model(str(tiny_folder), device="cpu")


def test_a_model_is_loaded_straight_onto_its_one_gpu():
    gpu = torch.device("cuda:0")
    assert loader.straight_onto(gpu, None) == gpu
    assert loader.straight_onto(torch.device("cpu"), None) is None  # the CPU path as it was
    assert loader.straight_onto(gpu, "auto") is None  # a device map places it


def test_the_streamed_load_builds_the_model_on_the_device_it_is_given(tiny_folder):
    """On ``meta`` (standing in for a GPU) every tensor is where it was asked to be: none was made on the host."""
    net = load_streamed(tiny_folder, torch.float32, torch.device("meta"))
    assert {t.device.type for t in [*net.parameters(), *net.buffers()]} == {"meta"}
    on_cpu = load_streamed(tiny_folder, torch.float32)
    assert {t.device.type for t in on_cpu.parameters()} == {"cpu"}


def test_transformers_own_load_takes_a_single_device_map(tiny_folder):
    net = loader._from_pretrained(str(tiny_folder), torch.float32, None, False, torch.device("cpu"))
    reference = LlamaForCausalLM.from_pretrained(str(tiny_folder), dtype=torch.float32)
    assert all(torch.equal(a, b) for a, b in zip(net.state_dict().values(), reference.state_dict().values()))


def test_out_of_memory_at_load_is_one_sentence(monkeypatch, tiny_folder):
    def no_room(*args, **kwargs):
        raise torch.OutOfMemoryError(TORCH_OOM)

    monkeypatch.setattr(loader, "_load_folder", no_room)
    with pytest.raises(ModelError) as err:
        loader.load_model(str(tiny_folder), device="cpu")
    message = str(err.value)
    assert message.startswith("The GPU ran out of memory loading ")
    assert "it needed 2.00 GiB more with 1.25 GiB free" in message and _one_sentence(message), message
    assert err.value.__cause__ is None and err.value.__context__ is None  # torch's error is not kept alive


@pytest.mark.parametrize("error", [torch.OutOfMemoryError(TORCH_OOM), torch.cuda.OutOfMemoryError(TORCH_OOM),
                                   RuntimeError("CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 7.79 GiB "
                                                "total capacity; 4.56 MiB free)")])
def test_every_name_of_torchs_out_of_memory_error_reads_as_one_sentence(error):
    message = gpu_out_of_memory(error, "in a step", "ask for less")
    assert message is not None and _one_sentence(message), message
    assert ("2.00 GiB more with 1.25 GiB free" in message) or ("20.00 MiB more with 4.56 MiB free" in message)
    assert gpu_out_of_memory(RuntimeError("shape mismatch"), "in a step", "ask for less") is None


def test_out_of_memory_in_a_decoding_step_is_one_sentence(monkeypatch, tiny_lm):
    def no_room(self, draft, cache):
        raise torch.OutOfMemoryError(TORCH_OOM)

    decoder = Decoder(tiny_lm, create("goose"))  # its cost curve measured first, with room
    monkeypatch.setattr(HFForward, "step", no_room)
    with pytest.raises(OutOfMemory) as err:
        decoder.generate([1, 5, 9, 5, 9], 8)
    message = str(err.value)
    assert isinstance(err.value, EngineError) and _one_sentence(message), message
    assert message.startswith("The GPU ran out of memory in a decoding step: it needed 2.00 GiB more")
    run = Decoder(tiny_lm, create("ar")).run([1, 5, 9], 8)  # iterated step by step, the same
    with pytest.raises(OutOfMemory):
        next(run)
    fresh = tiny_llama(128, 64, 512, bos=1, eos_ids={127}, name="tiny-llama-without-gpu-room")  # no curve yet
    with pytest.raises(OutOfMemory, match="measuring what verification costs"):  # goose measures its cost curve
        Decoder(fresh, create("goose"))


def test_other_errors_in_a_step_are_left_as_they_are(monkeypatch, tiny_lm):
    def broken(self, draft, cache):
        raise RuntimeError("shape mismatch")

    monkeypatch.setattr(HFForward, "step", broken)
    with pytest.raises(RuntimeError, match="shape mismatch"):  # a bug: its traceback is wanted
        Decoder(tiny_lm, create("ar")).generate([1, 5, 9], 4)


# a module the CLI imports (as a speculator module named in GOOSE_SPECULATORS) that makes every step's forward
# raise torch's own out-of-memory error, as a GPU without room left would
NO_ROOM_MODULE = f'''
import torch
from drafting.engine.hf.forward import HFForward


def no_room(self, draft, cache):
    raise torch.OutOfMemoryError({TORCH_OOM!r})


HFForward.step = no_room
'''


@pytest.mark.heavy  # a whole command under a fault, in a fresh process (about a minute)
def test_out_of_memory_in_a_step_leaves_the_cli_in_one_sentence(tmp_path):
    (tmp_path / "no_gpu_room.py").write_text(NO_ROOM_MODULE)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"id": "p1", "task": "code", "prompt": "Add two numbers."}\n')
    proc = run_goose("bench", str(prompts), "-s", "ar", "-n", "4", "--weights", "float", "--json",
                     str(tmp_path / "out.json"), timeout=300, PYTHONPATH=str(tmp_path),
                     GOOSE_SPECULATORS="no_gpu_room")
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("goose: The GPU ran out of memory in a decoding step: it needed 2.00 GiB more with "
                           "1.25 GiB free;"), proc.stderr
    assert _one_sentence(last.removeprefix("goose: ")), last
    assert proc.stderr.count("out of memory") == 1, proc.stderr
