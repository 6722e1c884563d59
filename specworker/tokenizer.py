"""ByteTokenizer: the built-in models' byte-level vocabulary (UTF-8 bytes 0..255, then BOS, EOS, PAD).
Owns text <-> ids only; special-token policy (prepending BOS, stopping at EOS) belongs to its callers.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["BOS_TOKEN_ID", "ByteTokenizer", "EOS_TOKEN_ID", "NUM_BYTES", "PAD_TOKEN_ID", "VOCAB_SIZE"]

NUM_BYTES = 256
BOS_TOKEN_ID = 256
EOS_TOKEN_ID = 257
PAD_TOKEN_ID = 258
VOCAB_SIZE = 259


class ByteTokenizer:
    """UTF-8 bytes as token ids. decode() skips special ids and replaces invalid UTF-8 (a partial
    multi-byte character at the end of a generation) with U+FFFD rather than raising."""

    vocab_size = VOCAB_SIZE
    bos_token_id = BOS_TOKEN_ID
    eos_token_id = EOS_TOKEN_ID
    pad_token_id = PAD_TOKEN_ID
    chat_template = None  # the byte-level models are plain completion models

    def apply_chat_template(self, messages, *, add_generation_prompt: bool = True) -> str:
        raise ValueError("the built-in byte-level models have no chat template; allowed: plain prompts, or a "
                         "checkpoint whose tokenizer_config.json has a chat_template")

    def encode(self, text: str, *, add_bos: bool = True) -> list[int]:
        """text -> [BOS] + its UTF-8 bytes. Raises TypeError for a non-str."""
        if not isinstance(text, str):
            raise TypeError(f"ByteTokenizer.encode: text is a {type(text).__name__}; allowed: a str")
        ids = list(text.encode("utf-8"))
        return [BOS_TOKEN_ID] + ids if add_bos else ids

    def decode(self, token_ids: Iterable[int]) -> str:
        """ids -> text; special ids are dropped. Raises ValueError for an id outside 0..VOCAB_SIZE - 1."""
        data = bytearray()
        for i, t in enumerate(token_ids):
            t = int(t)
            if not 0 <= t < VOCAB_SIZE:
                raise ValueError(f"ByteTokenizer.decode: token_ids[{i}] = {t}; allowed: 0..{VOCAB_SIZE - 1}")
            if t < NUM_BYTES:
                data.append(t)
        return data.decode("utf-8", errors="replace")
