"""Token ids to text as they stream in, decoding only a short window per token instead of the whole answer.

Decoding a token alone is wrong for many tokenizers (a SentencePiece word piece loses its leading space, a
byte-level token may hold half a UTF-8 character), so each new piece is read as the difference between two
decodes that start at the same earlier token: the text of the window before the new tokens and the text with
them. A piece that ends mid-character (the replacement character U+FFFD) is held back until it completes.
"""

from __future__ import annotations

REPLACEMENT = "\ufffd"


class Detokenizer:
    """Turns a stream of token ids into text pieces; ``text`` is everything returned so far."""

    def __init__(self, tokenizer, skip_ids=frozenset()):
        self.tokenizer = tokenizer
        self.skip = set(skip_ids)
        self.ids: list[int] = []
        self.text = ""
        self._prefix = 0  # window start: decodes begin here so the first new token keeps its context
        self._read = 0  # tokens before this one have been returned as text

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)

    def push(self, token: int) -> str:
        """The text the token adds (may be empty while a character is incomplete)."""
        if token in self.skip:
            return ""
        self.ids.append(int(token))
        before = self._decode(self.ids[self._prefix : self._read])
        after = self._decode(self.ids[self._prefix :])
        if len(after) <= len(before) or after.endswith(REPLACEMENT):
            return ""
        piece = after[len(before):]
        self._prefix, self._read = self._read, len(self.ids)
        self.text += piece
        return piece

    def flush(self) -> str:
        """Whatever is still held back (an incomplete character at the very end), as the tokenizer renders it."""
        if self._read == len(self.ids):
            return ""
        before = self._decode(self.ids[self._prefix : self._read])
        piece = self._decode(self.ids[self._prefix :])[len(before):]
        self._prefix = self._read = len(self.ids)
        self.text += piece
        return piece
