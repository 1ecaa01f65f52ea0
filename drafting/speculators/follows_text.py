"""What a speculator needs to draft from the text an answer is copying (drafting.sources.aligned): one pointer
per answer, started anew with each answer and fed every emitted token by the speculator."""

from __future__ import annotations

from drafting.sources.aligned import AlignedText


class FollowsText:
    """Mixin for a speculator with a boolean ``aligned`` setting: ``align(context)`` at each new answer (a prompt
    or a chat turn: everything before the answer is the text it may copy, earlier answers included)."""

    _aligned: AlignedText | None = None  # set by align()

    @property
    def aligned(self) -> AlignedText | None:
        """Where the answer stands in the text before it (None with aligned=off)."""
        return self._aligned

    def align(self, context: list[int]) -> None:
        self._aligned = AlignedText(context) if self.settings.aligned else None
