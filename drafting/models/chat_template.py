"""Turn prompt text or a conversation into token ids: the chat template by default, raw text on request."""

from __future__ import annotations


def encode(tokenizer, messages: list[dict], raw: bool = False) -> list[int]:
    """``messages`` are chat turns ({"role", "content"}); raw mode joins their contents as plain text."""
    if raw or not getattr(tokenizer, "chat_template", None):
        text = "\n".join(m["content"] for m in messages)
        return list(tokenizer(text, add_special_tokens=True)["input_ids"])
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True)
    ids = ids["input_ids"]
    return [int(t) for t in (ids.tolist() if hasattr(ids, "tolist") else ids)]


def decode(tokenizer, ids: list[int], eos_ids: set[int] = frozenset()) -> str:
    return tokenizer.decode([t for t in ids if t not in eos_ids], skip_special_tokens=True)
