"""Calls every registered op directly (the way ops/_extension.py runs it, no wrapper) with one
required input missing; run as a subprocess by tests/ops/test_op_arguments.py, so a segfault ends
this process, not pytest.

For each op (its input names and attribute types from Paddle's registry) and each required input,
two probes: the input passed as None (which reaches C++ as an undefined tensor), and as
paddle.Tensor() (an uninitialised tensor without storage); the other inputs are a dummy one-element tensor, optional ones None, attributes a value
of their type. Prints one JSON line when a probe starts and one with its outcome, flushed, so the
last "start" line names the probe that crashed the process.
"""

from __future__ import annotations

import json
import sys

import paddle
from paddle.base.framework import OpProtoHolder
from paddle.utils.cpp_extension.extension_utils import DEFAULT_OP_ATTR_NAMES, parse_op_info

from specworker.model_executor.ops import _extension

# Paddle's AttrType values of the attributes our ops register, and a dummy of each type.
ATTR_DUMMIES = {0: 1, 1: 1.0, 2: "", 6: False, 9: 1}  # INT, FLOAT, STRING, BOOLEAN, LONG
MISSING = {"none": lambda: None, "uninitialised_tensor": paddle.Tensor}


def op_signature(op: str) -> tuple[list[tuple[str, bool]], list]:
    """([(input name, required)], [attribute dummy]) in registration order."""
    inputs, _, _ = parse_op_info(op)
    proto = OpProtoHolder.instance().get_op_proto(op)
    attrs = [ATTR_DUMMIES[a.type] for a in proto.attrs if a.name not in DEFAULT_OP_ATTR_NAMES]
    return [(name.split("@")[0], "@OPTIONAL" not in name) for name in inputs], attrs


def emit(**record) -> None:
    print(json.dumps(record), flush=True)


def main() -> int:
    for op in sorted(_extension.load_ops()):
        inputs, attrs = op_signature(op)
        for index, (name, required) in enumerate(inputs):
            if not required:
                continue
            for kind, make in MISSING.items():
                args = [paddle.zeros([1], "int32") if req else None for _, req in inputs]
                args[index] = make()
                emit(event="start", op=op, arg=name, kind=kind)
                try:
                    _extension._run(op, *args, *attrs)
                    outcome = dict(raised=None, message="")
                except Exception as e:  # noqa: BLE001 - the probe reports whatever was raised
                    outcome = dict(raised=type(e).__name__, message=str(e))
                emit(event="done", op=op, arg=name, kind=kind, **outcome)
    emit(event="finished")
    return 0


if __name__ == "__main__":
    sys.exit(main())
