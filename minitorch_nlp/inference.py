"""A trained model ready to use: loaded from a run's checkpoint (one that ``compress`` shrank
too) or from a HuggingFace directory, with its tokenizer and its model family, for
``minitorch-nlp generate`` or your own code."""
from __future__ import annotations

import os

from .compress.checkpoints import rebuild
from .data.tokenizers import load_tokenizer
from .io.huggingface import CONFIG_NAME, architecture_for, from_pretrained, read_config
from .io.runs import read_checkpoint
from .models import registry
from .training import saved_model

__all__ = ["load_for_inference"]


def load_for_inference(path, backend=None):
    """(model in eval mode, tokenizer, its ``registry.ModelFamily``) from a checkpoint written
    by ``training.LanguageModelRun`` (the file or its run directory), or from a HuggingFace
    directory (``config.json`` + ``model.safetensors`` + the tokenizer's files, e.g. one written
    by ``save_pretrained`` and ``tokenizer.save``)."""
    if os.path.isfile(os.path.join(os.fspath(path), CONFIG_NAME)):
        family = registry.family_for_architecture(architecture_for(read_config(path)).name)
        return from_pretrained(path, backend=backend), load_tokenizer(path), family
    state = read_checkpoint(path)
    # a run written by `minitorch-nlp compress` records the structure it cut the model to
    return saved_model(state, backend, lambda model: rebuild(model, state.get("compression")))
