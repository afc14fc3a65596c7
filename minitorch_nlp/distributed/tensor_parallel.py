"""Megatron-LM's tensor parallelism (Shoeybi et al., 2019, section 3; the survey's IV-E and its
figure 10): each weight matrix of a Transformer layer split over the ranks of a tensor-parallel
communicator, so that one layer's parameters and work are divided by their number.

* ``ColumnParallelLinear``: Y = X A with A = [A_1 ... A_p] split by columns; rank i computes
  X A_i (its share of the output features). Its input passes through f (``copy_to_parallel``).
* ``RowParallelLinear``: Y = X B with B split by rows and X by columns (the output of a
  column-parallel layer); rank i computes X_i B_i and g (``reduce_from_parallel``) sums them;
  the bias is added once, after the sum.
* ``TensorParallelMLP``: GELU(X A) B with A by columns and B by rows: the nonlinearity acts on
  each rank's shard alone, so the sub-block needs one all-reduce forward (g) and one backward (f).
* ``TensorParallelAttention``: the heads split over the ranks (q, k, v projections by columns,
  the output projection by rows): again one all-reduce forward and one backward.
* ``VocabParallelEmbedding``: rank i holds the embedding rows of its slice of the vocabulary;
  ids outside it look up zeros and g sums the ranks' lookups. The tied output layer gives each
  rank the logits of its slice, and ``vocab_parallel_cross_entropy`` computes the loss from them
  with three all-reduces of (tokens,) numbers -- the max, the sum of exponentials and the target's
  logit -- never gathering (tokens, vocab) logits.

``TensorParallelGPT2`` is a GPT-2 language model (``models.gpt``) built from these parts, and
``TensorParallelBert`` BERT's masked LM (``models.bert``): each is built as the dense model (same
initialisation, so the same seed gives the same weights), then each layer keeps only this rank's
shard (``split_layers``). Shards are made from dense modules by each class's ``from_dense``,
which is also how a dense checkpoint is split.
"""
from __future__ import annotations

import numpy as np

from .. import checks
from .. import functional as F
from ..autograd import empty, tensor
from ..models.bert import BertForMaskedLM
from ..models.gpt import GPT2LMHeadModel, IGNORE_INDEX
from ..nn import Dropout, Linear, Module, MultiHeadAttention, Parameter, init
from ..nn.outputs import ModelOutput
from ..nn.transformer import _check_activation
from .collectives import all_gather, copy_to_parallel, reduce_from_parallel

__all__ = ["ColumnParallelLinear", "RowParallelLinear", "TensorParallelAttention",
           "TensorParallelBert", "TensorParallelGPT2", "TensorParallelMLP",
           "VocabParallelEmbedding", "split_layers", "vocab_parallel_cross_entropy"]


def _share(total, comm, name, where):
    """``total`` / ranks, refused when the ranks do not divide it."""
    if total % comm.size:
        raise ValueError(f"{where}: {name}={total} must be divisible by the {comm.size} ranks of "
                         "the tensor-parallel group")
    return total // comm.size


def _rows(array, comm, axis=0):
    """This rank's equal slice of ``array`` along ``axis``."""
    return np.split(np.asarray(array), comm.size, axis=axis)[comm.rank].copy()


def _set(parameter, array):
    """``parameter`` holds ``array`` (a copy of the dense weights' part, in their dtype)."""
    parameter.data = parameter.backend.asarray(np.ascontiguousarray(array))


class ColumnParallelLinear(Linear):
    """Y_i = X A_i + b_i: this rank's ``out_features / ranks`` output features of a Linear
    (in_features -> out_features). The input goes through f, so that backward sums the input's
    gradient over the ranks; ``gather_output=True`` all-gathers the shards into the whole Y."""

    def __init__(self, in_features, out_features, comm, bias=True, gather_output=False):
        super().__init__(in_features, _share(out_features, comm, "out_features",
                                             "ColumnParallelLinear"), bias=bias)
        self.comm, self.gather_output = comm, bool(gather_output)

    @classmethod
    def from_dense(cls, linear, comm, gather_output=False):
        """This rank's shard of a dense ``Linear`` (its weight's rows = output features)."""
        shard = cls(linear.in_features, linear.out_features, comm, linear.bias is not None,
                    gather_output)
        _set(shard.weight, _rows(linear.weight.data, comm))
        shard.choose_weight_layout_()
        if linear.bias is not None:
            _set(shard.bias, _rows(linear.bias.data, comm))
        return shard

    def forward(self, x):
        y = F.linear(copy_to_parallel(x, self.comm), self.weight, self.bias)      # f, X A_i
        if self.gather_output:
            y = all_gather(y, self.comm, axis=-1)
        return y


