"""Data: vocabularies, tokenizers, synthetic sequence-to-sequence tasks, batching, masking for
masked language models, and the built-in corpus.

Everything here is plain Python/NumPy and needs no download; only :class:`Seq2SeqBatch` holds
engine tensors.
"""
from .batching import Seq2SeqBatch, make_batches, pad_sequences
from .corpus import load_text, stdlib_corpus
from .knowledge_base import KnowledgeBase, knowledge_base, split_passages
from .masking import MaskedLMCollator, MaskedLMDataset, next_sentence_pairs, pack_full_sentences
from .multilingual import (LanguageCodes, LanguageSampler, language_sampling_ratios,
                           multilingual_denoising_log_likelihood)
from .numbers import (LANGUAGES, MAX_NUMBER, number_tokens, number_translation_pairs,
                      number_translation_task, number_words, train_test_split_numbers)
from .synthetic import addition_task, copy_task, reverse_task, sort_task, sorted_or_not_task
from .tokenizers import load_tokenizer
from .vocab import Vocab

__all__ = ["KnowledgeBase", "LANGUAGES", "LanguageCodes", "LanguageSampler", "MAX_NUMBER",
           "MaskedLMCollator", "MaskedLMDataset", "Seq2SeqBatch", "Vocab", "addition_task",
           "copy_task", "knowledge_base", "language_sampling_ratios", "load_text",
           "load_tokenizer", "make_batches", "multilingual_denoising_log_likelihood",
           "next_sentence_pairs", "number_tokens", "number_translation_pairs",
           "number_translation_task", "number_words", "pack_full_sentences", "pad_sequences",
           "reverse_task", "sort_task", "sorted_or_not_task", "split_passages", "stdlib_corpus",
           "train_test_split_numbers"]
