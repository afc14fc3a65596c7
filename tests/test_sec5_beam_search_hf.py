"""Beam search against HuggingFace's on the encoder-decoder fixtures
(``tests/fixtures/hf/make_beam_fixtures.py``): the same ids for T5, T5 v1.1, BART and mBART,
``num_beams`` 2 and 3, with and without ``early_stopping``, padded sources included; and on the
``*-eos`` fixtures (T5, BART, mBART with <eos> made likely), where hypotheses end at different
steps and leave the beam: ``num_beams`` 2 and 4, ``length_penalty`` 0.5 and 2, ``early_stopping``
False, True and "never". Section III's convention (``beam_convention="wu"``) gives other ids on
29 of these cases, so they do tell the two apart."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import minitorch_nlp as mt

pytestmark = pytest.mark.sec5

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "hf"
CASES = json.loads((FIXTURES / "beam_search.json").read_text())["cases"]


@pytest.fixture(scope="module")
def models():
    pytest.importorskip("safetensors")
    return {name: mt.from_pretrained(FIXTURES / name).eval()
            for name in {case["model"] for case in CASES}}


def up_to_eos(row, eos_id):
    """The decoder start token and the generated ids up to <eos>: HuggingFace fills a finished
    T5 hypothesis with <eos> (its pad id 0 is falsy in ``pad_token_id or eos_token_id``); ours
    and its other models fill with <pad>. (BART starts with </s>, its <eos>.)"""
    generated = row[1:]
    return row[:1] + (generated[:generated.index(eos_id) + 1] if eos_id in generated
                      else generated)


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c['model']}-beams{c['num_beams']}-"
                                                      f"lp{c['length_penalty']}-"
                                                      f"early{c['early_stopping']}")
def test_beam_search_ids_equal_huggingface(models, case):
    model = models[case["model"]]
    arrays = np.load(FIXTURES / case["inputs"] / "expected.npz")
    ours = model.generate(arrays["input_ids"], arrays["attention_mask"],
                          num_beams=case["num_beams"], max_new_tokens=case["max_new_tokens"],
                          length_penalty=case["length_penalty"],
                          early_stopping=case["early_stopping"])
    eos, pad = model.config.eos_token_id, model.config.pad_token_id
    assert ours.shape == np.array(case["ids"]).shape
    for our_row, their_row in zip(ours.tolist(), case["ids"]):
        ended = up_to_eos(our_row, eos)
        assert ended == up_to_eos(their_row, eos)
        assert our_row[len(ended):] == [pad] * (len(our_row) - len(ended))
