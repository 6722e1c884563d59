"""rebuild_padding tests written once for both backends: tests/ops (the Paddle op) and tests/gpu (the
CUDA kernel) import the test_* functions below and define the fixtures they take:

- run(tmp_out, lens, dec, enc, batch_ids=None, cu_out=None, first=None, enable_logprob=False,
  dtype="float32") -> (out, first_token_out after the call) as numpy, cu_seqlens_q built from lens;
- hidden_rows(rng, shape, dtype) -> tmp_out-like rows that the backend's run takes for dtype and
  that compare exactly after a copy (CPU: quarter-integers, GPU: random bits);
- refuses(call, match, zero_rows=None, unlike=None): checks the backend's answer to an invalid
  output index (CPU: ValueError matching `match`; GPU: a refused launch, or `zero_rows` zeroed).
"""

from __future__ import annotations

import numpy as np
import pytest

from reference.cases.step_batch import all_cases, make_step_batch, pack_output_index, seq_lens_output
from reference.rebuild_padding import ref_rebuild_padding

DTYPES = ["float32", "float16", "bfloat16"]
NUM_DRAFT = 3  # make_step_batch's default: D = 4 query tokens per decode slot at most

# Five packed rows, H = 2: row t is [10 t, 10 t + 1], so every expected row names its source.
TMP_OUT = np.array([[0, 1], [10, 11], [20, 21], [30, 31], [40, 41]], dtype=np.float32)


def cu_seqlens(lens) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)


@pytest.mark.parametrize("with_index", [False, True], ids=["per_slot", "output_index"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bsz, kind, seed", all_cases())
def test_rebuild_padding_matches_reference(run, hidden_rows, bsz, kind, seed, dtype, with_index):
    rng = np.random.default_rng(seed)
    batch = make_step_batch(rng, bsz, kind, num_draft=NUM_DRAFT)
    tmp_out = hidden_rows(rng, (batch.token_num, 8), dtype)
    batch_ids = cu_out = None
    if with_index:
        capacity = bsz * (NUM_DRAFT + 1)  # docs/spec.md §4.3: N * D rows, >= T_out
        out_lens = seq_lens_output(batch.seq_lens_this_time, batch.seq_lens_encoder)
        batch_ids, cu_out = pack_output_index(out_lens, capacity)
    first = hidden_rows(np.random.default_rng(0), (bsz, 8), dtype)
    args = (batch.seq_lens_this_time, batch.seq_lens_decoder, batch.seq_lens_encoder)
    out, first_after = run(tmp_out, *args, batch_ids, cu_out, first, True, dtype)
    want, want_first = ref_rebuild_padding(tmp_out, cu_seqlens(batch.seq_lens_this_time), *args, batch_ids, cu_out,
                                           first, True)
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(first_after, want_first)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("with_index", [False, True], ids=["per_slot", "output_index"])
def test_rebuild_padding_zero_tokens(run, hidden_rows, with_index, dtype):
    """T = 0 (every slot idle): a valid all-zero output (capacity > T_out = 0 rows with the output
    index), not an error or an invalid launch."""
    index = (np.full(8, -1, np.int32), np.zeros(4, np.int32)) if with_index else (None, None)
    tmp_out = hidden_rows(np.random.default_rng(0), (0, 16), dtype)
    out, _ = run(tmp_out, [0, 0, 0], [5, 0, 2], [0, 0, 0], *index, dtype=dtype)
    np.testing.assert_array_equal(out, np.zeros((8 if with_index else 3, 16)))


def test_rebuild_padding_decode_rows_use_local_index(run):
    """FastDeploy's CPU rebuild_padding (docs/spec.md §8.5) computes each output row's slot but reads
    cu_seqlens_q[b] + seq_id without the row's local index, so every decode row of a slot gets the
    slot's first query token. Two multi-token decode slots make that visible: ours must return
    rows 0, 1, 2 for slot 0 and 3, 4 for slot 1, not 0, 0, 0, 3, 3."""
    lens, dec, enc = [3, 2], [9, 9], [0, 0]
    batch_ids, cu_out = pack_output_index(seq_lens_output(lens, enc))
    out, _ = run(TMP_OUT, lens, dec, enc, batch_ids=batch_ids, cu_out=cu_out)
    np.testing.assert_array_equal(out, TMP_OUT)


@pytest.mark.parametrize("given", ["batch_id_per_token_output", "cu_seqlens_q_output"])
def test_rebuild_padding_rejects_unpaired_output_index(run, refuses, given):
    """docs/spec.md §7 defect 5: the seed's rebuild_padding dereferenced cu_seqlens_q_output.get_ptr()
    whenever batch_id_per_token_output was given, so passing only one of the pair read through a
    null pointer. Giving either one alone must be refused, in both directions."""
    batch_ids, cu_out = [0, 0, 0, 1, -1, -1], [0, 3, 4, 4]
    kwargs = {"batch_ids": batch_ids} if given == "batch_id_per_token_output" else {"cu_out": cu_out}
    refuses(lambda: run(TMP_OUT, lens=[3, 2, 0], dec=[6, 0, 0], enc=[0, 2, 0], **kwargs),
            f"must be given together.*{given}=given")


def _seed_padding_offsets(seq_lens_out, max_seq_len):
    """The WRONG fixture of the seed's tests: FastDeploy [A]'s output padding offset of each row,
    output_cum_offsets[b] = sum_{j<b} (S - O_j), stored under the name batch_id_per_token_output."""
    offsets, cum = [], 0
    for o in seq_lens_out:
        offsets += [cum] * int(o)
        cum += max_seq_len - int(o)
    return np.array(offsets, dtype=np.int32)


def test_rebuild_padding_fails_with_padding_offsets_as_batch_ids(run, refuses):
    """docs/spec.md §7 defect 8: the seed's test stored padding offsets (cumulative S - O_b) under the name
    batch_id_per_token_output, and its reference repeated the old semantics, so the test agreed with
    whatever the kernel did. Slots beyond 0 get offsets that are not slot ids ([0, 0, 2, 5, 5, 5]
    here: row 2 claims slot 2, rows 3..5 slot 5 of 3), so the op must not return the expected rows
    (the CPU op raises; the kernel, which cannot, returns those rows as zeros)."""
    lens, dec, enc = [2, 1, 3], [4, 4, 4], [0, 0, 0]  # all decode: O = L = [2, 1, 3]
    tmp_out = np.arange(6 * 2, dtype=np.float32).reshape(6, 2)
    batch_ids, cu_out = pack_output_index(seq_lens_output(lens, enc))
    expected, _ = ref_rebuild_padding(tmp_out, cu_seqlens(lens), lens, dec, enc, batch_ids, cu_out)
    out, _ = run(tmp_out, lens, dec, enc, batch_ids=batch_ids, cu_out=cu_out)
    np.testing.assert_array_equal(out, expected)  # positive control: the right fixture passes
    offsets = _seed_padding_offsets(seq_lens_output(lens, enc), max_seq_len=4)
    np.testing.assert_array_equal(offsets, [0, 0, 2, 5, 5, 5])
    refuses(lambda: run(tmp_out, lens, dec, enc, batch_ids=offsets, cu_out=cu_out),
            r"output row 2 has batch id 2 but slot 2's rows are .* = \[3, 6\)", zero_rows=slice(2, None),
            unlike=expected)
