"""DPR's encoders as the rest of the library sees it: its HuggingFace key map (our parameter names
<-> HuggingFace's, with the transposes and fused tensors) and its registrations for
``from_pretrained`` and for training and generation from the command line (``models.registry``).
The model itself is ``models.dpr``."""
from __future__ import annotations

from ...io.huggingface import HFArchitecture, register_architecture
from ..configs.dpr import DPRConfig
from ..dpr import DPRContextEncoder, DPRQuestionEncoder
from .bert import BERT_IGNORE, bert_rules, weight_and_bias

# ---- HuggingFace checkpoints (minitorch_nlp.io.huggingface) --------------------------------------
for _model_class in (DPRQuestionEncoder, DPRContextEncoder):
    _prefix = f"{_model_class.encoder_name}."
    register_architecture(HFArchitecture(
        name=_model_class.__name__, model_type=DPRConfig.model_type, model_class=_model_class,
        from_config=lambda hf_config, model_class=_model_class: model_class(
            DPRConfig.from_hf(hf_config)),
        to_config=lambda model: model.config.to_hf(),
        rules=tuple(bert_rules(f"{_prefix}bert_model.", f"{_prefix}bert_model.", pooler=False)
                    + weight_and_bias(f"{_prefix}encode_proj", f"{_prefix}encode_proj",
                                      optional=True)),
        ignore=tuple(f"{_prefix}bert_model\\.{pattern}" for pattern in BERT_IGNORE)))
