"""ctypes binding of specworker_speculate_verify_launch, shared by the GPU tests and
benchmarks/gpu_verify.py. A case (tests/verify_cases.py) goes to the device as CuPy arrays; the
launcher gets their pointers, the sizes derived from their shapes and the resolved modes."""

from __future__ import annotations

import ctypes

import numpy as np

from tests.gpu.harness import kernels_lib, ptr, stream
from tests.verify_cases import OUT_FIELDS, resolve_modes

# Pointer arguments in the launcher's order (speculate_verify.h); None is passed as NULL.
POINTER_FIELDS = (
    "sampled_token_ids", "accept_tokens", "accept_num", "step_idx", "stop_flags", "seq_lens_encoder",
    "draft_tokens", "seq_lens_this_time", "verify_tokens", "verify_scores", "max_dec_len", "end_tokens",
    "is_block_step", "cu_seqlens_q_output", "actual_candidate_len", "topp", "target_probs", "draft_probs",
    "infer_seed", "reasoning_status",
)
# bsz, max_draft_tokens, num_rows, max_candidate_len, vocab_size, num_end_tokens, verify_window,
# verify_strategy, accept_policy, enable_topp
NUM_INT_ARGS = 10
ARGTYPES = [ctypes.c_void_p] * len(POINTER_FIELDS) + [ctypes.c_int] * NUM_INT_ARGS + [ctypes.c_void_p]


def raw_launcher():
    """The extern "C" launcher; returns the cudaError_t as int and does not synchronize."""
    fn = kernels_lib().specworker_speculate_verify_launch
    fn.argtypes = ARGTYPES
    fn.restype = ctypes.c_int
    return fn


def to_device(cp, case: dict) -> dict:
    return {k: cp.asarray(np.ascontiguousarray(case[k])) for k in POINTER_FIELDS if case.get(k) is not None}


def launch_args(case: dict, dev: dict) -> list:
    strategy, policy = resolve_modes(case)
    vocab = 0 if case.get("target_probs") is None else case["target_probs"].shape[1]
    sizes = [
        case["seq_lens_this_time"].shape[0], case["accept_tokens"].shape[1], case["sampled_token_ids"].shape[0],
        case["verify_tokens"].shape[1], vocab, case["end_tokens"].shape[0], case["verify_window"], strategy,
        policy, int(case["enable_topp"]),
    ]
    return [ptr(dev.get(k)) for k in POINTER_FIELDS] + sizes + [stream()]


def run_verify_cuda(cp, case: dict) -> dict:
    """Launches on the current stream, waits, returns the four updated arrays as numpy."""
    dev = to_device(cp, case)
    err = raw_launcher()(*launch_args(case, dev))
    if err != 0:
        raise RuntimeError(f"specworker_speculate_verify_launch returned cudaError {err}")
    cp.cuda.get_current_stream().synchronize()
    return {f: cp.asnumpy(dev[f]) for f in OUT_FIELDS}
