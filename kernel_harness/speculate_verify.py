"""ctypes call of specworker_speculate_verify_launch from a verify case, shared by the GPU tests and
benchmarks/gpu_verify.py. A case (tests/verify_cases.py: a dict of the op's keyword arguments) goes
to the device as CuPy arrays; the launcher gets their pointers, the sizes derived from their shapes
and the resolved modes."""

from __future__ import annotations

import numpy as np

from kernel_harness import launchers
from kernel_harness.build import ptr, stream

NAME = "specworker_speculate_verify_launch"
# Pointer arguments in the launcher's order (speculate_verify.h); None is passed as NULL.
POINTER_FIELDS = (
    "sampled_token_ids", "accept_tokens", "accept_num", "step_idx", "stop_flags", "seq_lens_encoder",
    "draft_tokens", "seq_lens_this_time", "verify_tokens", "verify_scores", "max_dec_len", "end_tokens",
    "is_block_step", "cu_seqlens_q_output", "actual_candidate_len", "topp", "target_probs", "draft_probs",
    "infer_seed", "reasoning_status",
)
OUT_FIELDS = ("accept_tokens", "accept_num", "step_idx", "stop_flags")
STRATEGIES = ("topp", "greedy", "target_match", "rejection")  # index = the launcher's enum
POLICIES = ("normal", "accept_all", "reject_all")


def resolve_modes(case: dict) -> tuple[int, int]:
    """(strategy, policy) as the launcher's ints: reject_all/benchmark_mode win over accept_all."""
    strategy = STRATEGIES.index(case.get("verify_strategy", "topp"))
    policy = case.get("accept_policy", "normal")
    if policy == "reject_all" or case.get("benchmark_mode", False):
        policy = "reject_all"
    elif policy == "accept_all" or case.get("accept_all_drafts", False):
        policy = "accept_all"
    return strategy, POLICIES.index(policy)


def raw_launcher():
    """The extern "C" launcher; returns the cudaError_t as int and does not synchronize."""
    return launchers.raw_launcher(NAME)


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
    launchers.launcher(NAME)(*launch_args(case, dev))
    return {f: cp.asnumpy(dev[f]) for f in OUT_FIELDS}
