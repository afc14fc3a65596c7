"""Tokenizers from scratch: characters, WordPiece (BERT), byte-level BPE (GPT-2, RoBERTa) and the
Unigram LM (SentencePiece: T5, mBART).

A tokenizer turns text into the integer ids a model reads, and back. The four here span the
trade-off between a small vocabulary with long sequences and a big vocabulary with short ones:

* :class:`CharTokenizer`: one token per character (``char.py``);
* :class:`WordPieceTokenizer`: BERT's basic tokenization, then greedy longest-match subwords with
  ``##`` continuations (``wordpiece.py``; Schuster & Nakajima 2012, Wu et al. 2016);
* :class:`ByteLevelBPETokenizer`: GPT-2's byte-pair encoding over UTF-8 bytes, which encodes any
  string and decodes it back exactly (``bpe.py``; Sennrich et al. 2016, Radford et al. 2019);
* :class:`UnigramTokenizer`: the Unigram language model of SentencePiece (T5, mBART), Viterbi
  segmentation and sampled segmentations for subword regularization, trained by EM with pruning;
  it reads sentencepiece's ``.model`` files (``unigram.py``, ``sentencepiece_model.py``; Kudo
  2018), HuggingFace's Unigram ``tokenizer.json`` (``hf_pipeline.py``) and mBART's layout with
  fairseq's ids and language codes (:class:`MBartTokenizer`, ``mbart.py``).

The four share one interface (``base.py``), modelled on HuggingFace's::

    tok = WordPieceTokenizer.train(text, vocab_size=1000)      # or load_tokenizer(directory)
    tok.tokenize("Hello, world!")          # e.g. ['hello', ',', 'world', '!']
    ids = tok.encode("Hello", "world")     # [CLS] hello [SEP] world [SEP]
    tok.decode(ids, skip_special_tokens=True)
    batch = tok(["a text", "another text"], padding=True, truncation=True, max_length=128,
                return_tensors="np")       # input_ids, attention_mask, token_type_ids
    tok.save(directory)                    # HuggingFace's files: vocab.txt, tokenizer_config.json
    load_tokenizer(directory)              # the right class for what the directory holds

``state_dict()`` / :func:`tokenizer_from_state` put a tokenizer inside a training checkpoint.
``load_tokenizer`` reads what ``save`` writes and HuggingFace directories (``vocab.txt``,
``vocab.json`` + ``merges.txt``, a T5 ``spiece.model``, or a ``tokenizer.json`` with a WordPiece,
byte-level BPE or Unigram model).
"""
from .base import BatchEncoding, Tokenizer
from .bpe import ByteLevelBPETokenizer, bytes_to_unicode, pretokenize
from .char import CharTokenizer
from .load import load_tokenizer, tokenizer_from_state
from .mbart import MBartTokenizer
from .training import learn_merges
from .unigram import UnigramTokenizer, train_unigram
from .wordpiece import WordPieceTokenizer, basic_tokenize

__all__ = ["BatchEncoding", "ByteLevelBPETokenizer", "CharTokenizer", "MBartTokenizer", "Tokenizer",
           "UnigramTokenizer", "WordPieceTokenizer", "basic_tokenize", "bytes_to_unicode",
           "learn_merges", "load_tokenizer", "pretokenize", "tokenizer_from_state",
           "train_unigram"]
