"""Deterministic stand-ins for the target model and the MTP draft model of the composed round
test (tests/mtp_round.py), plus the greedy sequence the target emits on its own. Plain numpy.

The target is a causal hash chain: state_p = chain(state_{p-1}, token_p) with its own KV cache
of chain states per (slot, position), and its greedy next token is greedy_next(state_p). So the
logits of a position depend on the whole prefix as cached at the positions seq_lens_decoder
says, and a wrong Dec, token or cache row changes the output.

A hidden row is float32 [slot, position, token, state, offset] (all integers < 2^24, exact):
the state through `position` (the target's state after the token at `position`). The draft
model continues the chain from the hidden row it is handed, so it predicts the target's greedy
token exactly, unless `offset` (its deliberate error, drawn per (slot, position, round)) is
nonzero. Rows that belong to no token are GARBAGE, so any op reading one shows.
"""

from __future__ import annotations

import numpy as np

SLOT, POS, TOKEN, STATE, OFFSET = range(5)
HIDDEN_SIZE = 5
GARBAGE = -7.0  # hidden rows past the packed tokens (a padded forward computes junk there)
ROOT_STATE = 1  # the chain state before the first token
_MOD = 16777213  # prime below 2^24: every state is exact in float32


def chain(state: int, token: int) -> int:
    """The target's state after appending `token` to a prefix whose state is `state`."""
    return (int(state) * 48271 + int(token) * 69621 + 11) % _MOD


def greedy_next(state: int, vocab: int) -> int:
    """The target's greedy (argmax) token after a prefix with this state."""
    return ((int(state) * 2654435761) % (1 << 32) >> 11) % vocab


def greedy_reference(prompt, max_dec_len: int, vocab: int, end_tokens) -> list[int]:
    """Tokens the target alone emits, token by token: greedy, stopped by an end token or at
    max_dec_len (a length stop on another token emits end_tokens[0], as verification does)."""
    ends = [int(e) for e in end_tokens]
    state = ROOT_STATE
    for tok in prompt:
        state = chain(state, tok)
    out = []
    while True:
        tok = greedy_next(state, vocab)
        if tok in ends or len(out) + 1 >= max_dec_len:
            out.append(tok if tok in ends else ends[0])
            return out
        out.append(tok)
        state = chain(state, tok)


class FakeTarget:
    """Target forward over a packed batch, with a KV cache of chain states."""

    def __init__(self, num_slots: int, max_len: int, vocab: int):
        self.kv = np.zeros((num_slots, max_len), np.int64)
        self.vocab = vocab

    def forward(self, ids, batch_id, cu_seqlens_q, seq_lens_decoder) -> np.ndarray:
        """[token_num, H] hidden rows; token t of slot b sits at position Dec_b + (t - cu_q[b])."""
        hidden = np.full((ids.shape[0], HIDDEN_SIZE), GARBAGE, np.float32)
        for t in np.flatnonzero(batch_id >= 0):
            b = int(batch_id[t])
            pos = int(seq_lens_decoder[b]) + t - int(cu_seqlens_q[b])
            state = chain(self.kv[b, pos - 1] if pos > 0 else ROOT_STATE, ids[t])
            self.kv[b, pos] = state
            hidden[t] = (b, pos, ids[t], state, 0)
        return hidden

    def logits(self, rows: np.ndarray) -> np.ndarray:
        """lm_head: [rows, V], a clear maximum at the greedy token; all-zero rows (no token) stay 0."""
        out = np.zeros((rows.shape[0], self.vocab), np.float32)
        for r in np.flatnonzero(rows.any(axis=1)):
            state = int(rows[r, STATE])
            out[r] = (np.arange(self.vocab) * 7 + state) % 13 / 26.0  # < 0.5: below the peak
            out[r, greedy_next(state, self.vocab)] = 1.0
        return out


def _miss(seed: int, slot: int, position: int, round_: int, rate: float) -> bool:
    h = (seed * 1000003 + slot * 7919 + position * 104729 + round_ * 1299709) % (1 << 31)
    return ((h * 2654435761) % (1 << 32)) / float(1 << 32) < rate


class FakeDraft:
    """MTP module: continues the target's chain from the hidden row paired with each input token
    (token at draft position p is target token p + 1, paired with target hidden p), so it proposes
    the target's greedy token except where it errs on purpose (`miss_rate`)."""

    def __init__(self, vocab: int, seed: int, miss_rate: float):
        self.vocab, self.seed, self.miss_rate = vocab, seed, miss_rate

    def forward(self, ids, batch_id, cu_seqlens_q, seq_lens_decoder, prev_hidden, round_: int) -> np.ndarray:
        """prev_hidden[t]: the hidden row paired with packed token t. Row t of the result is the
        state through position p + 1 (p = Dec_b + local index), with the error it will make."""
        hidden = np.full((ids.shape[0], HIDDEN_SIZE), GARBAGE, np.float32)
        for t in np.flatnonzero(batch_id >= 0):
            b = int(batch_id[t])
            pos = int(seq_lens_decoder[b]) + t - int(cu_seqlens_q[b]) + 1
            state = chain(int(prev_hidden[t, STATE]), ids[t])
            offset = 1 + (pos + b) % (self.vocab - 1) if _miss(self.seed, b, pos, round_, self.miss_rate) else 0
            hidden[t] = (b, pos, ids[t], state, offset)
        return hidden

    def sample(self, rows: np.ndarray) -> np.ndarray:
        """Shared lm_head + greedy sampling, shifted by the row's offset: [rows] int64 (a zero row
        gives a token too, as a real head would)."""
        return np.array([(greedy_next(int(r[STATE]), self.vocab) + int(r[OFFSET])) % self.vocab for r in rows],
                        np.int64)
