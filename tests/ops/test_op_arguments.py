"""Argument checks common to every op wrapper and every registered C++ op (issue 16, item 6).

The cases are generated from the wrappers' signatures (`paddle.Tensor` parameters are required,
`paddle.Tensor | None` optional) and from Paddle's registry of the compiled ops, so a new op is
covered without editing this file. Regression: a required tensor passed as None killed the
process with SIGSEGV (the C++ read an uninitialised tensor), a numpy array gave Paddle's error
without the argument's name, and nothing checked that all tensors share one place.
"""

from __future__ import annotations

import inspect
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import paddle
import pytest

from specworker.model_executor import ops
from specworker.model_executor.ops import _extension

REPO = Path(__file__).resolve().parents[2]
WRAPPERS = {name: getattr(ops, name) for name in ops.__all__ if hasattr(getattr(ops, name), "tensor_params")}
REQUIRED = [(op, arg) for op, w in WRAPPERS.items() for arg, required in w.tensor_params.items() if required]
OPTIONAL = [(op, arg) for op, w in WRAPPERS.items() for arg, required in w.tensor_params.items() if not required]
# Inputs the C++ op requires but the wrapper fills when given None (a FastDeploy form without them).
FILLED = [(op, arg) for op, w in WRAPPERS.items() for arg in getattr(w, "filled_when_none", ())]
MULTI_TENSOR = [(op, arg) for op, w in WRAPPERS.items() if len(w.tensor_params) > 1 for arg in w.tensor_params]
HOST_DUMMIES = {"int": 1, "bool": False, "float": 1.0, "str": "x"}


def _call_args(op: str, **overrides) -> dict:
    """Keyword arguments binding every parameter of the wrapper: each tensor a one-element int32
    tensor, each host parameter without a default a dummy of its annotated type. The checks run
    before the wrapper's body, so the values never reach an op."""
    kwargs = {}
    for name, param in inspect.signature(WRAPPERS[op]).parameters.items():
        if name in WRAPPERS[op].tensor_params:
            kwargs[name] = paddle.zeros([1], "int32")
        elif param.default is inspect.Parameter.empty:
            kwargs[name] = HOST_DUMMIES[str(param.annotation).split(" ")[0]]
    kwargs.update(overrides)
    return kwargs


def test_every_registered_op_has_a_checked_wrapper():
    """Each registered op has one checked wrapper named after it whose tensor parameters are the
    C++ op's inputs: same names, same order, same required/optional split. So the cases above,
    generated from the wrappers, cover every op and every input."""
    from paddle.utils.cpp_extension.extension_utils import parse_op_info

    registered = _extension.load_ops()
    assert set(WRAPPERS) == set(registered)
    for op, wrapper in WRAPPERS.items():
        assert wrapper.op_name == op
        inputs, _, _ = parse_op_info(op)
        cpp = [(name.split("@")[0], "@OPTIONAL" not in name and (op, name.split("@")[0]) not in FILLED)
               for name in inputs]
        assert list(wrapper.tensor_params.items()) == cpp, op


@pytest.mark.parametrize("op, arg", REQUIRED)
def test_op_wrapper_rejects_none_for_a_required_tensor(op, arg):
    with pytest.raises(TypeError, match=rf"^{op}: {arg} must be a paddle\.Tensor, got None$"):
        WRAPPERS[op](**_call_args(op, **{arg: None}))


@pytest.mark.parametrize("op, arg", REQUIRED + OPTIONAL)
def test_op_wrapper_rejects_a_numpy_array(op, arg):
    what = "a paddle.Tensor" if (op, arg) in REQUIRED else "a paddle.Tensor or None"
    with pytest.raises(TypeError, match=rf"^{op}: {arg} must be {re.escape(what)}, got numpy\.ndarray$"):
        WRAPPERS[op](**_call_args(op, **{arg: np.zeros(1, np.int32)}))


