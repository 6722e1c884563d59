"""Loads the compiled extension (the only importer of build/ops/specworker_ops.so) and runs its ops.

The library is loaded lazily on the first op call; a missing or stale build raises
OpsNotBuiltError, which says how to build. `op_wrapper` checks a wrapper's tensor arguments
before anything reaches C++.
"""

from __future__ import annotations

import functools
import inspect
import numbers
import os
import types
import typing
import warnings

import numpy as np
import paddle

from specworker.model_executor import op_build


class OpsNotBuiltError(RuntimeError):
    """The compiled extension is missing, stale, or was built for another Paddle."""


def _check_current() -> None:
    how = "build it with `make ops` (or `python custom_ops/setup_ops.py`)"
    if not op_build.LIBRARY.exists():
        raise OpsNotBuiltError(f"specworker custom ops are not built ({op_build.LIBRARY} is missing); {how}")
    manifest = op_build.read_manifest()
    if manifest is None:
        raise OpsNotBuiltError(f"{op_build.MANIFEST} is missing or unreadable; {how}")
    # Inside a source checkout, a build older than the sources is stale. An installed copy
    # without custom_ops/ has nothing to compare against.
    if op_build.OPS_ROOT.is_dir() and manifest.get("digest") != op_build.source_digest():
        raise OpsNotBuiltError(f"specworker custom ops are stale (custom_ops/ changed since the build); {how}")
    if manifest.get("paddle") != paddle.__version__:
        raise OpsNotBuiltError(
            f"specworker custom ops were built for paddle {manifest.get('paddle')}, "
            f"this is paddle {paddle.__version__}; {how}"
        )
    if manifest.get("with_cuda") != bool(paddle.is_compiled_with_cuda()):
        raise OpsNotBuiltError(
            f"specworker custom ops were built with_cuda={manifest.get('with_cuda')}, but this Paddle has "
            f"with_cuda={bool(paddle.is_compiled_with_cuda())}; {how}"
        )


@functools.cache
def load_ops() -> frozenset[str]:
    """Registers the extension's ops with Paddle once; returns their names."""
    if not os.environ.get("SPECWORKER_SKIP_STALE_CHECK"):
        _check_current()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="No ccache found")
        from paddle.utils.cpp_extension.extension_utils import load_op_meta_info_and_register_op

    return frozenset(load_op_meta_info_and_register_op(str(op_build.LIBRARY)))


def _run(op_name: str, *args):
    """Runs a registered op; an argument check failing in C++ surfaces as ValueError."""
    load_ops()
    try:
        return paddle._C_ops._run_custom_op(op_name, *args)
    except OSError as e:  # Paddle reports PD_CHECK failures as OSError
        raise ValueError(str(e).strip()) from None


def _host_int(op: str, name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{op}: {name} must be a host int, got {type(value).__name__}")
    return int(value)


def _host_bool(op: str, name: str, value) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{op}: {name} must be a host bool, got {type(value).__name__}")
    return bool(value)


def _is_optional_tensor(hint) -> bool:
    return isinstance(hint, types.UnionType) and set(typing.get_args(hint)) == {paddle.Tensor, type(None)}


def tensor_params(fn) -> dict[str, bool]:
    """fn's tensor parameters in signature order: name -> required (annotated `paddle.Tensor`)
    or not (annotated `paddle.Tensor | None`)."""
    hints = typing.get_type_hints(fn)
    params = {}
    for name in inspect.signature(fn).parameters:
        hint = hints.get(name)
        if hint is paddle.Tensor:
            params[name] = True
        elif _is_optional_tensor(hint):
            params[name] = False
    return params


def _place_of(x: paddle.Tensor):
    return x.place


def op_wrapper(fn):
    """Decorates the wrapper of the op named fn.__name__: its tensor arguments are checked before
    the body runs, so nothing malformed reaches the C++ op (where a None input used to be an
    uninitialised tensor and a segfault, and a numpy array Paddle's error without the name).

    A parameter annotated `paddle.Tensor` must be a paddle.Tensor, one annotated
    `paddle.Tensor | None` a paddle.Tensor or None (TypeError otherwise), and every tensor given
    must be on one place (ValueError otherwise: the C++ ops compute on one device). Messages
    start with the op name and name the argument. Host-side only: no tensor value is read.
    """
    op = fn.__name__
    signature = inspect.signature(fn)
    params = tensor_params(fn)
    missing = inspect.Parameter.empty
    # (name, position, default, required) per tensor parameter; no per-call signature binding
    checks = [(name, list(signature.parameters).index(name), signature.parameters[name].default, required)
              for name, required in params.items()]

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        first = None  # (name, place) of the first tensor given
        for name, position, default, required in checks:
            value = args[position] if position < len(args) else kwargs.get(name, default)
            if value is missing:
                continue  # not passed at all: calling fn raises Python's own TypeError
            if value is None and not required:
                continue
            if not isinstance(value, paddle.Tensor):
                what = "a paddle.Tensor" if required else "a paddle.Tensor or None"
                got = "None" if value is None else f"{type(value).__module__}.{type(value).__qualname__}"
                raise TypeError(f"{op}: {name} must be {what}, got {got}")
            place = _place_of(value)
            if first is None:
                first = (name, place)
            elif place != first[1]:
                raise ValueError(f"{op}: {name} is on {place} but {first[0]} is on {first[1]}; "
                                 "every tensor input must be on one device")
        return fn(*args, **kwargs)

    wrapper.op_name = op
    wrapper.tensor_params = params
    return wrapper
