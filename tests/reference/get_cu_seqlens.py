"""numpy reference for get_cu_seqlens (docs/spec.md §1: every cu_* is an exclusive prefix sum, cu[0] = 0)."""

import numpy as np


def ref_get_cu_seqlens(seq_lens: np.ndarray) -> np.ndarray:
    lens = np.asarray(seq_lens).reshape(-1)
    cu = np.zeros(lens.shape[0] + 1, dtype=np.int32)
    for b, n in enumerate(lens):
        cu[b + 1] = cu[b] + max(int(n), 0)
    return cu
