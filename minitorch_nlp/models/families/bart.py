"""BART and mBART as the rest of the library sees it: its HuggingFace key map (our parameter names
<-> HuggingFace's, with the transposes and fused tensors) and its registrations for
``from_pretrained`` and for training and generation from the command line (``models.registry``).
The model itself is ``models.bart``."""
from __future__ import annotations

import numpy as np

from ...data.bart_noising import Compose, SentencePermutation, TextInfilling
from ...io.huggingface import HFArchitecture, Rule, register_architecture
from ..bart import BartForConditionalGeneration, BartModel, MBartForConditionalGeneration
from ..configs.bart import BartConfig, MBartConfig
from ..registry import ModelFamily, Objective, register_family


# ---- HuggingFace checkpoints ---------------------------------------------------------------------
def _weight_and_bias(hf, ours):
    return [Rule(f"{hf}.{kind}", f"{ours}.{kind}") for kind in ("weight", "bias")]


def _attention_rules(hf, ours):
    return [rule for name in ("q", "k", "v") for rule in
            _weight_and_bias(f"{hf}.{name}_proj", f"{ours}.{name}_proj")] + \
        _weight_and_bias(f"{hf}.out_proj", f"{ours}.out_proj")


def _stack_rules(prefix, side, pre_ln):
    hf, ours = f"{prefix}{side}", f"{prefix}{side}"
    layer_hf, layer = f"{hf}.layers.{{i}}", f"{ours}.stack.layers.{{i}}"
    feed_forward_norm = "norm3" if side == "decoder" else "norm2"
    rules = [Rule(f"{hf}.embed_positions.weight", f"{ours}.embed_positions.table"),
             *_weight_and_bias(f"{hf}.layernorm_embedding", f"{ours}.layernorm_embedding"),
             *_attention_rules(f"{layer_hf}.self_attn", f"{layer}.self_attn"),
             *_weight_and_bias(f"{layer_hf}.self_attn_layer_norm", f"{layer}.norm1"),
             *_weight_and_bias(f"{layer_hf}.fc1", f"{layer}.feed_forward.linear1"),
             *_weight_and_bias(f"{layer_hf}.fc2", f"{layer}.feed_forward.linear2"),
             *_weight_and_bias(f"{layer_hf}.final_layer_norm", f"{layer}.{feed_forward_norm}")]
    if side == "decoder":
        rules += [*_attention_rules(f"{layer_hf}.encoder_attn", f"{layer}.cross_attn"),
                  *_weight_and_bias(f"{layer_hf}.encoder_attn_layer_norm", f"{layer}.norm2")]
    if pre_ln:
        rules += _weight_and_bias(f"{hf}.layer_norm", f"{ours}.stack.norm")
    return rules


def _model_rules(prefix, pre_ln):
    return tuple([Rule(f"{prefix}shared.weight", f"{prefix}shared.weight")]
                 + _stack_rules(prefix, "encoder", pre_ln)
                 + _stack_rules(prefix, "decoder", pre_ln))


# tied copies of the shared embedding
_IGNORE = (r"(model\.)?(encoder|decoder)\.embed_tokens\.weight", r"lm_head\.weight")

for _name, _model_type, _class, _config, _rules in (
        ("BartModel", "bart", BartModel, BartConfig, _model_rules("", False)),
        ("BartForConditionalGeneration", "bart", BartForConditionalGeneration, BartConfig,
         _model_rules("model.", False) + (Rule("final_logits_bias", "final_logits_bias"),)),
        ("MBartForConditionalGeneration", "mbart", MBartForConditionalGeneration, MBartConfig,
         _model_rules("model.", True) + (Rule("final_logits_bias", "final_logits_bias"),))):
    register_architecture(HFArchitecture(
        name=_name, model_type=_model_type, model_class=_class,
        from_config=lambda hf, cls=_class, config=_config: cls(config.from_hf(hf)),
        to_config=lambda model: model.config.to_hf(), rules=_rules, ignore=_IGNORE,
        default_for_type=_class is not BartModel))


