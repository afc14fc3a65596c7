"""T5 as the rest of the library sees it: its HuggingFace key map (our parameter names
<-> HuggingFace's, with the transposes and fused tensors) and its registrations for
``from_pretrained`` and for training and generation from the command line (``models.registry``).
The model itself is ``models.t5``."""
from __future__ import annotations

import re

import numpy as np

from ...data.span_corruption import span_corruption
from ...io.huggingface import HFArchitecture, Rule, register_architecture
from ..configs.t5 import T5Config
from ..registry import ModelFamily, Objective, register_family
from ..t5 import T5EncoderModel, T5ForConditionalGeneration, T5Model


# ---- HuggingFace checkpoints ---------------------------------------------------------------------
def _attention_rules(hf, ours):
    return [Rule(f"{hf}.{h}.weight", f"{ours}.{o}_proj.weight")
            for h, o in (("q", "q"), ("k", "k"), ("v", "v"), ("o", "out"))]


def _stack_rules(stack, is_decoder):
    """One stack's tensors: HuggingFace's ``layer.0`` is the self-attention sub-layer, then
    ``layer.1`` the cross-attention (decoder) and the last the feed-forward one; each holds its
    own RMS norm (our norm1, norm2, norm3)."""
    hf, ours = f"{stack}.block.{{i}}.layer", f"{stack}.layers.{{i}}"
    feed_forward = 2 if is_decoder else 1
    rules = _attention_rules(f"{hf}.0.SelfAttention", f"{ours}.self_attn")
    rules += [Rule(f"{hf}.0.layer_norm.weight", f"{ours}.norm1.weight"),
              Rule(f"{hf}.{feed_forward}.layer_norm.weight",
                   f"{ours}.norm{feed_forward + 1}.weight"),
              Rule(f"{stack}.final_layer_norm.weight", f"{stack}.norm.weight"),
              Rule(f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
                   f"{stack}.position_bias.relative_attention_bias.weight")]
    for name in ("wi", "wi_0", "wi_1", "wo"):   # wi, or v1.1's gated wi_0 and wi_1
        rules.append(Rule(f"{hf}.{feed_forward}.DenseReluDense.{name}.weight",
                          f"{ours}.feed_forward.{name}.weight", optional=name != "wo"))
    if is_decoder:
        rules += _attention_rules(f"{hf}.1.EncDecAttention", f"{ours}.cross_attn")
        rules.append(Rule(f"{hf}.1.layer_norm.weight", f"{ours}.norm2.weight"))
    return rules


# the embedding's tied copies; HuggingFace's decoder may keep an unused cross-attention bias
_T5_IGNORE = (r"(encoder|decoder)\.embed_tokens\.weight",
              r"decoder\.block\.0\.layer\.1\.EncDecAttention\.relative_attention_bias\.weight")
_EMBEDDING = [Rule("shared.weight", "shared.weight")]
_ENCODER = _EMBEDDING + _stack_rules("encoder", is_decoder=False)
_ENCODER_DECODER = _ENCODER + _stack_rules("decoder", is_decoder=True)

for _model_class, _rules, _ignore in (
        (T5EncoderModel, _ENCODER, _T5_IGNORE),
        (T5Model, _ENCODER_DECODER, _T5_IGNORE),
        (T5ForConditionalGeneration,
         _ENCODER_DECODER + [Rule("lm_head.weight", "lm_head.weight", optional=True)],
         _T5_IGNORE + (r"lm_head\.weight",))):
    register_architecture(HFArchitecture(
        name=_model_class.__name__, model_type="t5", model_class=_model_class,
        from_config=lambda hf, cls=_model_class: cls(T5Config.from_hf(hf)),
        to_config=lambda model: model.config.to_hf(), rules=tuple(_rules), ignore=_ignore,
        default_for_type=_model_class is T5ForConditionalGeneration))


# ---- the model registry (minitorch_nlp.models.registry): training, command line, generation ------

_SENTINEL = re.compile(r"<extra_id_(\d+)>")


def sentinel_count(window_length):
    """How many sentinels a model trained on windows of ``window_length`` tokens gets: enough
    for span corruption's spans at any noise density up to 0.3 with mean span length 3, plus
    the closing one."""
    return window_length // 10 + 2


