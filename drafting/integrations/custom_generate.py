"""goose inside the ``generate()`` transformers users already call:

    model.generate(**inputs, custom_generate=drafting.custom_generate, speculator="goose", max_new_tokens=64)

transformers prepares everything as usual (generation config, max length, EOS ids, logits processors, stopping
criteria), then hands the decoding loop to this callable, which returns what ``generate()`` returns: the prompt
followed by the new tokens (a ``GenerateDecoderOnlyOutput`` with ``return_dict_in_generate=True``). Greedy
output is token-identical to plain ``generate()``; with ``do_sample=True`` the temperature, top-k and top-p of
the generation config are honoured exactly by lossless tree sampling. Every stopping criterion is checked token
by token as transformers checks it, and a streamer passed to ``generate()`` receives each accepted token. The
criteria's answers for a step's tokens are read in one go (one host read a step, not one a token); a criterion
is then also asked about the tokens after the one it stops at, whose answers are not used.

transformers does not hand a streamer to a custom callable (it keeps it for the prompt), so it is read from
the ``generate()`` call that invoked this function. The model is left as it was found (drafting.models.borrowed).
"""

from __future__ import annotations

import sys
import threading
import weakref

import torch
from transformers.generation.utils import GenerateDecoderOnlyOutput

from drafting.engine.acceptance import make_acceptor
from drafting.engine.decode import Decoder
from drafting.engine.sampling_params import SamplingParams
from drafting.machine.step_hooks import machine_hooks
from drafting.models.borrowed import borrowed, wrap_model
from drafting.speculators import create

# logits processors whose effect the tree sampler reproduces from the generation config
_WARPERS = {"TemperatureLogitsWarper", "TopKLogitsWarper", "TopPLogitsWarper"}
# model -> {spec: Speculator} kept warm between greedy runs. Keyed weakly, so the caller's model is freed when the
# caller drops it: a speculator keeps only what it learned and its cost curve, never the model (a value that held
# its weak key would keep it alive for the life of the process). A call takes its speculator out while it runs.
_WARM: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_WARM_LOCK = threading.Lock()


def custom_generate(model, input_ids, logits_processor, stopping_criteria, generation_config, speculator="goose",
                    **model_kwargs):
    """The decoding loop ``generate(custom_generate=...)`` calls; ``speculator`` is a goose spec string."""
    streamer = _caller_streamer()
    gc = generation_config
    _check(input_ids, logits_processor, gc, model_kwargs)
    start = input_ids.shape[1]
    max_new = int(gc.max_length) - start
    eos = gc._eos_token_tensor
    eos_ids = set() if eos is None else {int(t) for t in eos.reshape(-1).tolist()}
    lm = wrap_model(model, eos_ids=eos_ids)
    if gc.do_sample:
        seed = int(torch.randint(0, 2**62, (1,)).item())  # from torch's generator, so torch.manual_seed() holds
        params = SamplingParams(float(gc.temperature or 1.0), int(gc.top_k or 0), float(gc.top_p or 1.0), seed)
    else:
        params = SamplingParams()
    # on the prompt's device: stopping criteria compare against tensors transformers put there
    seq = torch.empty((1, start + max(0, max_new)), dtype=torch.long, device=input_ids.device)
    seq[:, :start] = input_ids
    n = start
    if max_new > 0:
        with borrowed(model):
            spec = _speculator(model, speculator, warm=params.greedy)
            decoder = Decoder(lm, spec, acceptor=make_acceptor(params), hooks=machine_hooks())
            steps = decoder.run(input_ids[0].tolist(), max_new)
            try:
                for record in steps:
                    kept, done = _append(seq, n, record.emitted, stopping_criteria)
                    if streamer is not None:
                        for token in record.emitted[:kept]:
                            streamer.put(torch.tensor([token]))  # from the host's own copy: nothing to wait for
                    n += kept
                    if done:
                        break
            finally:
                steps.close()
                if params.greedy:
                    _keep_warm(model, speculator, spec)
    if streamer is not None:
        streamer.end()
    sequences = seq[:, :n].clone()
    if gc.return_dict_in_generate:
        return GenerateDecoderOnlyOutput(sequences=sequences)
    return sequences


