"""MTPDraft: the DeepSeek-V3 / ERNIE-4.5 style multi-token-prediction draft module (SPEC §5).

For position i: x = eh_proj(concat(enorm(embed(token_{i+1})), hnorm(h_i))), one decoder layer, output
hidden before the final norm. Embedding, final norm and lm_head are the target's (shared, not copied);
enorm, hnorm, eh_proj and the layer are the draft's own weights (the only ones in mtp.safetensors).
"""

from __future__ import annotations

import paddle

from specworker.model_executor import ops
from specworker.model_executor.forward_meta import ForwardMeta
from specworker.model_executor.layers.decoder_layer import DecoderLayer, make_weight
from specworker.model_executor.layers.rms_norm import RMSNorm
from specworker.model_executor.models.kv_cache import KVCache
from specworker.model_executor.models.llama import LlamaModel, token_positions


class MTPDraft(paddle.nn.Layer):
    """One-layer draft on top of a LlamaModel target; its own KV cache has one layer."""

    def __init__(self, target: LlamaModel):
        super().__init__()
        arch = target.arch
        # Not a sublayer: the target's weights must not appear in the draft's parameters or state_dict.
        object.__setattr__(self, "target", target)
        self.enorm = RMSNorm(arch.hidden_size, arch.rms_norm_eps)
        self.hnorm = RMSNorm(arch.hidden_size, arch.rms_norm_eps)
        self.eh_proj = make_weight(self, [2 * arch.hidden_size, arch.hidden_size])
        self.layer = DecoderLayer(**arch.layer_kwargs())

    def new_kv_cache(self, num_blocks: int, block_size: int, place=None) -> KVCache:
        """A zeroed one-layer KVCache shaped for this draft."""
        a = self.target.arch
        return KVCache(1, num_blocks, a.num_kv_heads, block_size, a.head_dim, "float32", place)

    @paddle.no_grad()
    def forward(self, ids: paddle.Tensor, prev_hidden: paddle.Tensor, meta: ForwardMeta, kv_cache: KVCache,
                block_tables: paddle.Tensor) -> paddle.Tensor:
        """Draft hidden states of this step's packed rows, before the final norm.

        Args:
            ids: [token_num] int64, row t holds token_{i+1} for the draft position i of that row; -1 past T.
            prev_hidden: [token_num, H] float32, h_i: the target's hidden (first substep) or the draft's own.
            meta: ForwardMeta of the draft batch (positions are seq_lens_decoder[b] + i as for the target).
            kv_cache: the draft's one-layer KVCache (written in place).
            block_tables: [N >= bsz, max_blocks_per_seq] int32, the draft cache's block ids.
        Returns:
            [token_num, H] float32.
        """
        token_num = ids.shape[0]
        fused = paddle.concat([self.enorm(self.target.embed(ids)), self.hnorm(prev_hidden)], axis=-1)
        x = ops.batch_invariant_linear(fused, self.eh_proj)  # [token_num, H]
        cos, sin = self.target.rotary.tables(token_positions(meta, token_num))
        key_cache, value_cache = kv_cache.layer(0)
        return self.layer(x, cos, sin, meta, key_cache, value_cache, block_tables)

    def compute_logits(self, rows: paddle.Tensor) -> paddle.Tensor:
        """The target's lm_head(norm(rows)). Args: rows [R, H]. Returns [R, V]."""
        return self.target.compute_logits(rows)

    def forward_train(self, ids: paddle.Tensor, target_hidden: paddle.Tensor) -> paddle.Tensor:
        """Training path. Args: ids [B, L] int64 (token_{i+1} at column i); target_hidden [B, L, H] (h_i).

        Returns [B, L, H]; logits via target.logits_train predict token_{i+2}.
        """
        length = ids.shape[1]
        fused = paddle.concat([self.enorm.forward_train(self.target.embed(ids)),
                               self.hnorm.forward_train(target_hidden)], axis=-1)
        x = paddle.matmul(fused, self.eh_proj)
        return self.layer.forward_train(x, self.target.rotary.cos[:length], self.target.rotary.sin[:length])
