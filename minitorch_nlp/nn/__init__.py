"""Neural-network building blocks: ``Module`` and ``Parameter``, layers, containers and ``init``.

The names are PyTorch's (``nn.Linear``, ``nn.Sequential``, ``nn.init.xavier_uniform_``), and so
are weight layouts and default initialisations; the computations live in
``minitorch_nlp.functional``.
"""
from . import init
from .containers import ModuleDict, ModuleList, Sequential
from .layers import (GELU, Dropout, Embedding, Identity, LayerNorm, Linear, ReLU, Sigmoid, Softmax,
                     Tanh, column_major_)
from .module import IncompatibleKeys, Module, functional_call, replaced_tensors
from .parameter import Parameter
from .rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNCell
from .outputs import ModelOutput
from .moe import Experts, MixtureOfExperts
from .reversible import (AxialPositionEmbedding, ChunkedFeedForward, ReversibleBlock,
                         ReversibleStack)
from .transformer import (DecoderOnlyLayer, DecoderOnlyStack, FeedForward, FullAttention,
                          LearnedPositionalEmbedding, MultiHeadAttention,
                          SinusoidalPositionalEncoding, SlidingWindowAttention, TransformerDecoder,
                          TransformerDecoderLayer, TransformerEncoder, TransformerEncoderLayer,
                          TransformerLayer, TransformerStack, attention_weights)

__all__ = ["GELU", "Dropout", "Embedding", "Identity", "IncompatibleKeys", "LayerNorm", "Linear",
           "Module", "ModuleDict", "ModuleList", "Parameter", "ReLU", "Sequential", "Sigmoid",
           "Softmax", "Tanh", "column_major_", "init",
           "GRU", "GRUCell", "LSTM", "LSTMCell", "RNN", "RNNCell",
           "DecoderOnlyLayer", "DecoderOnlyStack", "FeedForward", "FullAttention",
           "LearnedPositionalEmbedding", "ModelOutput", "MultiHeadAttention",
           "SinusoidalPositionalEncoding", "SlidingWindowAttention", "TransformerDecoder",
           "TransformerDecoderLayer", "TransformerEncoder", "TransformerEncoderLayer",
           "TransformerLayer", "TransformerStack", "attention_weights", "functional_call",
           "replaced_tensors", "AxialPositionEmbedding", "ChunkedFeedForward", "ReversibleBlock",
           "ReversibleStack",
           "Experts", "MixtureOfExperts"]
