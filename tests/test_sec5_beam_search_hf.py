"""Beam search against HuggingFace's on the encoder-decoder fixtures
(``tests/fixtures/hf/make_beam_fixtures.py``): the same ids for T5, T5 v1.1, BART and mBART,
``num_beams`` 2 and 3, with and without ``early_stopping``, padded sources included."""
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


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c['model']}-beams{c['num_beams']}-"
                                                      f"early{c['early_stopping']}")
def test_beam_search_ids_equal_huggingface(models, case):
    arrays = np.load(FIXTURES / case["model"] / "expected.npz")
    ours = models[case["model"]].generate(arrays["input_ids"], arrays["attention_mask"],
                                          num_beams=case["num_beams"], max_new_tokens=8,
                                          early_stopping=case["early_stopping"])
    np.testing.assert_array_equal(ours, np.array(case["ids"]))
