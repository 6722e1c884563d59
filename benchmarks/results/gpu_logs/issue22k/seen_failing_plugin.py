"""pytest plugin for seen_failing.py: routes the bf16 paged-attention launcher to the library named by
SEEN_FAILING_LIB (the test looks the launcher up through kernel_harness.launchers.raw_launcher at each call)."""
import ctypes
import os

import kernel_harness.launchers as launchers

NAME = "specworker_paged_attention_bf16_launch"
_variant = getattr(ctypes.CDLL(os.environ["SEEN_FAILING_LIB"]), NAME)
_variant.argtypes, _variant.restype = list(launchers.SIGNATURES[NAME]), ctypes.c_int
_own = launchers.raw_launcher
launchers.raw_launcher = lambda name: _variant if name == NAME else _own(name)
