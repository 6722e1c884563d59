import ctypes

import numpy as np
import pytest

from tests.gpu.harness import launcher, ptr, require_gpu, stream
from tests.reference.get_cu_seqlens import ref_get_cu_seqlens

cp = require_gpu()
launch = launcher("specworker_get_cu_seqlens_launch", [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p])


@pytest.mark.parametrize("bsz", [0, 1, 3, 17, 255, 256, 257, 1024, 5000])
def test_get_cu_seqlens_cuda_matches_reference(bsz):
    rng = np.random.default_rng(bsz)
    lens = rng.integers(0, 300, size=bsz).astype(np.int32)
    lens[rng.random(bsz) < 0.3] = 0
    d_lens = cp.asarray(lens)
    d_cu = cp.full(bsz + 1, -7, dtype=cp.int32)
    launch(ptr(d_lens), bsz, ptr(d_cu), stream())
    np.testing.assert_array_equal(cp.asnumpy(d_cu), ref_get_cu_seqlens(lens))
