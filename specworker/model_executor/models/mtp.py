"""MTPDraft: the DeepSeek-V3 / ERNIE-4.5 style multi-token-prediction draft module (docs/spec.md §5).

For position i: x = eh_proj(concat(enorm(embed(token_{i+1})), hnorm(h_i))), one decoder layer, output
hidden before the final norm. Embedding, final norm and lm_head are the target's (shared, not copied);
enorm, hnorm, eh_proj and the layer are the draft's own weights (the only ones in mtp.safetensors).
Training paths: forward_train (first substep, target hidden), forward_train_unrolled (chained substeps).
"""

from __future__ import annotations

import math

import paddle
import paddle.nn.functional as F

from specworker.model_executor import ops
from specworker.model_executor.forward_meta import ForwardMeta
from specworker.model_executor.layers.decoder_layer import DecoderLayer, make_weight
from specworker.model_executor.layers.draft_vocab import DraftVocab
from specworker.model_executor.layers.packed_weights import PackedWeights
from specworker.model_executor.layers.rms_norm import RMSNorm
from specworker.model_executor.models.kv_cache import KVCache
from specworker.model_executor.models.llama import LlamaModel, check_single_rank, token_positions


class MTPDraft(PackedWeights, paddle.nn.Layer):
    """One-layer draft on top of a LlamaModel target; its own KV cache has one layer. Sharded as its target
    (target.tp): the layer splits its heads like the target's; eh_proj is replicated (vLLM's DeepSeek MTP keeps
    it a replicated linear too), so every rank computes the same fused input."""

    PACKED = ("eh_proj",)

    def __init__(self, target: LlamaModel, *, hidden_after_norm: bool = False, own_final_norm: bool = False):
        """hidden_after_norm: h_i enters hnorm after a final norm (ERNIE 4.5 / DeepSeek-V3 checkpoints: the
        target's norm for the target's hidden, the draft's output norm for its own); False: as is (the tiny
        pair). own_final_norm: the draft has its own output norm (DeepSeek-V3's shared_head.norm) instead of
        sharing the target's."""
        super().__init__()
        arch = target.arch
        # Not a sublayer: the target's weights must not appear in the draft's parameters or state_dict.
        object.__setattr__(self, "target", target)
        self.hidden_after_norm = hidden_after_norm
        self.enorm = RMSNorm(arch.hidden_size, arch.rms_norm_eps)
        self.hnorm = RMSNorm(arch.hidden_size, arch.rms_norm_eps)
        self.eh_proj = make_weight(self, [2 * arch.hidden_size, arch.hidden_size])
        self.layer = DecoderLayer(**arch.layer_kwargs(target.tp))
        self.final_norm = RMSNorm(arch.hidden_size, arch.rms_norm_eps) if own_final_norm else None
        self.vocab: DraftVocab | None = None  # set_draft_vocab; None: drafts from the whole vocabulary

    def pack_weights(self, dtype: str = "float32") -> None:
        """Inference copies of eh_proj and the layer's projections (the lm_head is the target's)."""
        super().pack_weights(dtype)
        self.layer.pack_weights(dtype)

    def _output_norm(self) -> RMSNorm:
        return self.target.norm if self.final_norm is None else self.final_norm

    def prepare_hidden(self, hidden: paddle.Tensor, *, from_target: bool) -> paddle.Tensor:
        """h_i as forward expects it: hidden [R, H] (target rows when from_target, else the draft's own
        output rows) passed through the matching final norm under hidden_after_norm, else unchanged."""
        if not self.hidden_after_norm:
            return hidden
        return (self.target.norm if from_target else self._output_norm())(hidden)

    def new_kv_cache(self, num_blocks: int, block_size: int, place=None) -> KVCache:
        """A zeroed one-layer KVCache shaped for this draft (this rank's KV heads)."""
        a = self.target.arch
        return KVCache(1, num_blocks, a.num_kv_heads // self.target.tp.size, block_size, a.head_dim, "float32", place)

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
        x = ops.batch_invariant_linear(fused, self.linear_weight("eh_proj"))  # [token_num, H]
        cos, sin = self.target.rotary.factors(token_positions(meta, token_num))
        key_cache, value_cache = kv_cache.layer(0)
        x, residual = self.layer(x, None, cos, sin, meta, key_cache, value_cache, block_tables)
        return x + residual

    def compute_logits(self, rows: paddle.Tensor) -> paddle.Tensor:
        """The target's lm_head(norm(rows)) (the draft's own norm when it has one). rows [R, H] -> [R, V]."""
        if self.final_norm is None:
            return self.target.compute_logits(rows)
        return self.target.lm_head_logits(self.final_norm(rows))

    def set_draft_vocab(self, token_ids, *, linear_weight_dtype: str = "float32") -> None:
        """Draft from token_ids [V_d] only (docs/spec.md §5.3): draft_logits then scores those ids alone. The
        lm_head columns are gathered once here; a sharded target holds only its own columns, so it is refused."""
        if self.target.tp.size != 1:
            raise ValueError(f"MTPDraft.set_draft_vocab: tensor_parallel_size = {self.target.tp.size}; allowed: 1 "
                             "(each rank holds only its vocabulary part of the lm_head)")
        self.vocab = DraftVocab(self.target.lm_head, token_ids, linear_weight_dtype=linear_weight_dtype)

    def draft_logits(self, rows: paddle.Tensor) -> paddle.Tensor:
        """The logits the proposer drafts from: compute_logits(rows) [R, V], or with a draft vocabulary the
        same values at its ids only, [R, V_d] (column i is token vocab.token_ids[i]). rows [R, H]."""
        if self.vocab is None:
            return self.compute_logits(rows)
        return self.vocab.logits(self._output_norm()(rows))

    def forward_train(self, ids: paddle.Tensor, target_hidden: paddle.Tensor) -> paddle.Tensor:
        """Training path. Args: ids [B, L] int64 (token_{i+1} at column i); target_hidden [B, L, H] (h_i).

        Returns [B, L, H]; logits via target.logits_train predict token_{i+2}.
        """
        check_single_rank(self.target.tp, "MTPDraft.forward_train")
        length = ids.shape[1]
        fused = paddle.concat([self.enorm.forward_train(self.target.embed(ids)),
                               self.hnorm.forward_train(target_hidden)], axis=-1)
        x = paddle.matmul(fused, self.eh_proj)
        return self.layer.forward_train(x, self.target.rotary.cos[:length], self.target.rotary.sin[:length])

    def forward_train_unrolled(self, ids: paddle.Tensor, target_hidden: paddle.Tensor,
                               num_substeps: int) -> list[paddle.Tensor]:
        """Training path of `num_substeps` chained substeps, all positions at once (teacher forcing).

        Substep 1 is forward_train. Substep s > 1 at sequence position j reads token_{j+1} and substep
        s - 1's output at position j - 1, as the engine's substep s does for the draft anchored at
        i = j - s + 1. Its attention sees, per key position j' <= j, the K/V the inference cache would
        hold there: substep s - (j - j') for j - j' < s - 1 (this step's chained positions), substep 1
        for j - j' >= s - 1 (positions of earlier steps). Exact for teacher-forced (accepted) chains.

        Args:
            ids: [B, L] int64, token_{j+1} at column j (the true tokens, for every substep).
            target_hidden: [B, L, H] float32, the target's h_j.
            num_substeps: N >= 1.
        Returns:
            N tensors [B, L, H]; entry s - 1, column j: substep s's hidden at position j (its logits
            predict token_{j+2}). Columns j < s - 1 have no anchor i >= 0: exclude them from losses.
        """
        if num_substeps < 1:
            raise ValueError(f"forward_train_unrolled: num_substeps = {num_substeps}; allowed: >= 1")
        check_single_rank(self.target.tp, "MTPDraft.forward_train_unrolled")
        length = ids.shape[1]
        cos, sin = self.target.rotary.cos[:length], self.target.rotary.sin[:length]
        embedded = self.enorm.forward_train(self.target.embed(ids))  # [B, L, H], shared by all substeps
        hidden, keys, values, outs = target_hidden, [], [], []
        for _ in range(num_substeps):
            x = paddle.matmul(paddle.concat([embedded, self.hnorm.forward_train(hidden)], axis=-1), self.eh_proj)
            outs.append(self._layer_train_chained(x, cos, sin, keys, values))
            # row j of the next substep reads this substep's row j - 1 (row 0 has no anchor: zeros)
            hidden = paddle.concat([paddle.zeros_like(outs[-1][:, :1]), outs[-1][:, :-1]], axis=1)
        return outs

    def _layer_train_chained(self, x, cos, sin, keys: list, values: list) -> paddle.Tensor:
        """self.layer.forward_train for substep len(keys) + 1; appends its K/V to keys / values."""
        layer, attn = self.layer, self.layer.attn
        b, length = x.shape[0], x.shape[1]
        q, k, v = attn.project_train(layer.input_norm.forward_train(x), cos, sin)
        group = attn.num_heads // attn.num_kv_heads
        q, k, v = (a.transpose([0, 2, 1, 3]) for a in (q, k, v))  # [B, heads, L, head_dim]
        keys.append(paddle.repeat_interleave(k, group, axis=1) if group > 1 else k)
        values.append(paddle.repeat_interleave(v, group, axis=1) if group > 1 else v)
        out = _chained_attention(q / math.sqrt(attn.head_dim), keys, values)  # [B, heads, L, head_dim]
        x = x + attn.output_train(out.transpose([0, 2, 1, 3]).reshape([b, length, attn.q_width]))
        return x + layer.mlp.forward_train(layer.post_attn_norm.forward_train(x))


def _shift(t: paddle.Tensor, d: int) -> paddle.Tensor:
    """t [B, heads, L, D] moved d rows down along L (row j holds row j - d; the first d rows are zeros)."""
    return t if d == 0 else paddle.concat([paddle.zeros_like(t[:, :, :d]), t[:, :, :-d]], axis=2)


def _chained_attention(q: paddle.Tensor, keys: list, values: list) -> paddle.Tensor:
    """Causal attention of substep s = len(keys) whose key j' for query j comes from substep
    max(1, s - (j - j')): substep 1 everywhere j - j' >= s - 1 (dense scores), the diagonal bands
    j - j' = d < s - 1 from substep s - d (one score per row).

    Args:
        q: [B, heads, L, D], already scaled by 1 / sqrt(D).
        keys, values: s tensors [B, heads, L, D] each, substeps 1..s.
    Returns:
        [B, heads, L, D].
    """
    s, length = len(keys), q.shape[2]
    # dense part: substep-1 keys at distance >= s - 1 (s = 1: plain causal attention)
    far = paddle.triu(paddle.full([length, length], float("-inf"), dtype=q.dtype), diagonal=2 - s)
    scores = [paddle.matmul(q, keys[0], transpose_y=True) + far]  # [B, heads, L, L]
    row = paddle.arange(length).reshape([length, 1])
    for d in range(s - 1):  # band d: substep s - d at distance d; rows j < d have no such key
        band = (q * _shift(keys[s - 1 - d], d)).sum(-1, keepdim=True)  # [B, heads, L, 1]
        scores.append(paddle.where(row >= d, band, paddle.full_like(band, float("-inf"))))
    probs = paddle.split(F.softmax(paddle.concat(scores, axis=-1), axis=-1), [length] + [1] * (s - 1), axis=-1)
    out = paddle.matmul(probs[0], values[0])
    for d in range(s - 1):
        out = out + probs[1 + d] * _shift(values[s - 1 - d], d)
    return out