class RowParallelLinear(Linear):
    """Y = sum_i X_i B_i + b: this rank holds the rows of B for its ``in_features / ranks``
    input features (X_i, the output of a column-parallel layer); g all-reduces the partial
    products, and the bias (whole, the same on every rank) is added after the sum."""

    def __init__(self, in_features, out_features, comm, bias=True):
        super().__init__(_share(in_features, comm, "in_features", "RowParallelLinear"),
                         out_features, bias=bias)
        self.comm = comm

    @classmethod
    def from_dense(cls, linear, comm):
        shard = cls(linear.in_features, linear.out_features, comm, linear.bias is not None)
        _set(shard.weight, _rows(linear.weight.data, comm, axis=1))
        shard.choose_weight_layout_()
        if linear.bias is not None:
            _set(shard.bias, linear.bias.data)
        return shard

    def forward(self, x):
        y = reduce_from_parallel(F.linear(x, self.weight), self.comm)                # g
        return y if self.bias is None else y + self.bias


class TensorParallelMLP(Module):
    """Megatron's MLP (figure 3a): Z = Dropout(GELU(X A) B), A split by columns, B by rows; one
    all-reduce forward, one backward. ``activation`` as ``nn.FeedForward``'s."""

    def __init__(self, d_model, d_ff, comm, activation="gelu", dropout=0.0):
        super().__init__()
        self.activation = _check_activation(activation, "TensorParallelMLP")
        self.linear1 = ColumnParallelLinear(d_model, d_ff, comm)
        self.linear2 = RowParallelLinear(d_ff, d_model, comm)
        self.dropout = Dropout(dropout)

    @classmethod
    def from_dense(cls, feed_forward, comm):
        """This rank's shard of an ``nn.FeedForward``."""
        mlp = cls(feed_forward.linear1.in_features, feed_forward.linear1.out_features, comm,
                  feed_forward.activation, feed_forward.dropout.p)
        mlp.linear1 = ColumnParallelLinear.from_dense(feed_forward.linear1, comm)
        mlp.linear2 = RowParallelLinear.from_dense(feed_forward.linear2, comm)
        return mlp

    def forward(self, x):
        hidden = self.linear1(x)                                  # f, then X A_i
        if self.activation == "relu":
            hidden = F.relu(hidden)
        else:                                                     # on the shard: no exchange
            hidden = F.gelu(hidden, approximate="tanh" if self.activation == "gelu_tanh"
                            else "none")
        return self.linear2(self.dropout(hidden))                 # X_i B_i, then g


