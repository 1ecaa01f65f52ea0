"""Nothing shared between calls goes wrong: streams open at once and threads calling at once each decode as they
would alone (each owns its speculator's state), every model goose loaded is freed by ``forget_models()``, and a
caller's own model once the caller drops it."""

from __future__ import annotations

import gc
import itertools
import threading
import weakref

import pytest
import torch
from support.tinymodel import tiny_llama

import drafting
from drafting import api
from drafting.speculators import registry


A = "Write a haiku about geese."
B = "Count from one to twenty: one, two, three,"
N = 24
# each test below uses a goose budget no other test uses, so the decoder the process keeps for it starts cold, as
# a decoder of its own does


def _steps(g) -> list[tuple]:
    """What each step drafted and accepted (its timings aside): what the speculator's state decides."""
    return [(r.tokens, r.parents, r.accepted) for r in g.records]


def _alone(prompt: str, spec: str):
    """The answer with a speculator of its own: a seeded call always gets a fresh decoder."""
    return drafting.generate(prompt, max_new_tokens=N, speculator=spec, seed=0)


def test_interleaved_greedy_streams_each_decode_as_alone(embedded_lm):
    spec = "goose:budget=12"
    alone = [_alone(p, spec) for p in (A, B)]
    streams = [drafting.stream(p, max_new_tokens=N, speculator=spec) for p in (A, B)]
    for _ in itertools.zip_longest(*streams):  # one step of each in turn
        pass
    for s, ref in zip(streams, alone):
        assert s.generation.token_ids == ref.token_ids
        assert _steps(s.generation) == _steps(ref)  # the other stream's context never reached its speculator


def test_a_greedy_stream_stays_greedy_while_a_sampled_stream_runs_on_the_model(embedded_lm):
    spec = "goose:budget=13"
    alone = _alone(A, spec)
    greedy = drafting.stream(A, max_new_tokens=N, speculator=spec)
    next(greedy), next(greedy)
    sampled = drafting.generate(B, max_new_tokens=N, speculator=spec, temperature=0.8, top_k=20)
    assert 0 < len(sampled.token_ids) <= N
    for _ in greedy:
        pass
    assert greedy.generation.token_ids == alone.token_ids
    assert _steps(greedy.generation) == _steps(alone)


class TakingTurns:
    """A tokenizer whose ``decode`` calls alternate strictly between the named threads (one that has finished is
    skipped), so two generations in two threads interleave token by token, the same way every run. A stream
    decodes between its steps, never inside one, so the turns never wait on a step another thread runs."""

    def __init__(self, tokenizer, names: list[str]):
        self._tokenizer = tokenizer
        self._order = names
        self._turn = 0
        self._finished: set[str] = set()
        self._cv = threading.Condition()

    def __getattr__(self, name):
        return getattr(self._tokenizer, name)

    def decode(self, *args, **kwargs):
        me = threading.current_thread().name
        if me not in self._order:
            return self._tokenizer.decode(*args, **kwargs)
        with self._cv:
            if not self._cv.wait_for(lambda: self._order[self._turn] == me, timeout=600):
                raise RuntimeError(f"{me}'s turn to decode never came.")  # a hang guard, not a timing
            try:
                return self._tokenizer.decode(*args, **kwargs)
            finally:
                self._next()

    def finished(self) -> None:
        with self._cv:
            self._finished.add(threading.current_thread().name)
            if self._order[self._turn] in self._finished:
                self._next()

    def _next(self) -> None:
        for _ in self._order:
            self._turn = (self._turn + 1) % len(self._order)
            if self._order[self._turn] not in self._finished:
                break
        self._cv.notify_all()


def test_two_threads_generating_at_once_each_get_what_they_get_alone(embedded_lm, monkeypatch):
    spec = "goose:budget=14"
    alone = {"t1": _alone(A, spec), "t2": _alone(B, spec)}
    lm = api._MODELS[(None, "auto", "auto", "auto", "transformers")]
    turns = TakingTurns(lm.tokenizer, ["t1", "t2"])
    monkeypatch.setattr(lm, "tokenizer", turns)
    got = {}

    def generate(name: str, prompt: str) -> None:
        try:
            got[name] = drafting.generate(prompt, max_new_tokens=N, speculator=spec)
        except Exception as exc:  # reported below, in the test's own thread
            got[name] = exc
        finally:
            turns.finished()

    threads = [threading.Thread(target=generate, args=(name, p), name=name) for name, p in (("t1", A), ("t2", B))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for name, ref in alone.items():
        g = got[name]
        assert isinstance(g, api.Generation), g
        assert g.token_ids == ref.token_ids
        assert _steps(g) == _steps(ref)


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(drafting.embedded_model_folder())


def _callers_model(tokenizer) -> torch.nn.Module:
    """A tiny random Llama over the embedded model's vocabulary, as a caller would hold it."""
    return tiny_llama(len(tokenizer), 32, 512, bos=tokenizer.bos_token_id or 0, eos_ids=set(),
                      name="tiny-callers-model").model


def _is_freed(ref: weakref.ref) -> bool:
    gc.collect()
    return ref() is None


def test_a_callers_model_is_freed_after_generate_with_an_auto_budget(tokenizer):
    net = _callers_model(tokenizer)
    g = drafting.generate("Hi there", model=net, tokenizer=tokenizer, speculator="goose", max_new_tokens=4)
    assert len(g.token_ids) == 4
    ref = weakref.ref(net)
    del net
    assert _is_freed(ref)  # budget=auto read the cost curve: its watch must not pin the model


@pytest.mark.parametrize("spec", sorted(registry()))
def test_a_callers_model_is_freed_after_custom_generate(tokenizer, spec):
    net = _callers_model(tokenizer)
    ids = tokenizer("Hi there", return_tensors="pt")["input_ids"]
    out = net.generate(input_ids=ids, attention_mask=torch.ones_like(ids), custom_generate=drafting.custom_generate,
                       speculator=spec, max_new_tokens=4, do_sample=False)
    assert out.shape[1] == ids.shape[1] + 4
    ref = weakref.ref(net)
    del net
    assert _is_freed(ref)  # its warm speculators and the cost-curve watch go with it


def test_a_model_with_static_shapes_is_freed():
    from drafting.engine.decode import Decoder
    from drafting.engine.hf.static_shapes import StaticShapes
    from drafting.speculators import create

    lm = tiny_llama(128, 64, 512, bos=1, eos_ids=set(), name="tiny-static")
    dec = Decoder(lm, create("pld"), static_shapes=StaticShapes(buckets=(1, 16), context=48))
    assert len(dec.generate([5, 17, 33, 2], 4).output_ids) == 4
    ref = weakref.ref(lm.model)
    del lm, dec
    assert _is_freed(ref)  # the shared static forward lives as long as a decoder uses it, not as long as the process


def test_forget_models_frees_every_model_goose_loaded(embedded_lm):
    drafting.generate("Hi", max_new_tokens=4, speculator="goose")
    drafting.generate("Hi", max_new_tokens=4, speculator="ar")
    refs = [weakref.ref(lm.model) for lm in api._MODELS.values()]
    assert refs
    drafting.forget_models()
    assert _is_freed(refs[0]) and all(r() is None for r in refs)
