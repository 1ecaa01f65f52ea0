"""The tree sampler's device handling, checked on the CPU: its generator is made on the logits' device (a
stand-in generator stands for CUDA's), once, seeded; and a step sends its children's tokens to the device in
one copy and draws every uniform in one call, however many nodes the walk visits."""

from __future__ import annotations

import torch

from drafting.engine.acceptance import TreeSampler
from drafting.engine.sampling_params import SamplingParams
from drafting.engine.tree import DraftTree


class FakeGenerator:
    """Stands for a torch.Generator on a device this machine lacks; remembers how it was seeded."""

    made: list = []

    def __init__(self, device):
        self.device = torch.device(device)
        self.seeded = None
        FakeGenerator.made.append(self)

    def manual_seed(self, seed):
        self.seeded = seed
        return self

    def seed(self):
        self.seeded = "random"


def test_the_generator_is_made_on_the_logits_device_once_and_seeded():
    FakeGenerator.made = []
    sampler = TreeSampler(SamplingParams(0.8, seed=11), new_generator=FakeGenerator)
    gpu = sampler.generator(torch.device("cuda:0"))
    assert gpu.device == torch.device("cuda:0") and gpu.seeded == 11
    assert sampler.generator(torch.device("cuda:0")) is gpu  # kept from step to step
    cpu = sampler.generator(torch.device("cpu"))  # logits that moved: a generator where they are now
    assert cpu.device == torch.device("cpu") and cpu.seeded == 11 and len(FakeGenerator.made) == 2
    unseeded = TreeSampler(SamplingParams(0.8), new_generator=FakeGenerator).generator(torch.device("cuda:0"))
    assert unseeded.seeded == "random"


def test_the_default_generator_lives_on_the_logits_device():
    sampler = TreeSampler(SamplingParams(0.8, seed=0))
    tree = DraftTree(5)
    assert sampler(tree, torch.zeros(1, 8))[0] == [0]
    assert sampler.generator(torch.device("cpu")).device == torch.device("cpu")


def _deep_certain_tree() -> tuple[DraftTree, torch.Tensor]:
    """A chain 1, 2, 3, 4 under the root, with side branches, that the target accepts to the end."""
    tree = DraftTree(5)
    node = 0
    for token in (1, 2, 3, 4):
        tree.add(7, node, "adjacency")  # a sibling the walk tries and rejects
        node = tree.add(token, node, "context")
    logits = torch.full((len(tree), 8), -30.0)
    chain = [0] + [i for i in range(1, len(tree)) if tree.tokens[i] != 7]
    for at, nxt in zip(chain, [1, 2, 3, 4, 6]):
        logits[at, nxt] = 30.0
    return tree, logits


def test_a_step_copies_its_children_once_and_draws_its_uniforms_once(monkeypatch):
    tree, logits = _deep_certain_tree()
    calls = {"tensor": 0, "rand": 0}
    for name in calls:
        original = getattr(torch, name)

        def counted(*args, _name=name, _original=original, **kwargs):
            calls[_name] += 1
            return _original(*args, **kwargs)

        monkeypatch.setattr(torch, name, counted)
    path, bonus = TreeSampler(SamplingParams(0.8, seed=0))(tree, logits)
    assert len(path) == 5 and bonus == 6  # five nodes visited
    assert calls == {"tensor": 1, "rand": 1}
