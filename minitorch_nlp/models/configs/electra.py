"""The configuration of ELECTRA."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ... import checks
from .bert import BertConfig


@dataclass
class ElectraConfig(BertConfig):
    """``BertConfig`` plus ``embedding_size``. The defaults are ELECTRA-small's discriminator
    (Clark Table 6: 12 layers, hidden 256, 4 heads, feed-forward 1024, embeddings 128)."""

    embedding_size: int = 128
    hidden_size: int = 256
    num_attention_heads: int = 4
    intermediate_size: int = 1024

    model_type = "electra"

    RULES = BertConfig.RULES + (checks.positive("embedding_size"),)

    def generator(self, fraction=0.25):
        """The generator's config for this discriminator: ``fraction`` of its width, heads and
        feed-forward size (at least one head), everything else, embeddings included, the same
        (Clark section 3.2: the best generators are 1/4 to 1/2 of the discriminator)."""
        if not 0.0 < fraction <= 1.0:
            raise ValueError(f"ElectraConfig.generator: fraction must be in (0, 1], got "
                             f"{fraction!r}; the generator may not be wider than the "
                             "discriminator")
        heads = max(1, round(self.num_attention_heads * fraction))
        head_size = max(1, round(self.hidden_size * fraction / heads))
        return dataclasses.replace(self, hidden_size=heads * head_size, num_attention_heads=heads,
                                   intermediate_size=max(1, round(self.intermediate_size
                                                                  * fraction)))
