"""The adaptive policy's compiled host arithmetic: per-step counting, E by K, the drain objective and the population's
spread (custom_ops/cpu_ops/kernels/speculation_policy.cc, in the ops library), called through ctypes on the policy's
own numpy arrays.

Why: inside a running worker a numpy call costs ~3-5 us (the model's step leaves the caches cold), and the policy made
~8 a step and ~60-80 a drain decision; one ctypes call with the addresses kept costs ~2-9 us there (docs/adaptive.md,
"Cost of the choice itself"). The state arrays are registered once (their addresses are kept: the policy never replaces
them, only writes into them); an array passed per call is checked (dtype, shape, contiguity) before C reads it, or
copied into a fixed buffer (count's step arrays).
"""

from __future__ import annotations

import ctypes
import functools

import numpy as np

from specworker.model_executor import op_build
from specworker.model_executor.ops._extension import load_ops

__all__ = ["MAX_K", "PolicyHost"]

MAX_K = 64  # kMaxK of the C file

_F, _I, _B = np.dtype(np.float64), np.dtype(np.int64), np.dtype(np.bool_)
_P = ctypes.c_void_p
_I64 = ctypes.c_int64
_F64 = ctypes.c_double


class _State(ctypes.Structure):
    """PolicyState of the C file: sizes and the state arrays' addresses."""

    _fields_ = [("num_slots", _I64), ("k_max", _I64)] + [(name, _P) for name in (
        "slot_counts", "slot_raw", "totals", "first_totals", "k_totals", "k_shift", "carry", "fill", "scalars",
        "allowed", "prev_allowed", "cap", "fresh")]


@functools.cache
def _library() -> ctypes.CDLL:
    """The ops library (registered with Paddle first: the same build checks) with the policy's C API typed."""
    load_ops()
    lib = ctypes.CDLL(str(op_build.LIBRARY))
    lib.specworker_policy_count.argtypes = [_P, _P, _P, _F64, _F64, _I64]
    lib.specworker_policy_expected.argtypes = [_P, _I64, _I64, _P, _P, _P]
    lib.specworker_policy_drain.argtypes = [_P, _P, _P, _P, _P, _P, _P, _P, _F64, _I64, _P]
    lib.specworker_policy_spread.argtypes = [_P, _P, _I64, _P]
    for f in (lib.specworker_policy_count, lib.specworker_policy_expected, lib.specworker_policy_drain,
              lib.specworker_policy_spread):
        f.restype = ctypes.c_int
    return lib


_KINDS = {_I: "iub", _F: "fiub", _B: "b"}  # what converts losslessly


def _checked(array, dtype: np.dtype, shape: tuple[int, ...], name: str) -> np.ndarray:
    """`array` as a C-contiguous `dtype` array of `shape` (converted from an integer / bool array where dtype
    allows, else ValueError naming it): C reads exactly that many elements from it."""
    if (type(array) is np.ndarray and (array.dtype is dtype or array.dtype == dtype) and array.shape == shape
            and array.flags.c_contiguous):
        return array  # the common case, in a few attribute reads (an unpickled array's dtype is equal, not the same)
    got = np.asarray(array) if isinstance(array, (np.ndarray, list, tuple)) else None
    if got is None or got.shape != shape or got.dtype.kind not in _KINDS[dtype]:
        what = type(array).__name__ if got is None else f"{got.dtype}{list(got.shape)}"
        raise ValueError(f"policy arithmetic: {name} must be a {dtype}{list(shape)} array, got {what}")
    return np.ascontiguousarray(got, dtype=dtype)


def _at(array: np.ndarray) -> int:
    return array.__array_interface__["data"][0]


