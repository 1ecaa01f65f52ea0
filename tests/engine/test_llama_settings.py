"""The llama.cpp engine's knobs refuse bad values in one sentence, before llama.cpp sees them (some it would
answer by aborting the process)."""

import ctypes
from types import SimpleNamespace

import pytest

from drafting.engine.llama.settings import LlamaSettings


@pytest.mark.parametrize("kwargs, says", [
    ({"context": 8}, "at least 16 tokens"),
    ({"batch": 0}, "batch must be between 1"),
    ({"threads": 0}, "positive whole number"),
    ({"gpu_layers": -2}, "GPU layers"),
    ({"sequences": 1}, "sequences must be between 2"),
    ({"batch": 64}, r"sequences \(256\) must be at most the batch \(64\)"),  # llama.cpp's GGML_ASSERT otherwise
])
def test_bad_llama_settings_are_refused_in_one_sentence(kwargs, says):
    with pytest.raises(ValueError, match=says) as err:
        LlamaSettings(**kwargs)
    assert str(err.value).count(". ") == 0 and str(err.value).endswith(".")


def test_a_small_batch_runs_with_as_few_sequences():
    assert LlamaSettings(batch=64, sequences=64).batch == 64


# ctypes structures take any attribute name silently: llama-cpp-python 0.3.36 replaced ``use_mmap`` with
# ``load_mode``, and setting the old name did nothing (the engine mapped the file and held 0.6 GB more on a 1.5B)
class _NewParams(ctypes.Structure):
    _fields_ = [("n_gpu_layers", ctypes.c_int32), ("load_mode", ctypes.c_int32)]


class _OldParams(ctypes.Structure):
    _fields_ = [("n_gpu_layers", ctypes.c_int32), ("use_mmap", ctypes.c_bool)]


class _OtherParams(ctypes.Structure):
    _fields_ = [("n_gpu_layers", ctypes.c_int32)]


def test_the_model_file_is_read_not_mapped_whichever_field_the_library_has():
    from drafting.engine.llama.net import read_not_mapped
    from drafting.errors import ModelError

    lib = SimpleNamespace(LLAMA_LOAD_MODE_NONE=0)
    new = _NewParams(load_mode=-1)  # auto: llama.cpp maps the file
    read_not_mapped(lib, new)
    assert new.load_mode == 0
    old = _OldParams(use_mmap=True)
    read_not_mapped(lib, old)
    assert old.use_mmap is False
    with pytest.raises(ModelError, match="neither load_mode nor use_mmap"):
        read_not_mapped(lib, _OtherParams())
