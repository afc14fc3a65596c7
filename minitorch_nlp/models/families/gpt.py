"""GPT-1 and GPT-2 as the rest of the library sees it: its HuggingFace key map (our parameter names
<-> HuggingFace's, with the transposes and fused tensors) and its registrations for
``from_pretrained`` and for training and generation from the command line (``models.registry``).
The model itself is ``models.gpt``."""
from __future__ import annotations

from ...io.huggingface import (HFArchitecture, Rule, concat_columns, register_architecture,
                               split_columns, transpose)
from ...nn.moe import mixture_every_other_layer
from ..configs.gpt import GPTConfig
from ..gpt import GPT2LMHeadModel, GPTDoubleHeadsModel, GPTLMHeadModel
from ..registry import CAUSAL_LM, ModelFamily, register_family


# ---- HuggingFace checkpoints ---------------------------------------------------------------------
def _block_rules():
    """One block's tensors. HuggingFace's Conv1D stores its weight (in, out), hence the
    transposes; ``c_attn`` holds W^Q, W^K, W^V side by side. ``ln_1`` / ``ln_2`` are the norms
    after (GPT-1) or before (GPT-2) the attention and the MLP: our norm1 / norm2 either way."""
    hf, ours = "transformer.h.{i}.", "transformer.blocks.layers.{i}."
    qkv = [f"{ours}self_attn.{name}_proj" for name in "qkv"]
    rules = [Rule(f"{hf}attn.c_attn.weight", tuple(f"{n}.weight" for n in qkv),
                  to_ours=split_columns(3, transposed=True), to_hf=concat_columns(transposed=True)),
             Rule(f"{hf}attn.c_attn.bias", tuple(f"{n}.bias" for n in qkv),
                  to_ours=split_columns(3), to_hf=concat_columns())]
    for hf_name, our_name in (("attn.c_proj", "self_attn.out_proj"),
                              ("mlp.c_fc", "feed_forward.linear1"),
                              ("mlp.c_proj", "feed_forward.linear2")):
        rules += [Rule(f"{hf}{hf_name}.weight", f"{ours}{our_name}.weight", to_ours=transpose),
                  Rule(f"{hf}{hf_name}.bias", f"{ours}{our_name}.bias")]
    for i in (1, 2):
        rules += [Rule(f"{hf}ln_{i}.{kind}", f"{ours}norm{i}.{kind}")
                  for kind in ("weight", "bias")]
    return tuple(rules)


GPT1_RULES = (Rule("transformer.tokens_embed.weight", "transformer.wte.weight"),
              Rule("transformer.positions_embed.weight", "transformer.wpe.table")) + _block_rules()
GPT2_RULES = (Rule("transformer.wte.weight", "transformer.wte.weight"),
              Rule("transformer.wpe.weight", "transformer.wpe.table"),
              Rule("transformer.ln_f.weight", "transformer.blocks.norm.weight"),
              Rule("transformer.ln_f.bias", "transformer.blocks.norm.bias")) + _block_rules()
# HuggingFace's causal-mask buffers (saved by older versions) and the LM head, a tied copy of W_e.
LM_IGNORE = (r"lm_head\.weight", r"transformer\.h\.\d+\.attn\.(masked_)?bias")

register_architecture(HFArchitecture(
    name="OpenAIGPTLMHeadModel", model_type="openai-gpt", model_class=GPTLMHeadModel,
    from_config=lambda hf: GPTLMHeadModel(GPTConfig.from_hf(hf)),
    to_config=lambda model: model.config.to_hf(), rules=GPT1_RULES, ignore=LM_IGNORE,
    base_prefix="transformer.", default_for_type=True))
register_architecture(HFArchitecture(
    name="GPT2LMHeadModel", model_type="gpt2", model_class=GPT2LMHeadModel,
    from_config=lambda hf: GPT2LMHeadModel(GPTConfig.from_hf(hf)),
    to_config=lambda model: model.config.to_hf(), rules=GPT2_RULES, ignore=LM_IGNORE,
    base_prefix="transformer.", default_for_type=True))
# transformers 5 writes the double-heads model's tied W_e under lm_head.weight (its tie runs the
# other way round), so that is the key we write; 4.x wrote transformer.tokens_embed.weight.
register_architecture(HFArchitecture(
    name="OpenAIGPTDoubleHeadsModel", model_type="openai-gpt", model_class=GPTDoubleHeadsModel,
    from_config=lambda hf: GPTDoubleHeadsModel(GPTConfig.from_hf(hf)),
    to_config=lambda model: model.config.to_hf(),
    rules=(Rule("lm_head.weight", "transformer.wte.weight",
                also=("transformer.tokens_embed.weight",)),
           Rule("multiple_choice_head.summary.weight", "multiple_choice_head.summary.weight"),
           Rule("multiple_choice_head.summary.bias", "multiple_choice_head.summary.bias"))
    + GPT1_RULES[1:]))


# ---- the model registry (minitorch_nlp.models.registry): training, command line, generation ------


def _build_for_training(settings, tokenizer):
    """A GPT-2-style model for a run's ``settings`` (``training.TrainConfig``); no end-of-text
    id, so ``generate`` never stops early and a sample is as long as asked. With
    ``settings.experts`` E, every other layer's feed-forward network is GShard's mixture of E
    experts (top-2, every second expert that fits, each sequence a routing group of its own)."""
    model = GPT2LMHeadModel(GPTConfig.gpt2(
        vocab_size=len(tokenizer), n_positions=settings.block_size, n_embd=settings.n_embd,
        n_layer=settings.n_layer, n_head=settings.n_head, resid_pdrop=settings.dropout,
        embd_pdrop=settings.dropout, attn_pdrop=settings.dropout,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=None))
    if getattr(settings, "experts", 0):
        mixture_every_other_layer(model.transformer.blocks.layers, settings.experts,
                                  second_expert="all", group_size="sequence")
    return model


register_family(ModelFamily(
    name="gpt", summary="a GPT-2-style decoder trained on next-token prediction (eq 18, L1)",
    objective=CAUSAL_LM, build=_build_for_training, default_tokenizer="char", bpe_style="gpt2",
    hf_architectures=("GPT2LMHeadModel", "OpenAIGPTLMHeadModel"), trains_in_parallel=True,
    takes_experts=True))
