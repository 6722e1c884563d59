import numpy as np
import pytest

from tests.gpu.harness import launcher, ptr, require_gpu, stream
from reference.speculate_get_seq_lens_output import ref_speculate_get_seq_lens_output
from tests.seq_lens_output_cases import (  # noqa: F401  written once, also run on the Paddle op
    test_speculate_get_seq_lens_output_matches_reference,
    test_speculate_get_seq_lens_output_three_slots_literal,
    test_speculate_get_seq_lens_output_zero_slots,
)

cp = require_gpu()
launch = launcher("specworker_speculate_get_seq_lens_output_launch")

CANARY = -7
GUARD = 64


def run_kernel(lens, encoder):
    """Runs the kernel; checks the GUARD entries past the output stayed untouched."""
    d_lens, d_enc = cp.asarray(np.asarray(lens, np.int32)), cp.asarray(np.asarray(encoder, np.int32))
    bsz = d_lens.shape[0]
    d_out = cp.full(bsz + GUARD, CANARY, dtype=cp.int32)
    launch(ptr(d_lens), ptr(d_enc), bsz, ptr(d_out), stream())
    out = cp.asnumpy(d_out)
    assert (out[bsz:] == CANARY).all(), "seq_lens_output written past its end"
    return out[:bsz]


@pytest.fixture
def run():
    """The backend of the shared tests (tests/seq_lens_output_cases.py): the kernel (decoder is unused)."""
    return lambda lens, encoder, decoder: run_kernel(lens, encoder)


def test_speculate_get_seq_lens_output_cuda_negative_length_gets_no_rows():
    """The CPU op raises for L_b < 0; the kernel cannot, and gives the slot 0 rows."""
    np.testing.assert_array_equal(run_kernel([-2, 3, -1], [0, 0, 4]), [0, 3, 0])


def test_speculate_get_seq_lens_output_cuda_rejects_negative_bsz():
    d = cp.zeros(2, dtype=cp.int32)
    with pytest.raises(RuntimeError, match="returned cudaError 1$"):  # cudaErrorInvalidValue
        launch(ptr(d), ptr(d), -1, ptr(d), stream())


@pytest.mark.parametrize("bsz", [1, 255, 256, 257, 5000, 300_000])
def test_speculate_get_seq_lens_output_cuda_any_bsz(bsz):
    """300_000 slots exceed the 1024 x 256 threads of the grid: the grid-stride loop must cover them."""
    rng = np.random.default_rng(bsz)
    lens = rng.integers(0, 6, size=bsz).astype(np.int32)
    encoder = np.where(rng.random(bsz) < 0.3, lens, 0).astype(np.int32)
    want = ref_speculate_get_seq_lens_output(lens, encoder, np.zeros(bsz, np.int32))
    np.testing.assert_array_equal(run_kernel(lens, encoder), want)
