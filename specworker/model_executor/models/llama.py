"""LlamaModel: the tiny target (token embedding, decoder layers, final RMSNorm, untied lm_head).

Inference path (the engine's step, batch invariant, no host sync): forward over packed tokens with a
paged KV cache, compute_logits over gathered rows. Training path (autograd): forward_train, logits_train.
Weights are stored [in, out]; loading and saving live in checkpoint.py. Under tensor parallelism
(docs/tensor_parallel.md) the embedding and the lm_head are vocab-parallel and the layers split their heads.
"""

from __future__ import annotations

import dataclasses
import math

import paddle

from specworker.model_executor import ops
from specworker.model_executor.forward_meta import ForwardMeta
from specworker.model_executor.layers.decoder_layer import INIT_STD, DecoderLayer, make_weight
from specworker.model_executor.layers.packed_weights import PackedWeights
from specworker.model_executor.layers.rms_norm import RMSNorm
from specworker.model_executor.layers.rotary import RopeScaling, RotaryEmbedding
from specworker.model_executor.models.kv_cache import KVCache
from specworker.model_executor.parallel import SINGLE_RANK, TensorParallel

MAX_POSITION = 8192  # rows of the RoPE table; later positions reuse the last row (clamped)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class LlamaArch:
    """A Llama-family architecture: the tiny models' config.json fields (config.ARCH_FIELDS) plus the
    options real checkpoints need (hf_checkpoint.py reads them from a Hugging Face config.json).

    head_dim 0 means hidden_size / num_heads. qkv_bias: q/k/v projections have a bias (Qwen2, Llama
    attention_bias); o_bias: o_proj has one (Llama attention_bias); mlp_bias: gate/up/down have one;
    qk_norm: per-head RMSNorm of q and k (Qwen3); tie_word_embeddings: lm_head is the embedding's
    transpose (loaded as a copy; the inference path reads lm_head only).
    """

    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    intermediate_size: int
    rope_theta: float
    rms_norm_eps: float
    head_dim: int = 0
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False
    tie_word_embeddings: bool = False
    rope_scaling: RopeScaling | None = None
    max_position: int = MAX_POSITION

    def __post_init__(self) -> None:
        if self.head_dim == 0:
            object.__setattr__(self, "head_dim", self.hidden_size // self.num_heads)

    def layer_kwargs(self, tp: TensorParallel = SINGLE_RANK) -> dict:
        return dict(tp=tp, hidden_size=self.hidden_size, num_heads=self.num_heads, num_kv_heads=self.num_kv_heads,
                    intermediate_size=self.intermediate_size, rms_norm_eps=self.rms_norm_eps, head_dim=self.head_dim,
                    qkv_bias=self.qkv_bias, o_bias=self.o_bias, mlp_bias=self.mlp_bias, qk_norm=self.qk_norm)

    @property
    def num_parameters(self) -> int:
        """Parameters of the target as loaded (a tied lm_head counted once)."""
        h, q, kv, i = self.hidden_size, self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim, self.intermediate_size
        attn = h * (q + 2 * kv) + q * h + (q + 2 * kv) * self.qkv_bias + h * self.o_bias + 2 * self.head_dim * self.qk_norm
        mlp = 3 * h * i + (2 * i + h) * self.mlp_bias
        embed = self.vocab_size * h * (1 if self.tie_word_embeddings else 2)
        return self.num_layers * (attn + mlp + 2 * h) + embed + h


def token_positions(meta: ForwardMeta, token_num: int) -> paddle.Tensor:
    """Position of every packed row: slot b's i-th token this step sits at seq_lens_decoder[b] + i.

    Computed on the device from batch_id_per_token, cu_seqlens_q and seq_lens_decoder. Rows past T
    (batch id -1) get an arbitrary position (callers clamp). Returns [token_num] int32.
    Example: cu_seqlens_q [0, 2, 2, 3], Dec [5, 0, 0], batch ids [0, 0, 2, -1] -> [5, 6, 0, <any>].
    """
    slot = paddle.clip(meta.batch_id_per_token, 0, meta.bsz - 1)
    row = paddle.arange(token_num, dtype="int32")
    start = paddle.gather(meta.cu_seqlens_q, slot)
    return paddle.gather(meta.seq_lens_decoder.reshape([-1]), slot) + row - start


class LlamaModel(PackedWeights, paddle.nn.Layer):
    """Llama-family target: embed -> num_layers x DecoderLayer -> norm -> lm_head, float32 compute.

    With tp.size > 1 this rank holds vocabulary rows tp.vocab_part(V) of embed_tokens and the same columns
    of lm_head, each padded to tp.vocab_share(V) (zeros), and its heads' share of every layer.
    """

    PACKED = ("lm_head",)

    def __init__(self, arch: LlamaArch, tp: TensorParallel = SINGLE_RANK):
        super().__init__()
        self.arch, self.tp = arch, tp
        out_std = INIT_STD / math.sqrt(2 * arch.num_layers)
        vocab_rows = tp.vocab_share(arch.vocab_size)  # V when tp.size == 1
        self.vocab_start = tp.vocab_part(arch.vocab_size)[0]
        self.embed_tokens = make_weight(self, [vocab_rows, arch.hidden_size])
        self.layers = paddle.nn.LayerList(
            [DecoderLayer(**arch.layer_kwargs(tp), out_std=out_std) for _ in range(arch.num_layers)])
        self.norm = RMSNorm(arch.hidden_size, arch.rms_norm_eps)
        self.lm_head = make_weight(self, [arch.hidden_size, vocab_rows])
        self.rotary = RotaryEmbedding(arch.head_dim, arch.rope_theta, arch.max_position, arch.rope_scaling)

    def to_place(self, place) -> LlamaModel:
        """Moves weights and the RoPE table to `place`."""
        self.to(place)
        self.rotary.to(place)
        return self

    def pack_weights(self, dtype: str = "float32") -> None:
        """Inference copies of every projection and the lm_head (PackedWeights.pack_weights); the loaders
        call it once. dtype "bfloat16" rounds them to bfloat16 (half the bytes per step)."""
        super().pack_weights(dtype)
        for layer in self.layers:
            layer.pack_weights(dtype)

    def new_kv_cache(self, num_blocks: int, block_size: int, place=None) -> KVCache:
        """A zeroed KVCache shaped for this model (this rank's KV heads)."""
        a = self.arch
        return KVCache(a.num_layers, num_blocks, a.num_kv_heads // self.tp.size, block_size, a.head_dim, "float32",
                       place)

    def embed(self, ids: paddle.Tensor) -> paddle.Tensor:
        """Embedding rows of ids (any int shape; -1 and other out-of-range ids clamped). Returns [*ids, H]."""
        flat = paddle.clip(ids.reshape([-1]), 0, self.arch.vocab_size - 1)
        if self.tp.size == 1:
            rows = paddle.gather(self.embed_tokens, flat)
        else:  # vocab-parallel: the owning rank contributes the row, the others zeros (an exact sum)
            local = flat - self.vocab_start
            mine = paddle.logical_and(local >= 0, local < self.embed_tokens.shape[0]).unsqueeze(-1)
            rows = paddle.gather(self.embed_tokens, paddle.clip(local, 0, self.embed_tokens.shape[0] - 1))
            rows = self.tp.reduce_sum(paddle.where(mine, rows, paddle.zeros_like(rows)))
        return rows.reshape(list(ids.shape) + [self.arch.hidden_size])

    @paddle.no_grad()
    def forward(self, ids_remove_padding: paddle.Tensor, meta: ForwardMeta, kv_cache: KVCache,
                block_tables: paddle.Tensor) -> paddle.Tensor:
        """Hidden states of this step's packed tokens, BEFORE the final norm (the MTP draft reads them).

        Args:
            ids_remove_padding: [token_num] int64, -1 past T.
            meta: ForwardMeta of the step (batch_id_per_token, cu_seqlens_q, seq_lens_* are read).
            kv_cache: KVCache with num_layers pairs; this step's K/V are written into it.
            block_tables: [N >= bsz, max_blocks_per_seq] int32 block ids of each slot.
        Returns:
            [token_num, H] float32; rows past T are finite but meaningless.
        """
        token_num = ids_remove_padding.shape[0]
        x = self.embed(ids_remove_padding)  # [token_num, H]
        cos, sin = self.rotary.factors(token_positions(meta, token_num))  # [token_num, 1, head_dim] each
        residual = None  # the residual stream; each layer's add runs inside its next norm
        for i, layer in enumerate(self.layers):
            key_cache, value_cache = kv_cache.layer(i)
            x, residual = layer(x, residual, cos, sin, meta, key_cache, value_cache, block_tables)
        return x + residual  # the last layer's add (the final norm runs on the rows that need logits)

    @paddle.no_grad()
    def compute_logits(self, rows: paddle.Tensor) -> paddle.Tensor:
        """lm_head(norm(rows)). Args: rows [R, H] float32. Returns [R, V] float32."""
        return self.lm_head_logits(self.norm(rows))

    def lm_head_logits(self, normed: paddle.Tensor) -> paddle.Tensor:
        """lm_head(normed) over the whole vocabulary, the same bits on every rank (each rank's columns are
        all-gathered). Args: normed [R, H] float32. Returns [R, V] float32."""
        return self.tp.gather_vocab(ops.batch_invariant_linear(normed, self.linear_weight("lm_head")),
                                    self.arch.vocab_size)

    def forward_train(self, ids: paddle.Tensor) -> paddle.Tensor:
        """Training path over whole sequences from position 0. Args: ids [B, L] int64. Returns [B, L, H]."""
        check_single_rank(self.tp, "LlamaModel.forward_train")
        length = ids.shape[1]
        x = self.embed(ids)
        cos, sin = self.rotary.cos[:length], self.rotary.sin[:length]
        for layer in self.layers:
            x = layer.forward_train(x, cos, sin)
        return x

    def logits_train(self, hidden: paddle.Tensor) -> paddle.Tensor:
        """lm_head(norm(hidden)) with autograd. Args: hidden [..., H]. Returns [..., V]."""
        return paddle.matmul(self.norm.forward_train(hidden), self.lm_head)


def check_single_rank(tp: TensorParallel, where: str) -> None:
    """The training paths have no collectives: refuse a sharded model."""
    if tp.size != 1:
        raise ValueError(f"{where}: tensor_parallel_size = {tp.size}; allowed: 1 (the training path is single-rank)")