class TensorParallelAttention(MultiHeadAttention):
    """Megatron's self-attention (figure 3b): the ``num_heads`` heads split over the ranks, each
    rank projecting q, k, v for its own heads (the columns of W^Q, W^K, W^V), attending, and
    multiplying by its rows of W^O (``RowParallelLinear``); f before, g after: one all-reduce
    forward and one backward. The core, masks and cache are ``MultiHeadAttention``'s."""

    def __init__(self, d_model, num_heads, comm, bias=True, dropout=0.0, *, core=None):
        where = "TensorParallelAttention"
        checks.positive_int(num_heads, "num_heads", where)
        if d_model % num_heads:
            raise ValueError(f"{where}: num_heads={num_heads} does not divide d_model={d_model}")
        super().__init__(d_model, _share(num_heads, comm, "num_heads", where), bias=bias,
                         dropout=dropout, core=core, head_dim=d_model // num_heads)
        self.comm = comm
        self.out_proj = RowParallelLinear(d_model, d_model, comm, bias=bias)

    @classmethod
    def from_dense(cls, attention, comm):
        """This rank's heads of an ``nn.MultiHeadAttention`` (its core is shared, not copied:
        cores hold no parameters)."""
        shard = cls(attention.d_model, attention.num_heads, comm,
                    attention.q_proj.bias is not None, core=attention.core)
        for name in ("q_proj", "k_proj", "v_proj"):
            dense, mine = getattr(attention, name), getattr(shard, name)
            _set(mine.weight, _rows(dense.weight.data, comm))
            mine.choose_weight_layout_()
            if dense.bias is not None:
                _set(mine.bias, _rows(dense.bias.data, comm))
        shard.out_proj = RowParallelLinear.from_dense(attention.out_proj, comm)
        return shard

    def forward(self, query, key=None, value=None, **kwargs):
        if key is not None or value is not None:
            raise ValueError("TensorParallelAttention: self-attention only (key and value come "
                             "from the query)")
        return super().forward(copy_to_parallel(query, self.comm), **kwargs)          # f


class VocabParallelEmbedding(Module):
    """Rank i holds rows [i V / p, (i + 1) V / p) of the (V, d) embedding; an id outside its
    slice looks up zeros, and g sums the ranks' lookups into the embedding of every id."""

    def __init__(self, num_embeddings, embedding_dim, comm):
        super().__init__()
        share = _share(num_embeddings, comm, "num_embeddings", "VocabParallelEmbedding")
        self.num_embeddings, self.embedding_dim, self.comm = num_embeddings, embedding_dim, comm
        self.vocab_start = comm.rank * share
        self.weight = Parameter(init.normal_(empty(share, embedding_dim), std=0.02))

    @classmethod
    def from_dense(cls, embedding, comm):
        shard = cls(embedding.num_embeddings, embedding.embedding_dim, comm)
        shard.weight = Parameter(tensor(_rows(embedding.weight.data, comm),
                                        dtype=embedding.weight.dtype))
        return shard

    def local_ids(self, ids):
        """(ids shifted into this rank's slice, True where an id belongs to it)."""
        ids = np.asarray(ids)
        mine = (ids >= self.vocab_start) & (ids < self.vocab_start + self.weight.shape[0])
        return np.where(mine, ids - self.vocab_start, 0), mine

    def forward(self, ids):
        local, mine = self.local_ids(ids)
        lookup = F.embedding(local, self.weight) * tensor(mine[..., None].astype(
            self.weight.dtype), backend=self.weight.backend)
        return reduce_from_parallel(lookup, self.comm)                                  # g


def vocab_parallel_cross_entropy(local_logits, target, comm, vocab_start,
                                 ignore_index=IGNORE_INDEX):
    """The mean cross-entropy of targets ``target`` (any shape, ``ignore_index`` skipped) from
    each rank's slice of the logits, ``local_logits`` (..., V / p) for vocabulary ids
    [vocab_start, vocab_start + V / p): log sum_j exp(z_j) - z_target with both terms summed over
    the ranks by all-reduces of one number per token (Megatron, section 3), never (tokens, V)."""
    target = np.asarray(target)
    share = local_logits.shape[-1]
    if target.shape != local_logits.shape[:-1]:
        raise ValueError(f"vocab_parallel_cross_entropy: target {target.shape} must match the "
                         f"logits' leading axes {local_logits.shape[:-1]}")
    shift = comm.all_reduce(np.asarray(local_logits.data.max(axis=-1, keepdims=True)), op="max")
    shifted = local_logits - tensor(shift, dtype=local_logits.dtype,
                                    backend=local_logits.backend)
    sum_exp = reduce_from_parallel(shifted.exp().sum(axis=-1), comm)
    local = target - vocab_start
    mine = (local >= 0) & (local < share)
    one_hot = (np.where(mine, local, -1)[..., None] == np.arange(share)).astype(
        local_logits.dtype)
    target_logit = reduce_from_parallel((shifted * tensor(one_hot)).sum(axis=-1), comm)
    counted = (target != ignore_index).astype(local_logits.dtype)
    losses = (sum_exp.log() - target_logit) * tensor(counted)
    return losses.sum() / max(float(counted.sum()), 1.0)


def split_layers(layers, comm):
    """Replace, in place, each Transformer layer's attention and feed-forward network by this
    rank's ``TensorParallelAttention`` and ``TensorParallelMLP`` shards of them (Megatron's
    split of a layer: one all-reduce per sub-block forward and one backward)."""
    for layer in layers:
        layer.self_attn = TensorParallelAttention.from_dense(layer.self_attn, comm)
        layer.feed_forward = TensorParallelMLP.from_dense(layer.feed_forward, comm)


class TensorParallelGPT2(GPT2LMHeadModel):
    """GPT-2's language model split over the tensor-parallel communicator ``comm``: every block's
    attention heads and MLP (one all-reduce each forward and backward), the token embedding and
    the tied output layer by vocabulary, the loss by ``vocab_parallel_cross_entropy``; position
    embeddings and LayerNorms are replicated. ``logits`` are this rank's vocabulary slice.
    With the same seed, its shards are exactly the dense ``GPT2LMHeadModel``'s weights."""

    def __init__(self, config, comm):
        super().__init__(config)
        self.comm = comm
        body = self.transformer
        body.wte = VocabParallelEmbedding.from_dense(body.wte, comm)
        split_layers(body.blocks.layers, comm)

    def forward(self, input_ids, attention_mask=None, labels=None):
        h = self.transformer(input_ids, attention_mask).last_hidden_state
        logits = F.linear(copy_to_parallel(h, self.comm), self.transformer.wte.weight)  # f
        loss = None
        if labels is not None:
            loss = vocab_parallel_cross_entropy(logits[..., :-1, :], np.asarray(labels)[..., 1:],
                                                self.comm, self.transformer.wte.vocab_start)
        return ModelOutput(loss=loss, logits=logits)


class TensorParallelBert(BertForMaskedLM):
    """BERT's masked LM with every encoder layer split over the tensor-parallel communicator
    ``comm`` (``split_layers``: attention heads and MLP, one all-reduce each forward and
    backward); the embeddings, the LayerNorms and the masked-LM head (tied to the word
    embeddings) are replicated, so ``logits`` are whole on every rank. With the same seed its
    shards are exactly the dense ``BertForMaskedLM``'s weights. ``head_mask`` is refused: its
    rows would name all the heads, and each rank holds some."""

    def __init__(self, config, comm):
        super().__init__(config)
        self.comm = comm
        split_layers(self.bert.encoder.layers, comm)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, position_ids=None,
                labels=None, head_mask=None, output_hidden_states=False,
                output_attentions=False):
        if head_mask is not None:
            raise ValueError("TensorParallelBert: head_mask is not supported (each rank holds "
                             f"{self.config.num_attention_heads // self.comm.size} of the "
                             f"{self.config.num_attention_heads} heads); prune heads in the "
                             "dense model")
        return super().forward(input_ids, attention_mask, token_type_ids, position_ids, labels,
                               None, output_hidden_states, output_attentions)
