"""A file's sizes are data: the sizes a configuration gives (layers, width, context, vocabulary)
are checked against the weights the same file stores, before a model of those sizes is built.

Building a model allocates what its configuration says; a header or a ``config.json`` whose
``n_layer`` is 1e9 would make the process grow until it is killed. ``check_sizes`` refuses such
a configuration first, by rules that hold for every family: each size is a whole number within
sane bounds; the width is a dimension of some stored array; the layers the configuration
describes, each holding at least width x width weights, cannot outweigh the stored weights by
more than a small factor (layers shared as in ALBERT stay within it). What passes is then
checked key by key and shape by shape when the weights are loaded."""
from __future__ import annotations

import math

__all__ = ["MAX_POSITIONS", "MAX_VOCABULARY", "check_sizes"]

MAX_POSITIONS = 1 << 17
MAX_VOCABULARY = 1 << 22
_LAYER_ALLOWANCE = 16     # how many times the stored weights the described layers may hold

# the names each role goes by in our configurations and in HuggingFace's config.json
_WIDTH = ("n_embd", "hidden_size", "d_model", "dim")
_LAYERS = ("n_layer", "num_hidden_layers", "num_layers", "n_layers", "encoder_layers",
           "decoder_layers", "num_decoder_layers")
_POSITIONS = ("block_size", "n_positions", "max_position_embeddings", "n_ctx")
_OTHER_SIZES = ("n_head", "num_attention_heads", "num_heads", "intermediate_size", "d_ff",
                "n_inner", "ffn_dim", "encoder_ffn_dim", "decoder_ffn_dim", "d_kv",
                "embedding_size", "experts")


def _whole(source, name, value, low):
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{source}: {name} = {value!r} is not a whole number >= {low}; the file "
                         "is damaged or was not written for this model")
    return value


def check_sizes(source, config, shapes):
    """Refuse ``config`` (a dict) when its sizes cannot describe the stored arrays ``shapes``
    (name -> shape); ``source`` names the file in the error."""
    stored = sum(math.prod(shape) for shape in shapes.values())
    dims = {dim for shape in shapes.values() for dim in shape}
    given = lambda names: [(name, config[name]) for name in names    # noqa: E731
                           if config.get(name) is not None]
    for name, value in given(_POSITIONS):
        if _whole(source, name, value, 1) > MAX_POSITIONS:
            raise ValueError(f"{source}: {name} = {value} is past the {MAX_POSITIONS} positions "
                             "this library builds; the file is damaged")
    if config.get("vocab_size") is not None \
            and _whole(source, "vocab_size", config["vocab_size"], 1) > MAX_VOCABULARY:
        raise ValueError(f"{source}: vocab_size = {config['vocab_size']} is past "
                         f"{MAX_VOCABULARY}; the file is damaged")
    for name, value in given(_OTHER_SIZES):
        if _whole(source, name, value, 0) > stored:
            raise ValueError(f"{source}: {name} = {value} is more than the {stored} values "
                             "stored in the weights; the file is damaged")
    widths = given(_WIDTH)
    for name, width in widths:
        if _whole(source, name, width, 1) not in dims:
            raise ValueError(f"{source}: {name} = {width} is the size of no stored weight "
                             f"(their sizes: {sorted(dims)[:12]}); the file is damaged or was "
                             "not written for these weights")
    width = max((value for _, value in widths), default=1)
    for name, layers in given(_LAYERS):
        if _whole(source, name, layers, 0) * width * width > _LAYER_ALLOWANCE * stored:
            raise ValueError(f"{source}: {name} = {layers} layers of width {width} cannot be "
                             f"made of the {stored} values stored; the file is damaged")