def _append(seq: torch.Tensor, n: int, tokens: list[int], stopping_criteria) -> tuple[int, bool]:
    """Write a step's ``tokens`` after the first ``n`` of ``seq``; return (how many are kept, whether to stop):
    all of them, or those up to and including the first after which ``stopping_criteria`` stop. The criteria
    see every prefix as transformers shows them token by token; their answers come to the host in one read."""
    if not tokens:
        return 0, False
    seq[0, n : n + len(tokens)].copy_(torch.tensor(tokens, dtype=seq.dtype), non_blocking=True)
    stops = torch.stack([stopping_criteria(seq[:, : n + i + 1], None).all() for i in range(len(tokens))]).tolist()
    return (stops.index(True) + 1, True) if True in stops else (len(tokens), False)


def _speculator(model, spec: str, warm: bool):
    """A speculator for ``spec``; in greedy runs the same model keeps one per spec, so its learned tables stay
    warm from call to call (greedy output never depends on them). The kept one is taken out of the table for
    this call (``_keep_warm`` puts it back): a call made meanwhile, from another thread, gets a fresh one, so no
    two generations share a speculator's state."""
    if not isinstance(spec, str):
        raise ValueError(f"speculator must be a spec string such as 'goose' or 'pld:draft=8', not {spec!r}.")
    if not warm:
        return create(spec)
    with _WARM_LOCK:
        try:
            kept = _WARM.get(model, {}).pop(spec, None)
        except TypeError:  # a model that cannot be weakly referenced: no warm start
            kept = None
    return kept if kept is not None else create(spec)


def _keep_warm(model, spec: str, speculator) -> None:
    with _WARM_LOCK:
        try:
            _WARM.setdefault(model, {}).setdefault(spec, speculator)
        except TypeError:
            pass


def _check(input_ids, logits_processor, gc, model_kwargs) -> None:
    if input_ids.shape[0] != 1:
        raise ValueError(f"goose's custom_generate decodes one sequence at a time; it got a batch of {input_ids.shape[0]}.")
    if getattr(gc, "num_beams", 1) not in (None, 1):
        raise ValueError("goose's custom_generate replaces greedy or sampled decoding, not beam search; drop num_beams.")
    mask = model_kwargs.get("attention_mask")
    if mask is not None and not bool((mask == 1).all()):
        raise ValueError("goose's custom_generate takes an unpadded prompt; its attention_mask hides some tokens.")
    cache = model_kwargs.get("cache")
    if cache is not None and cache.get_seq_length() > 0:
        raise ValueError("goose's custom_generate starts from an empty cache; do not pass a filled cache.")
    if gc.return_dict_in_generate and any(getattr(gc, k, False) for k in
                                          ("output_scores", "output_logits", "output_attentions", "output_hidden_states")):
        raise ValueError("goose's custom_generate returns sequences only; drop output_scores, output_logits, "
                         "output_attentions and output_hidden_states.")
    for proc in logits_processor or []:
        name = type(proc).__name__
        if name not in _WARPERS or not gc.do_sample:
            raise ValueError(f"goose's custom_generate cannot apply {name} (set by the generation config or "
                             "the call); drop that setting or call generate() without custom_generate.")


def _caller_streamer():
    """The ``streamer`` argument of the ``generate()`` call that invoked ``custom_generate`` (None if none)."""
    frame = sys._getframe(2)
    for _ in range(4):  # generate() calls the decoding method directly; allow a decorator frame or two
        if frame is None:
            return None
        local = frame.f_locals
        if frame.f_code.co_name == "generate" and local.get("custom_generate") is custom_generate:
            return local.get("streamer")
        frame = frame.f_back
    return None
