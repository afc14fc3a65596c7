"""What a model returns: a ``ModelOutput``, read like HuggingFace's (``out.logits``,
``out["logits"]``, ``out.last_hidden_state``), so that code written against HuggingFace reads the
same here."""
from __future__ import annotations

__all__ = ["ModelOutput"]


class ModelOutput(dict):
    """A dict of the outputs a model computed, whose entries are also attributes: ``out.loss``,
    ``out.logits``, ``out.last_hidden_state``, ``out.pooler_output``, ``out.hidden_states``,
    ``out.past_key_values`` ... A field given as ``None`` (no labels, so no loss) reads as ``None``
    but is not stored, as in HuggingFace.

    Iterating gives the field names in the order they were given; ``to_tuple()`` gives the values
    in that order, as HuggingFace's ``return_dict=False`` does.
    """

    def __init__(self, **fields) -> None:
        super().__init__((name, value) for name, value in fields.items() if value is not None)
        self._fields = tuple(fields)

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            if name in self.__dict__.get("_fields", ()):
                return None
            raise AttributeError(f"{type(self).__name__} has no field {name!r}; it has "
                                 f"{sorted(self)}") from None

    def to_tuple(self) -> tuple:
        return tuple(self.values())

    def __repr__(self):
        fields = ", ".join(f"{name}={getattr(value, 'shape', value)!r}"
                           for name, value in self.items())
        return f"{type(self).__name__}({fields})"