class PolicyHost:
    """The C functions over one AdaptivePolicy's state arrays (shapes in the C file's header)."""

    def __init__(self, *, slot_counts: np.ndarray, slot_raw: np.ndarray, totals: np.ndarray,
                 first_totals: np.ndarray, k_totals: np.ndarray, k_shift: np.ndarray, carry: np.ndarray,
                 fill: np.ndarray, scalars: np.ndarray, allowed: np.ndarray, prev_allowed: np.ndarray,
                 cap: np.ndarray, fresh: np.ndarray):
        n, k = allowed.shape[0], totals.shape[-1]
        if not 1 <= k <= MAX_K:
            raise ValueError(f"policy arithmetic: k_max = {k}; allowed: 1..{MAX_K}")
        self.num_slots, self.k_max = n, k
        shapes = {"slot_counts": (_F, (2, n, k)), "slot_raw": (_F, (2, n, k)), "totals": (_F, (2, k)),
                  "first_totals": (_F, (2, k)), "k_totals": (_F, (2, k, k)), "k_shift": (_F, (k, k)),
                  "carry": (_F, (5,)), "fill": (_F, (2, k)), "scalars": (_F, (1,)), "allowed": (_I, (n,)),
                  "prev_allowed": (_I, (n,)), "cap": (_I, (n,)), "fresh": (_B, (n,))}
        arrays = dict(slot_counts=slot_counts, slot_raw=slot_raw, totals=totals, first_totals=first_totals,
                      k_totals=k_totals, k_shift=k_shift, carry=carry, fill=fill, scalars=scalars, allowed=allowed,
                      prev_allowed=prev_allowed, cap=cap, fresh=fresh)
        for name, array in arrays.items():  # written in place: a converted copy would not be the policy's array
            if _checked(array, *shapes[name], name) is not array or not array.flags.writeable:
                raise ValueError(f"policy arithmetic: state {name} must be a writeable C-contiguous "
                                 f"{shapes[name][0]}{list(shapes[name][1])} array")
        self._arrays = arrays  # kept alive (and never replaced) while C holds their addresses
        self.state = _State(n, k, *(_at(arrays[name]) for name, _ in _State._fields_[2:]))
        self._ref = ctypes.addressof(self.state)
        lib = _library()
        self._count, self._expected, self._drain, self._spread = (
            lib.specworker_policy_count, lib.specworker_policy_expected, lib.specworker_policy_drain,
            lib.specworker_policy_spread)
        # expected's outputs per sign (-1, 0, +1), valid until the next call with the same sign; and its parameters
        self._gain = {s: np.zeros((n, k + 1)) for s in (-1, 0, 1)}
        self._reach = {s: np.zeros((k + 1, n, k)) for s in (-1, 0, 1)}
        self._outputs = {s: (_at(self._gain[s]), _at(self._reach[s])) for s in (-1, 0, 1)}
        self._params = np.zeros(4)
        self._params_at = _at(self._params)
        # count's step arrays are copied here (one numpy call each): taking a new array's address costs ~10 us
        # inside the worker (__array_interface__ and the checks), a copy into a fixed buffer ~3 us
        self._drafted, self._emitted = np.zeros(n, np.int64), np.zeros(n, np.int64)
        self._step_at = (_at(self._drafted), _at(self._emitted))

    def __reduce__(self):
        """Copied or pickled with the arrays (a deep copy of the policy gives this the copied arrays, whose addresses
        the new state takes): never the old addresses."""
        return _rebuild, (self._arrays,)

    def count(self, drafted: np.ndarray, emitted: np.ndarray, decay: float, prior_weight: float, *, by_anchor: bool,
              count_fill: bool) -> bool:
        """One verify step counted (drafted, emitted: [N] integers); False when no slot was allowed or drafted a
        draft (only the decay is owed)."""
        for name, value, buffer in (("drafted", drafted, self._drafted), ("emitted", emitted, self._emitted)):
            try:
                np.copyto(buffer, value, casting="safe")
            except (TypeError, ValueError):
                _checked(value, _I, buffer.shape, name)  # raises, naming what it got
                raise
        return self._count(self._ref, *self._step_at, decay, prior_weight, int(by_anchor) | 2 * int(count_fill)) > 0

    def expected(self, sign: int, *, by_anchor: bool, prior_weight: float, k_prior_weight: float, confidence: float,
                 carry_prior: float) -> tuple[np.ndarray, np.ndarray]:
        """(gain [N, K + 1], reach [K + 1, N, K]): AdaptivePolicy.expected_by_k of its acceptance(), at prior_by_k
        (sign 0) or its optimistic / pessimistic bound (+1 / -1); the arrays are reused by the next call with that
        sign."""
        if sign not in self._outputs:
            raise ValueError(f"policy arithmetic: sign = {sign!r}; allowed: -1, 0, 1")
        self._params[:] = (prior_weight, k_prior_weight, confidence, carry_prior)
        _ok(self._expected(self._ref, sign, int(by_anchor), self._params_at, *self._outputs[sign]), "expected")
        return self._gain[sign], self._reach[sign]

    def drain(self, gain: np.ndarray, reach: np.ndarray, live: np.ndarray, remaining: np.ndarray,
              seconds: np.ndarray, spread: np.ndarray, scores: np.ndarray, prior_weight: float) -> np.ndarray:
        """[K + 1] D(K) (AdaptivePolicy.drain_seconds): gain, reach from expected; live [N] bool, B >= 1 of them
        set; remaining [N] integers; seconds [B, K + 1]; spread [K + 1]; scores [B]."""
        n, k = self.num_slots, self.k_max
        live = _checked(live, _B, (n,), "live")
        size = int(np.count_nonzero(live))
        if size < 1:
            raise ValueError("policy arithmetic: drain needs at least one live slot, got 0")
        arrays = (_checked(gain, _F, (n, k + 1), "gain"), _checked(reach, _F, (k + 1, n, k), "reach"), live,
                  _checked(remaining, _I, (n,), "remaining"), _checked(seconds, _F, (size, k + 1), "seconds"),
                  _checked(spread, _F, (k + 1,), "spread"), _checked(scores, _F, (size,), "scores"))
        out = np.empty(k + 1)
        _ok(self._drain(self._ref, *(_at(a) for a in arrays), prior_weight, size, _at(out)), "drain")
        return out

    def spread(self, profiles: np.ndarray, count: int) -> np.ndarray:
        """[K + 1] AdaptivePolicy.population_spread over the first `count` rows of profiles [W, 2, K] (each a
        finished request's reaches and successes), at the worker prior of the state's totals."""
        shape = np.shape(profiles) if isinstance(profiles, (np.ndarray, list, tuple)) else ()
        rows = shape[0] if len(shape) == 3 else 0
        profiles = _checked(profiles, _F, (rows, 2, self.k_max), "profiles")  # names W as the rows it got, or 0
        if type(count) is not int or not 0 <= count <= rows:
            raise ValueError(f"policy arithmetic: count = {count!r}; allowed: an int in 0..{rows} (the profiles' rows)")
        out = np.empty(self.k_max + 1)
        _ok(self._spread(self._ref, _at(profiles), count, _at(out)), "spread")
        return out


def _ok(status: int, name: str) -> None:
    """A C function's status: 0, or it refused its arguments (the checks above make that unreachable) and wrote
    nothing to read."""
    if status != 0:
        raise RuntimeError(f"policy arithmetic: specworker_policy_{name} refused its arguments (status {status})")


def _rebuild(arrays: dict) -> PolicyHost:
    return PolicyHost(**arrays)
