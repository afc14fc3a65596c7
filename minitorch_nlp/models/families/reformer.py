"""the Reformer as the rest of the library sees it: its HuggingFace key map (our parameter names
<-> HuggingFace's, with the transposes and fused tensors) and its registrations for
``from_pretrained`` and for training and generation from the command line (``models.registry``).
The model itself is ``models.reformer``."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from ...io.huggingface import HFArchitecture, Rule, register_architecture
from ..configs.reformer import ATTENTION_TYPES, ReformerConfig
from ..reformer import ReformerModel, ReformerModelWithLMHead
from ..registry import CAUSAL_LM, ModelFamily, register_family


# ---- HuggingFace checkpoints ---------------------------------------------------------------------
def _axis_vectors(array):
    """HuggingFace's axial weight (n1, 1, d1) or (1, n2, d2) -> our (n, d) rows or columns."""
    return np.ascontiguousarray(array.reshape(-1, array.shape[-1]))


def _rows_to_hf(array):
    return array[:, None, :]


def _columns_to_hf(array):
    return array[None, :, :]


_LAYER = "encoder.layers.{i}.", "encoder.blocks.{i}."


def _reformer_rules(prefix):
    """The key map of a Reformer body whose keys start with ``prefix`` in both models
    ("reformer." under the LM head, "" for the bare ``ReformerModel``)."""
    hf, ours = (prefix + part for part in _LAYER)
    rules = [
        Rule(f"{prefix}embeddings.word_embeddings.weight", f"{prefix}word_embeddings.weight"),
        Rule(f"{prefix}embeddings.position_embeddings.weights.0",
             f"{prefix}position_embeddings.rows", to_ours=_axis_vectors, to_hf=_rows_to_hf,
             optional=True),
        Rule(f"{prefix}embeddings.position_embeddings.weights.1",
             f"{prefix}position_embeddings.columns", to_ours=_axis_vectors,
             to_hf=_columns_to_hf, optional=True),
        Rule(f"{prefix}embeddings.position_embeddings.embedding.weight",
             f"{prefix}position_embeddings.table", optional=True),
        Rule(f"{hf}attention.self_attention.value.weight", f"{ours}f.sublayer.v_proj.weight"),
        Rule(f"{hf}attention.output.dense.weight", f"{ours}f.sublayer.out_proj.weight"),
        Rule(f"{prefix}encoder.layer_norm.weight", f"{prefix}norm.weight"),
        Rule(f"{prefix}encoder.layer_norm.bias", f"{prefix}norm.bias")]
    rules += [Rule(f"{hf}{hf_name}.{kind}", f"{ours}{our_name}.{kind}")
              for hf_name, our_name in (
                  ("attention.layer_norm", "f.norm"),
                  ("feed_forward.layer_norm", "g.feed_forward.norm"),
                  ("feed_forward.dense.dense", "g.feed_forward.sublayer.linear1"),
                  ("feed_forward.output.dense", "g.feed_forward.sublayer.linear2"))
              for kind in ("weight", "bias")]
    return tuple(rules)


@dataclass(frozen=True)
class _ReformerArchitecture(HFArchitecture):
    """The Reformer's key map: the common rules, and per layer the query projection under
    HuggingFace's name for its kind (``query_key`` for LSH layers, ``query`` and ``key`` for
    local ones; an LSH layer of ours has no ``k_proj``). ``prefix``: the body's key prefix."""

    prefix: str = ""

    def expanded_rules(self, our_keys):
        rules = super().expanded_rules(our_keys)
        hf, ours = (self.prefix + part for part in _LAYER)
        blocks = re.compile(re.escape(ours).replace(re.escape("{i}"), r"(\d+)"))
        for i in sorted({int(m.group(1)) for key in our_keys if (m := blocks.match(key))}):
            attention_hf = hf.format(i=i) + "attention.self_attention."
            attention = ours.format(i=i) + "f.sublayer."
            pairs = ((("query", "q_proj"), ("key", "k_proj"))
                     if attention + "k_proj.weight" in our_keys else (("query_key", "q_proj"),))
            rules += [Rule(f"{attention_hf}{name}.weight", f"{attention}{our}.weight")
                      for name, our in pairs]
        return rules


# transformers 5.23 no longer adds lm_head.bias (4.x tied it as lm_head.decoder.bias); we add
# it, as 4.x and the original trax code do.
register_architecture(_ReformerArchitecture(
    name="ReformerModel", model_type="reformer", model_class=ReformerModel,
    from_config=lambda hf: ReformerModel(ReformerConfig.from_hf(hf)),
    to_config=lambda model: model.config.to_hf(), rules=_reformer_rules(""),
    default_for_type=True))
register_architecture(_ReformerArchitecture(
    name="ReformerModelWithLMHead", model_type="reformer", model_class=ReformerModelWithLMHead,
    from_config=lambda hf: ReformerModelWithLMHead(ReformerConfig.from_hf(hf)),
    to_config=lambda model: model.config.to_hf(),
    rules=_reformer_rules("reformer.") + (Rule("lm_head.decoder.weight", "lm_head.weight"),
                                          Rule("lm_head.bias", "lm_head.bias")),
    prefix="reformer."))


# ---- the model registry (minitorch_nlp.models.registry): training, command line, generation ------


def _axial_shape(positions):
    """(n1, n2) with n1 * n2 = ``positions`` and n1 the largest divisor <= sqrt(positions)."""
    n1 = max(d for d in range(1, math.isqrt(positions) + 1) if positions % d == 0)
    return n1, positions // n1


def _build_for_training(settings, tokenizer):
    """A causal Reformer for a run's ``settings``: layers alternating LSH and local attention
    (LSH first, so that a one-layer model hashes too), chunks of a quarter of the context, 2n/m
    buckets (the paper's advice), two hashing rounds, axial positions over the context."""
    width = settings.n_embd          # TrainConfig checks that n_head divides it
    chunk = max(1, settings.block_size // 4)
    return ReformerModelWithLMHead(ReformerConfig(
        vocab_size=len(tokenizer), hidden_size=width, num_attention_heads=settings.n_head,
        attention_head_size=width // settings.n_head,
        attn_layers=tuple(ATTENTION_TYPES[i % 2] for i in range(settings.n_layer)),
        num_buckets=max(2, 2 * (settings.block_size // chunk)), num_hashes=2,
        lsh_attn_chunk_length=chunk, local_attn_chunk_length=chunk,
        feed_forward_size=4 * width, hidden_dropout_prob=settings.dropout,
        local_attention_probs_dropout_prob=settings.dropout,
        max_position_embeddings=settings.block_size,
        axial_pos_shape=_axial_shape(settings.block_size),
        axial_pos_embds_dim=(width // 2, width - width // 2), is_decoder=True,
        pad_token_id=0, eos_token_id=None))


register_family(ModelFamily(
    name="reformer", summary="a causal Reformer: LSH and local attention in reversible layers "
    "(eq 96-105), next-token prediction", objective=CAUSAL_LM, build=_build_for_training,
    default_tokenizer="char", bpe_style="gpt2", hf_architectures=("ReformerModelWithLMHead",)))
