"""The model registry: what training, the command line, generation and HuggingFace loading need
to know about each model family, so that none of them branches on a model's name.

A family registers itself in its module of ``models/families/`` (``families/gpt.py``,
``families/bert.py``, ``families/roberta.py``), beside its HuggingFace key map::

    register_family(ModelFamily(
        name="gpt", summary="a GPT-2-style decoder, next-token prediction (eq 18, L1)",
        objective=CAUSAL_LM, build=build_for_training, default_tokenizer="char",
        bpe_style="gpt2", hf_architectures=("GPT2LMHeadModel", "OpenAIGPTLMHeadModel")))

* ``build(settings, tokenizer)`` makes a fresh model from a run's settings (any object with
  ``n_layer``, ``n_head``, ``n_embd``, ``block_size``, ``dropout``, e.g. ``training.TrainConfig``)
  and its tokenizer (the vocabulary size and the special tokens' ids come from it);
* ``default_tokenizer`` is the tokenizer ``train NAME`` uses when none is given, and
  ``refused_tokenizers`` maps each tokenizer the family cannot train with to the reason;
  ``bpe_style`` is the set of special tokens a byte-level BPE trained for it gets (``gpt2``,
  ``roberta``);
* ``objective`` (``CAUSAL_LM``, ``CAUSAL_LM_WITH_MEMORY``, ``MASKED_LM``) says how a window of
  text becomes a batch, whether a memory passes from batch to batch, and what
  ``generate`` does with the model: continue the prompt, or fill its masks;
* ``hf_architectures`` names the HuggingFace architectures (registered with
  ``io.huggingface.register_architecture``, whose key maps sit beside this registration) that
  ``minitorch-nlp generate`` treats as this family;
* ``trains_in_parallel`` says that ``train --parallel`` / ``--zero`` can split the family's model
  (``distributed.training``: Megatron's tensor parallelism of GPT-2, data parallelism on a
  token-mean loss); ``takes_experts`` that ``train --experts E`` can make its feed-forward
  networks mixtures of experts;
* ``progress(model, fraction)``, when given, is called before each training step with the
  fraction of the run done, for objectives that change during training (the character
  Transformer drops its intermediate layers' losses on a schedule).

Adding a model means writing its module in ``minitorch_nlp/models/`` (the paper's classes), its
configuration in ``models/configs/`` and its registration in ``models/families/``:
``import_model_modules`` imports every module of ``models/families/``, so nothing else lists
the models.
"""
from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from collections.abc import Callable

import numpy as np

__all__ = ["CAUSAL_LM", "CAUSAL_LM_WITH_MEMORY", "MASKED_LM", "ModelFamily", "Objective",
           "families", "family", "family_for_architecture", "import_model_modules",
           "register_family"]


@dataclass(frozen=True)
class Objective:
    """A training objective on windows of one long token stream.

    ``extra_tokens``: how many special tokens ``batcher`` adds around a window, so that a window
    plus them fills the model's context; ``batcher(tokenizer, mask_prob)`` returns
    ``make_batch(windows, rng) -> (input_ids, labels)`` for windows (batch, time) of token ids
    (or ``(input_ids, labels, attention_mask)`` when the inputs are padded);
    ``respond(model, tokenizer, prompt, **options)`` is what ``generate`` prints: the prompt
    continued (``decoding.generate_text``) or its masks filled (``decoding.fill_masks``).
    ``generates_text``: whether ``respond`` samples (and so takes the sampling options).
    ``carries_memory``: training reads the text as ``batch_size`` parallel streams, each step
    the next segment of every stream, and hands the model's memory of the segments before on to
    the next step (``model(..., mems=memory)`` returning ``.mems``, as HuggingFace's
    Transformer-XL and XLNet), starting again from the streams' beginnings, with an empty
    memory, when they are used up."""

    name: str
    extra_tokens: int
    batcher: Callable
    respond: Callable
    generates_text: bool
    carries_memory: bool = False

    def window_length(self, block_size):
        """Text tokens per example for a model that reads ``block_size`` tokens."""
        return block_size - self.extra_tokens


