"""Plain decoding: one token per forward pass. The reference every other speculator must reproduce."""

from drafting.engine.tree import Draft, DraftTree
from drafting.engine.speculator import Speculator


class PlainDecoding(Speculator):
    name = "ar"
    order = 10
    summary_line = "plain greedy / sampled decoding, the reference"

    def propose(self, context: list[int]) -> Draft:
        return Draft(tree=DraftTree(context[-1]))
