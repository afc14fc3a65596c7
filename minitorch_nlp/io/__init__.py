"""Reading and writing state: ``.npz`` checkpoints with a JSON header, never pickle.

``save(state, path)`` / ``load(path)``: see ``minitorch_nlp.io.checkpoint`` for the file format.
``from_pretrained(path)`` / ``save_pretrained(model, path)``: HuggingFace-format directories
(``config.json`` + ``model.safetensors``), see ``minitorch_nlp.io.huggingface``.
"""
from .checkpoint import FORMAT_VERSION, load, save
from .huggingface import from_pretrained, save_pretrained

__all__ = ["FORMAT_VERSION", "from_pretrained", "load", "save", "save_pretrained"]
