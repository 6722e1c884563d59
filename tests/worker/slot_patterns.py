"""Table-driven fixtures for InputBatch tests: small configs, a distinct row pattern per request
("origin") for every PER_SLOT buffer, and the expected share_inputs of a slot -> origin model.

Nothing here calls InputBatch's row moves: expected values come from the table and the model only.
"""

from __future__ import annotations

import numpy as np
import paddle

from specworker.config import config_from_dict
from specworker.model_executor.slot_buffers import BufferKind
from specworker.slot_request import SlotRequest

# name -> (max_num_seqs, max_model_len, k); awkward sizes: odd N, k = 0 (D = 1), a wide batch.
CONFIGS = {"mtp_n5_k2": (5, 12, 2), "none_n3": (3, 9, 0), "mtp_n17_k5": (17, 20, 5)}


def make_config(name: str = "mtp_n5_k2"):
    n, s, k = CONFIGS[name]
    spec = {"method": "mtp", "model": "builtin:tiny-mtp", "num_speculative_tokens": k} if k else {}
    return config_from_dict({
        "scheduler": {"max_num_seqs": n, "max_model_len": s, "block_size": 4, "num_blocks": 64,
                      "max_num_batched_tokens": 128},
        "speculative_config": spec,
    })


def is_decode_origin(origin: int) -> bool:
    """Requests with an even origin are decode slots (E = 0) in the patterns below."""
    return origin % 2 == 0


def pattern(spec, dims, origin: int) -> np.ndarray:
    """Row of a slot holding request `origin`.

    Integer and float rows differ per origin and per column and are never a fill. A bool row has one
    bit, so odd origins get the non-fill value and even origins the fill: tests clear an odd slot and
    swap an odd slot with an even one. seq_lens_encoder is 0 (a decode slot) for even origins.
    """
    row_shape = spec.shape(dims)[1:]
    cols = np.arange(int(np.prod(row_shape)), dtype=np.int64).reshape(row_shape)
    if spec.name == "seq_lens_encoder" and is_decode_origin(origin):
        return np.zeros(row_shape, dtype=spec.dtype)  # decode slot, for the prefill/decode split
    if spec.dtype == "bool":  # odd origins: never the fill (clear is visible); even: the fill
        return ((origin + cols) % 2 == 1) != spec.fill_value(dims)
    if spec.dtype == "float32":
        return (origin + 1 + cols / 1000).astype(np.float32)
    return (1000 * (origin + 1) + cols).astype(spec.dtype)


def fill_row(spec, dims) -> np.ndarray:
    return np.full(spec.shape(dims)[1:], spec.fill_value(dims), dtype=spec.dtype)


def keys_of(spec):
    return [spec.name] + ([spec.mirror_name] if spec.cpu_mirror else [])


def per_slot_specs(batch):
    return [s for s in batch.table if s.kind is BufferKind.PER_SLOT]


def write_origin(batch, slot: int, origin: int | None) -> None:
    """Overwrites every PER_SLOT row (device and mirror) of `slot` with origin's pattern (None: fills)."""
    for spec in per_slot_specs(batch):
        row = fill_row(spec, batch.dims) if origin is None else pattern(spec, batch.dims, origin)
        for key in keys_of(spec):
            batch.share_inputs[key][slot] = paddle.to_tensor(row, place=batch.share_inputs[key].place)


def mark_fixed_buffers(batch) -> dict[str, np.ndarray]:
    """Writes a distinct pattern into every PER_STEP and GLOBAL buffer; returns it (they must never move)."""
    marked = {}
    for spec in batch.table:
        if spec.kind is BufferKind.PER_SLOT:
            continue
        shape = spec.shape(batch.dims)
        values = np.arange(int(np.prod(shape))).reshape(shape) + 7
        values = (values % 2 == 1) if spec.dtype == "bool" else values.astype(spec.dtype)
        for key in keys_of(spec):
            batch.share_inputs[key].set_value(values)
            marked[key] = values
    return marked


def expected_per_slot(batch, origins: list[int | None]) -> dict[str, np.ndarray]:
    """share_inputs of every PER_SLOT buffer and mirror when slot b holds origins[b]."""
    expected = {}
    for spec in per_slot_specs(batch):
        rows = [fill_row(spec, batch.dims) if o is None else pattern(spec, batch.dims, o) for o in origins]
        for key in keys_of(spec):
            expected[key] = np.stack(rows)
    return expected


def assert_share_inputs(batch, expected: dict[str, np.ndarray], context: str = "") -> None:
    for key, want in expected.items():
        got = batch.share_inputs[key].numpy()
        np.testing.assert_array_equal(got, want, err_msg=f"{key} {context}")


def request(req_id: str, num_prompt: int = 3, **kwargs) -> SlotRequest:
    """A valid request with prompt tokens 10, 11, ... (unless prompt_token_ids is given)."""
    kwargs.setdefault("max_tokens", 2)
    kwargs.setdefault("prompt_token_ids", list(range(10, 10 + num_prompt)))
    return SlotRequest(req_id=req_id, **kwargs)