def _causal_batcher(tokenizer, mask_prob):
    def make_batch(windows, rng):
        return windows, windows   # the model shifts the labels: token t+1 from tokens <= t
    return make_batch


def _masked_batcher(tokenizer, mask_prob):
    from ..data.masking import MaskedLMCollator
    collator = MaskedLMCollator.from_tokenizer(tokenizer, mlm_probability=mask_prob)

    def make_batch(windows, rng):
        column = np.ones((len(windows), 1), dtype=np.int64)
        ids = np.concatenate([column * tokenizer.cls_token_id, windows,
                              column * tokenizer.sep_token_id], axis=1)
        masked = collator(ids, rng=rng)   # a fresh mask each time (RoBERTa's dynamic masking)
        return masked["input_ids"], masked["labels"]
    return make_batch


def _continue_prompt(model, tokenizer, prompt, **options):
    from ..decoding import generate_text
    return generate_text(model, tokenizer, prompt, **options)


def _fill_masks(model, tokenizer, prompt, **options):
    from ..decoding import fill_masks
    return fill_masks(model, tokenizer, prompt)


CAUSAL_LM = Objective("causal-lm", extra_tokens=0, batcher=_causal_batcher,
                      respond=_continue_prompt, generates_text=True)
CAUSAL_LM_WITH_MEMORY = Objective("causal-lm-with-memory", extra_tokens=0,
                                  batcher=_causal_batcher, respond=_continue_prompt,
                                  generates_text=True, carries_memory=True)
MASKED_LM = Objective("masked-lm", extra_tokens=2, batcher=_masked_batcher,
                      respond=_fill_masks, generates_text=False)


@dataclass(frozen=True)
class ModelFamily:
    """One model family as training, the command line and generation see it; see the module
    docstring for each field."""

    name: str
    summary: str
    objective: Objective
    build: Callable
    default_tokenizer: str
    bpe_style: str
    refused_tokenizers: dict = field(default_factory=dict)
    hf_architectures: tuple = ()
    trains_in_parallel: bool = False
    takes_experts: bool = False
    progress: Callable | None = None

    def check_tokenizer(self, tokenizer):
        """Raise ``ValueError`` saying why, when this family cannot train with ``tokenizer``."""
        if tokenizer in self.refused_tokenizers:
            raise ValueError(f"a {self.name} cannot use the {tokenizer} tokenizer: "
                             f"{self.refused_tokenizers[tokenizer]}")


_FAMILIES: dict[str, ModelFamily] = {}


def register_family(model_family):
    """Make ``model_family`` known to training, the command line and generation."""
    if not isinstance(model_family, ModelFamily):
        raise TypeError(f"register_family: expected a ModelFamily, got "
                        f"{type(model_family).__name__}")
    _FAMILIES[model_family.name] = model_family
    return model_family


def import_model_modules():
    """Import every module of ``minitorch_nlp.models.families`` (each imports its model module),
    so that all registrations (families and HuggingFace architectures) have run."""
    package = importlib.import_module("minitorch_nlp.models.families")
    for module in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{package.__name__}.{module.name}")


def families():
    """The registered families by name, in registration order."""
    import_model_modules()
    return dict(_FAMILIES)


def family(name):
    """The family called ``name``; ``ValueError`` listing the known ones otherwise."""
    known = families()
    if name not in known:
        raise ValueError(f"unknown model {name!r}; choose one of {', '.join(known)}")
    return known[name]


def family_for_architecture(architecture):
    """The family that treats the HuggingFace ``architecture`` (e.g. ``"GPT2LMHeadModel"``) as
    one of its own; ``ValueError`` naming those that can be used otherwise."""
    for candidate in families().values():
        if architecture in candidate.hf_architectures:
            return candidate
    usable = sorted(name for f in _FAMILIES.values() for name in f.hf_architectures)
    raise ValueError(f"a {architecture} neither generates text nor fills masks; give a model "
                     f"directory of one of: {', '.join(usable)}")