def _span_corruption_batcher(tokenizer, mask_prob):
    """(inputs, targets) from windows of text by span corruption, ``mask_prob`` the noise
    density; the sentinels are the ids after the tokenizer's, <extra_id_0> the last."""
    def make_batch(windows, rng):
        vocab_size = len(tokenizer) + sentinel_count(windows.shape[1])
        sentinels = np.arange(vocab_size - 1, len(tokenizer) - 1, -1)
        pairs = [span_corruption(window, sentinels, mask_prob, 3.0, rng, tokenizer.eos_token_id)
                 for window in windows]
        return np.stack([p[0] for p in pairs]), np.stack([p[1] for p in pairs])
    return make_batch


def _sentinel_ids(model, tokenizer):
    """The id of each ``<extra_id_k>``, k = 0, 1 ...: the tokenizer's own sentinel tokens when
    it has them (a HuggingFace T5 tokenizer), else the model's ids after the tokenizer's,
    <extra_id_0> the last (as ``train t5`` lays them out)."""
    ids = []
    while f"<extra_id_{len(ids)}>" in tokenizer.vocab:
        ids.append(tokenizer.vocab[f"<extra_id_{len(ids)}>"])
    return ids or list(range(model.config.vocab_size - 1, len(tokenizer) - 1, -1))


def _fill_spans(model, tokenizer, prompt, **options):
    """The prompt with each ``<extra_id_k>`` replaced by the span the model writes for it
    (greedy); a prompt without one gets <extra_id_0> at its end, so that the model continues
    it."""
    sentinel_ids = _sentinel_ids(model, tokenizer)
    sentinel_of = {index: k for k, index in enumerate(sentinel_ids)}
    if not _SENTINEL.search(prompt):
        prompt += "<extra_id_0>"
    pieces, ids = _SENTINEL.split(prompt), []
    for i, piece in enumerate(pieces):
        if i % 2 == 0:
            ids += tokenizer.encode(piece, add_special_tokens=False)
        elif not 0 <= int(piece) < len(sentinel_ids):
            raise ValueError(f"generate: <extra_id_{piece}> is not one of this model's "
                             f"{len(sentinel_ids)} sentinels (<extra_id_0> .. "
                             f"<extra_id_{len(sentinel_ids) - 1}>)")
        else:
            ids.append(sentinel_ids[int(piece)])
    ids.append(tokenizer.eos_token_id)
    out = model.generate(np.asarray([ids]), max_new_tokens=options.get("max_new_tokens", 64))
    spans, current = {}, None
    for token in out[0, 1:].tolist():
        if token == tokenizer.eos_token_id:
            break
        if token in sentinel_of:
            current = spans.setdefault(sentinel_of[token], [])
        elif current is not None and token < len(tokenizer):
            current.append(token)
    return "".join(tokenizer.decode(spans.get(int(piece), []), skip_special_tokens=True)
                   if i % 2 else piece for i, piece in enumerate(pieces))


SPAN_CORRUPTION = Objective("span-corruption", extra_tokens=0, batcher=_span_corruption_batcher,
                            respond=_fill_spans, generates_text=False)


def _build_for_training(settings, tokenizer):
    """A T5 (v1.0 layout) for a run's ``settings``: n_embd wide, n_layer layers in each stack,
    n_head heads, d_ff = 4 n_embd, the tokenizer's ids plus the sentinels."""
    return T5ForConditionalGeneration(T5Config(
        vocab_size=len(tokenizer) + sentinel_count(settings.block_size), d_model=settings.n_embd,
        d_kv=settings.n_embd // settings.n_head, d_ff=4 * settings.n_embd,
        num_layers=settings.n_layer, num_heads=settings.n_head,
        dropout_rate=settings.dropout, pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id, decoder_start_token_id=tokenizer.pad_token_id))


register_family(ModelFamily(
    name="t5", summary="T5, an encoder-decoder pretrained by span corruption (section V-D)",
    objective=SPAN_CORRUPTION, build=_build_for_training, default_tokenizer="char",
    bpe_style="roberta",
    refused_tokenizers={"wordpiece": "T5 needs an end-of-sequence token, and the WordPiece "
                                     "tokenizer has none; use char or bpe"},
    hf_architectures=("T5ForConditionalGeneration",)))