# ---- the model registry (minitorch_nlp.models.registry): training, command line, generation ------


def _denoising_batcher(tokenizer, mask_prob):
    """(noised inputs, originals, attention mask): each window wrapped in <s> .. </s>, its
    sentences permuted and text infilled (``mask_prob`` of its tokens masked, the paper's best
    setting); the inputs padded to the longest, the labels the original windows."""
    ends = tuple(i for i in range(len(tokenizer))
                 if tokenizer.decode([i]).rstrip().endswith((".", "!", "?")))
    specials = (tokenizer.bos_token_id, tokenizer.eos_token_id)
    infill = TextInfilling(tokenizer.mask_token_id, mask_ratio=mask_prob, protected=specials)
    noise = Compose(SentencePermutation(ends), infill) if ends else infill

    def make_batch(windows, rng):
        column = np.ones((len(windows), 1), dtype=np.int64)
        originals = np.concatenate([column * tokenizer.bos_token_id, windows,
                                    column * tokenizer.eos_token_id], axis=1)
        noised = [noise(row, rng) for row in originals]
        time = max(len(row) for row in noised)
        inputs = np.full((len(windows), time), tokenizer.pad_token_id, dtype=np.int64)
        mask = np.zeros(inputs.shape, dtype=bool)
        for i, row in enumerate(noised):
            inputs[i, :len(row)], mask[i, :len(row)] = row, True
        return inputs, originals, mask
    return make_batch


def _reconstruct(model, tokenizer, prompt, **options):
    """The model's greedy reconstruction of ``prompt`` (write <mask> where text is missing), at
    most ``max_new_tokens`` long and no longer than the decoder's position table allows."""
    ids = tokenizer.encode(prompt)
    limit = model.config.max_position_embeddings
    if len(ids) > limit:
        raise ValueError(f"generate: the prompt is {len(ids)} tokens, more than this model's "
                         f"max_position_embeddings={limit}")
    length = min(options.get("max_new_tokens", limit - 1), limit - 1)
    out = model.generate(np.asarray([ids]), max_new_tokens=length)
    return tokenizer.decode(out[0].tolist(), skip_special_tokens=True)


DENOISING = Objective("denoising", extra_tokens=2, batcher=_denoising_batcher,
                      respond=_reconstruct, generates_text=False)


def _build_for_training(settings, tokenizer):
    """A BART for a run's ``settings``: n_layer layers in each stack, n_head heads, n_embd wide,
    d_ff = 4 n_embd; room for twice ``block_size`` positions, since text infilling's zero-length
    spans can make a noised window longer than the original."""
    return BartForConditionalGeneration(BartConfig(
        vocab_size=len(tokenizer), d_model=settings.n_embd, encoder_layers=settings.n_layer,
        decoder_layers=settings.n_layer, encoder_attention_heads=settings.n_head,
        decoder_attention_heads=settings.n_head, encoder_ffn_dim=4 * settings.n_embd,
        decoder_ffn_dim=4 * settings.n_embd, dropout=settings.dropout,
        max_position_embeddings=2 * settings.block_size, pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        decoder_start_token_id=tokenizer.eos_token_id,
        forced_eos_token_id=tokenizer.eos_token_id))


_NEEDS_MASK = ("BART's text infilling needs a <mask> and <s> .. </s> tokens, which the "
               "{} tokenizer lacks; use bpe")
register_family(ModelFamily(
    name="bart", summary="BART, an encoder-decoder pretrained to reconstruct noised text "
                         "(text infilling + sentence permutation, section V-B)",
    objective=DENOISING, build=_build_for_training, default_tokenizer="bpe", bpe_style="roberta",
    refused_tokenizers={"char": _NEEDS_MASK.format("char"),
                        "wordpiece": _NEEDS_MASK.format("WordPiece")},
    hf_architectures=("BartForConditionalGeneration", "MBartForConditionalGeneration")))
