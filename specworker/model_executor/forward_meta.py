"""ForwardMeta: the typed result of pre_process, read by the model, rebuild_padding, the
sampler and the proposer. It owns no logic beyond shape checks and the stale-read guard.
"""

from __future__ import annotations

import dataclasses

import paddle


class StaleForwardMetaError(RuntimeError):
    """A ForwardMeta built for an older batch layout was handed to a consumer (docs/spec.md §3)."""


@dataclasses.dataclass(slots=True, kw_only=True)
class ForwardMeta:
    """Index tensors of one engine step; every field is always set, in every mode.

    Input side: what the transformer consumes (packed tokens of all slots, slot order).
    Output side: which packed rows need a logit row (O_b per slot; docs/spec.md §4.2, §4.3).
    """

    # input side
    ids_remove_padding: paddle.Tensor  # [token_num] int64, -1 past the step's T tokens
    batch_id_per_token: paddle.Tensor  # [token_num] int32, -1 past T
    cu_seqlens_q: paddle.Tensor  # [bsz + 1] int32, exclusive prefix sum of L_b
    cu_seqlens_k: paddle.Tensor  # [bsz + 1] int32, equals cu_seqlens_q
    # the batch's per-slot lengths this meta was built from (shared, not copied)
    seq_lens_this_time: paddle.Tensor  # [bsz] int32, L_b
    seq_lens_encoder: paddle.Tensor  # [bsz] int32, E_b (> 0: prefill)
    seq_lens_decoder: paddle.Tensor  # [bsz] int32, Dec_b
    # output side
    seq_lens_output: paddle.Tensor  # [bsz] int32, O_b
    batch_id_per_token_output: paddle.Tensor  # [output_capacity] int32, -1 past T_out
    cu_seqlens_q_output: paddle.Tensor  # [bsz + 1] int32; [bsz] = T_out, read on the device
    # host-side sizes (never read from a device tensor)
    token_num: int  # capacity of the input side (token_num_cpu)
    output_capacity: int  # bsz * (num_draft_tokens + 1)
    logit_rows: int  # <= min(token_num, output_capacity), >= T_out: the rows gather_logit_rows returns (§4.3)
    num_draft_tokens: int  # k; 0 when not speculative
    layout_version: int  # InputBatch.layout_version this meta was built for

    @property
    def bsz(self) -> int:
        return self.seq_lens_this_time.shape[0]

    @property
    def speculative(self) -> bool:
        return self.num_draft_tokens > 0

    def require_current(self, layout_version: int, consumer: str) -> None:
        """Raises if the batch was reordered since this meta was built (no device read)."""
        if self.layout_version != layout_version:
            raise StaleForwardMetaError(
                f"{consumer}: ForwardMeta was built for batch layout {self.layout_version}, but the batch is "
                f"now at layout {layout_version} (a request was inserted, removed, swapped or condensed); "
                "run pre_process again before reading per-token index tensors"
            )

    def check(self) -> None:
        """Shapes and dtypes of every field (host metadata only; no device read)."""
        bsz, cap = self.bsz, self.output_capacity
        expect = {
            "ids_remove_padding": ([self.token_num], paddle.int64),
            "batch_id_per_token": ([self.token_num], paddle.int32),
            "cu_seqlens_q": ([bsz + 1], paddle.int32),
            "cu_seqlens_k": ([bsz + 1], paddle.int32),
            "seq_lens_this_time": ([bsz], paddle.int32),
            "seq_lens_encoder": ([bsz], paddle.int32),
            "seq_lens_decoder": ([bsz], paddle.int32),
            "seq_lens_output": ([bsz], paddle.int32),
            "batch_id_per_token_output": ([cap], paddle.int32),
            "cu_seqlens_q_output": ([bsz + 1], paddle.int32),
        }
        for name, (shape, dtype) in expect.items():
            t = getattr(self, name)
            if list(t.shape) != shape or t.dtype != dtype:
                raise ValueError(f"ForwardMeta.{name} is {list(t.shape)} {t.dtype}, expected {shape} {dtype}")
        if cap != bsz * (self.num_draft_tokens + 1):
            raise ValueError(
                f"ForwardMeta.output_capacity = {cap}, expected bsz * (num_draft_tokens + 1) = "
                f"{bsz * (self.num_draft_tokens + 1)}"
            )
        if not 0 <= self.logit_rows <= min(self.token_num, cap):
            raise ValueError(f"ForwardMeta.logit_rows = {self.logit_rows}, expected 0..min(token_num, "
                             f"output_capacity) = {min(self.token_num, cap)}")

    @classmethod
    def make_dummy(cls, bsz: int, token_num: int, num_draft_tokens: int = 0, layout_version: int = 0,
                   place: paddle.base.core.Place | None = None) -> ForwardMeta:
        """A well-shaped meta with every slot idle (warm-up, graph capture, tests)."""
        place = place or paddle.CPUPlace()
        cap = bsz * (num_draft_tokens + 1)

        def full(n, v, dtype):
            return paddle.full([n], v, dtype=dtype).to(place)

        return cls(
            ids_remove_padding=full(token_num, -1, "int64"),
            batch_id_per_token=full(token_num, -1, "int32"),
            cu_seqlens_q=full(bsz + 1, 0, "int32"),
            cu_seqlens_k=full(bsz + 1, 0, "int32"),
            seq_lens_this_time=full(bsz, 0, "int32"),
            seq_lens_encoder=full(bsz, 0, "int32"),
            seq_lens_decoder=full(bsz, 0, "int32"),
            seq_lens_output=full(bsz, 0, "int32"),
            batch_id_per_token_output=full(cap, -1, "int32"),
            cu_seqlens_q_output=full(bsz + 1, 0, "int32"),
            token_num=token_num,
            output_capacity=cap,
            logit_rows=min(token_num, cap),
            num_draft_tokens=num_draft_tokens,
            layout_version=layout_version,
        )
