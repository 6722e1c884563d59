"""pytest plugin for seen_failing.py: routes the bf16 linear launchers to the library named by SEEN_FAILING_LIB
(the test module binds them at import through kernel_harness's raw_launcher, which this plugin replaces first)."""
import ctypes
import os

import kernel_harness
import kernel_harness.launchers as launchers

NAMES = ("specworker_batch_invariant_linear_bf16_launch", "specworker_batch_invariant_linear_bf16_tile_launch")
_lib = ctypes.CDLL(os.environ["SEEN_FAILING_LIB"])
_variants = {}
for _name in NAMES:
    _variants[_name] = getattr(_lib, _name)
    _variants[_name].argtypes, _variants[_name].restype = list(launchers.SIGNATURES[_name]), ctypes.c_int
_own = launchers.raw_launcher


def _raw_launcher(name):
    return _variants[name] if name in _variants else _own(name)


launchers.raw_launcher = _raw_launcher
kernel_harness.raw_launcher = _raw_launcher