@pytest.mark.parametrize("op, arg", REQUIRED + OPTIONAL)
def test_op_wrapper_rejects_a_python_list(op, arg):
    with pytest.raises(TypeError, match=rf"^{op}: {arg} must be a paddle\.Tensor.*, got builtins\.list$"):
        WRAPPERS[op](**_call_args(op, **{arg: [0]}))


@pytest.mark.parametrize("op, arg", MULTI_TENSOR)
def test_op_wrapper_rejects_a_tensor_on_another_place(op, arg, monkeypatch):
    """Every tensor input must be on one place. A CPU-only Paddle has a single place (pinned
    memory needs CUDA), so the tensor `arg` reports another one through the wrapper's place
    accessor; on a GPU machine a CPU tensor among GPU ones takes the same path."""
    odd = paddle.zeros([1], "int32")
    monkeypatch.setattr(_extension, "_place_of", lambda t: "Place(gpu:0)" if t is odd else t.place)
    with pytest.raises(ValueError, match=rf"^{op}: .*\b{arg}\b.* on Place\(gpu:0\).*one device"):
        WRAPPERS[op](**_call_args(op, **{arg: odd}))


def test_op_wrapper_accepts_none_for_optional_tensors():
    """The check does not turn an optional input into a required one (a real call)."""
    out = ops.batch_invariant_linear(paddle.ones([1, 2]), paddle.ones([2, 3]), None)
    np.testing.assert_array_equal(out.numpy(), [[2, 2, 2]])


def test_op_wrapper_messages_name_the_argument_verbatim():
    with pytest.raises(TypeError) as e:
        ops.speculate_get_seq_lens_output(None, paddle.zeros([1], "int32"), paddle.zeros([1], "int32"))
    assert str(e.value) == "speculate_get_seq_lens_output: seq_lens_this_time must be a paddle.Tensor, got None"
    with pytest.raises(TypeError) as e:
        ops.top_p_candidates(paddle.zeros([1, 2]), np.zeros(1, np.float32), paddle.zeros([1], "int32"))
    assert str(e.value) == "top_p_candidates: top_p must be a paddle.Tensor, got numpy.ndarray"


@pytest.fixture(scope="module")
def raw_probe() -> dict:
    """Runs tests/ops/raw_op_probe.py once in a subprocess: (op, arg, kind) -> outcome; a probe
    that crashed the process maps to None (its "start" line has no "done")."""
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-m", "tests.ops.raw_op_probe"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)
    records = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    results = {}
    for r in records:
        key = (r.get("op"), r.get("arg"), r.get("kind"))
        if r["event"] == "start":
            results[key] = None
        elif r["event"] == "done":
            results[key] = r
    finished = any(r["event"] == "finished" for r in records)
    return {"results": results, "returncode": proc.returncode, "finished": finished,
            "stderr": proc.stderr[-3000:]}


def test_raw_op_probe_ran_every_case(raw_probe):
    assert raw_probe["finished"] and raw_probe["returncode"] == 0, (
        f"probe process died (exit {raw_probe['returncode']}):\n{raw_probe['stderr']}")
    assert {(op, arg) for op, arg, _ in raw_probe["results"]} == set(REQUIRED + FILLED)


@pytest.mark.parametrize("op, arg", REQUIRED + FILLED)
def test_raw_op_rejects_a_missing_required_input(op, arg, raw_probe):
    """The registered op itself (no wrapper) raises on None or an uninitialised tensor instead of
    segfaulting: every C++ op checks its required inputs first (op_checks.h CheckGiven)."""
    for kind in ("none", "uninitialised_tensor"):
        got = raw_probe["results"].get((op, arg, kind))
        assert got is not None, f"{op}({arg}={kind}) crashed the process:\n{raw_probe['stderr']}"
        assert got["raised"] == "ValueError", got
        assert got["message"].startswith(f"{op}: "), got
    none = raw_probe["results"][(op, arg, "none")]["message"]
    assert f"{op}: {arg} is a required input, got None" in none
