"""Reading and writing state: ``.npz`` checkpoints with a JSON header, never pickle.

``save(state, path)`` / ``load(path)``: see ``minitorch_nlp.io.checkpoint`` for the file format.
"""
from .checkpoint import FORMAT_VERSION, load, save

__all__ = ["FORMAT_VERSION", "load", "save"]
