"""Reads safetensors files tensor by tensor, float32 / bfloat16 / float16 in, float32 out.

safetensors' numpy reader has no bfloat16, and a full `load_file` holds every tensor at once; this
reader parses the header itself (8-byte little-endian length, JSON, then the data section), maps the
file and converts one tensor at a time, so loading never holds two copies of a model. Every error
names the file and, where one is at fault, the tensor.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

__all__ = ["SafetensorsFile"]

_DTYPES = {"F32": np.float32, "BF16": np.uint16, "F16": np.float16, "F64": np.float64, "I64": np.int64,
           "I32": np.int32}
FLOAT_DTYPES = ("F32", "BF16", "F16")
_MAX_HEADER = 100 * 2**20  # the format's own bound on the header size


def bf16_bits_to_float32(bits: np.ndarray) -> np.ndarray:
    """uint16 bfloat16 bit patterns -> float32 (exact: bf16 is the top half of a float32)."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


class SafetensorsFile:
    """One .safetensors file: `names`, `shape(name)`, `dtype(name)` from the header, `float32(name)` reads."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"{self.path}: weights file not found")
        size = self.path.stat().st_size
        with open(self.path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise ValueError(f"{self.path}: not a safetensors file (shorter than its 8-byte header length)")
            (header_len,) = struct.unpack("<Q", head)
            if header_len > min(_MAX_HEADER, size - 8):
                raise ValueError(f"{self.path}: not a safetensors file or truncated (header length {header_len}, "
                                 f"file size {size} bytes)")
            try:
                header = json.loads(f.read(header_len))
            except (json.JSONDecodeError, UnicodeDecodeError) as err:
                raise ValueError(f"{self.path}: not a safetensors file (header is not JSON: {err})") from None
        if not isinstance(header, dict):
            raise ValueError(f"{self.path}: not a safetensors file (header is not a JSON object)")
        header.pop("__metadata__", None)
        self._data_start = 8 + header_len
        data_size = size - self._data_start
        self._entries: dict[str, tuple[str, list[int], int, int]] = {}
        for name, entry in header.items():
            try:
                dtype, shape, (begin, end) = entry["dtype"], [int(d) for d in entry["shape"]], entry["data_offsets"]
            except (KeyError, TypeError, ValueError):
                raise ValueError(f"{self.path}: tensor {name!r} has a malformed header entry {entry!r}") from None
            if dtype not in _DTYPES:
                raise ValueError(f"{self.path}: tensor {name!r} has dtype {dtype}; allowed: "
                                 + ", ".join(FLOAT_DTYPES))
            want = int(np.prod(shape, dtype=np.int64)) * np.dtype(_DTYPES[dtype]).itemsize
            if not 0 <= begin <= end or end - begin != want:
                raise ValueError(f"{self.path}: tensor {name!r} spans bytes {begin}..{end}, but {dtype} {shape} "
                                 f"needs {want} bytes")
            if end > data_size:
                raise ValueError(f"{self.path}: truncated: tensor {name!r} ends at byte {end} of the data section, "
                                 f"which holds {data_size} bytes")
            self._entries[name] = (dtype, shape, begin, end)

    @property
    def names(self) -> list[str]:
        return list(self._entries)

    def shape(self, name: str) -> list[int]:
        return list(self._entries[name][1])

    def dtype(self, name: str) -> str:
        return self._entries[name][0]

    def float32_slice(self, name: str, axis: int, start: int, stop: int) -> np.ndarray:
        """Tensor `name`'s entries start..stop - 1 along `axis` (0 or 1) as a new float32 array, reading only
        that slice's bytes (axis 0: one contiguous read; axis 1 of a 2-D tensor: a strided copy from a read-only
        map). Tensor-parallel loading reads each rank's share this way."""
        dtype, shape, begin, end = self._entries[name]
        self._check_float(name, dtype)
        if axis not in (0, 1) or axis >= len(shape) or not 0 <= start <= stop <= shape[axis]:
            raise ValueError(f"{self.path}: tensor {name!r} {shape}: no slice {start}:{stop} along axis {axis}")
        item = np.dtype(_DTYPES[dtype])
        if axis == 0:
            row = int(np.prod(shape[1:], dtype=np.int64))
            with open(self.path, "rb") as f:
                f.seek(self._data_start + begin + start * row * item.itemsize)
                raw = np.fromfile(f, dtype=item, count=(stop - start) * row).reshape([stop - start] + shape[1:])
            if raw.shape[0] != stop - start:
                raise ValueError(f"{self.path}: truncated while reading tensor {name!r}")
        else:
            mapped = np.memmap(self.path, dtype=item, mode="r", offset=self._data_start + begin, shape=tuple(shape))
            raw = np.array(mapped[:, start:stop])
            del mapped
        return _widen(dtype, raw)

    def _check_float(self, name: str, dtype: str) -> None:
        if dtype not in FLOAT_DTYPES:
            raise ValueError(f"{self.path}: tensor {name!r} has dtype {dtype}; allowed for weights: "
                             + ", ".join(FLOAT_DTYPES))

    def float32(self, name: str) -> np.ndarray:
        """Tensor `name` as a new float32 array (bf16 / f16 widened exactly)."""
        dtype, shape, begin, end = self._entries[name]
        self._check_float(name, dtype)
        count = (end - begin) // np.dtype(_DTYPES[dtype]).itemsize
        with open(self.path, "rb") as f:  # a plain read: no mapping keeps the file's pages resident
            f.seek(self._data_start + begin)
            raw = np.fromfile(f, dtype=_DTYPES[dtype], count=count).reshape(shape)
        if raw.size != count:
            raise ValueError(f"{self.path}: truncated while reading tensor {name!r}")
        return _widen(dtype, raw)


def _widen(dtype: str, raw: np.ndarray) -> np.ndarray:
    if dtype == "BF16":
        return bf16_bits_to_float32(raw)
    return raw if dtype == "F32" else raw.astype(np.float32)
