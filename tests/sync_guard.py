"""A guard that turns any host read of a tensor's values into an error.

Inside ``forbid_host_reads()``, the Tensor methods that copy device data to the host
(``numpy``, ``item``, ``tolist``, ``__bool__``, ``__int__``, ``__float__``, ``__index__``,
``__array__``, ``__format__``) raise HostReadError. Run on CPU tensors, it still catches every
such call, which on a GPU tensor would be a blocking device-to-host sync.
"""

from __future__ import annotations

import contextlib

import paddle

GUARDED = ("numpy", "item", "tolist", "__bool__", "__int__", "__float__", "__index__", "__array__",
           "__format__", "__nonzero__")


class HostReadError(AssertionError):
    pass


_ACTIVE: list = []  # (originals, refusers) of each enclosing forbid_host_reads


@contextlib.contextmanager
def allow_host_reads():
    """Lifts the innermost forbid_host_reads for the sanctioned copy (the step's one device-to-host copy)."""
    if not _ACTIVE:
        yield
        return
    originals, refusers = _ACTIVE[-1]
    for name, fn in originals.items():
        if fn is None:
            delattr(paddle.Tensor, name)
        else:
            setattr(paddle.Tensor, name, fn)
    try:
        yield
    finally:
        for name, fn in refusers.items():
            setattr(paddle.Tensor, name, fn)


@contextlib.contextmanager
def forbid_host_reads(allow=()):
    """`allow`: tensors that may still be read (host mirrors, whose reads are no device sync)."""
    cls = paddle.Tensor
    saved = {name: cls.__dict__.get(name) for name in GUARDED}
    originals = {name: getattr(cls, name, None) for name in GUARDED}  # inherited ones too
    allowed = {id(t) for t in allow}

    def make(name):
        def refuse(self, *args, **kwargs):
            if id(self) in allowed:
                return originals[name](self, *args, **kwargs)
            raise HostReadError(f"host read of a tensor value via Tensor.{name} (shape {self.shape}) in the step path")

        return refuse

    refusers = {name: make(name) for name in GUARDED}
    for name, fn in refusers.items():
        setattr(cls, name, fn)
    _ACTIVE.append((originals, refusers))
    try:
        yield
    finally:
        _ACTIVE.pop()
        for name, fn in saved.items():
            if fn is None:
                delattr(cls, name)
            else:
                setattr(cls, name, fn)
