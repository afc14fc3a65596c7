"""The shared model suite's own contract: a ``ModelSpec`` must either give a check's hook or say
why the check does not apply, and only the checks that apply are collected."""
from __future__ import annotations

import dataclasses

import pytest

from minitorch_nlp.models.gpt import GPT2LMHeadModel, GPTConfig
from tests.model_checks import ENCODER_SKIPS, ModelChecks, causal_lm_spec

GPT2 = causal_lm_spec("GPT2LMHeadModel", GPT2LMHeadModel, GPTConfig.tiny)


def test_a_missing_hook_needs_a_reason():
    with pytest.raises(ValueError, match=r"ModelSpec GPT2LMHeadModel: sets no decode for the "
                                         r"'cached_decoding' check; set it, or say in skips why"):
        dataclasses.replace(GPT2, decode=None)
    dataclasses.replace(GPT2, decode=None, skips={"cached_decoding": "no generate"})


def test_a_reason_for_a_check_that_can_run_is_refused():
    with pytest.raises(ValueError, match="skips 'causal' although it sets causal"):
        dataclasses.replace(GPT2, skips={"causal": "not causal"})
    with pytest.raises(ValueError, match=r"skips names unknown checks \['speed'\]"):
        dataclasses.replace(GPT2, skips={"speed": "too slow"})
    with pytest.raises(ValueError, match="incremental outputs are compared with the causal"):
        dataclasses.replace(GPT2, causal=None, skips=dict(causal=ENCODER_SKIPS["causal"]))


def test_skipped_checks_are_not_collected():
    class Checks(ModelChecks):
        spec = dataclasses.replace(GPT2, decode=None, skips={"cached_decoding": "no generate"})

    assert Checks.test_cached_decoding is None and callable(Checks.test_cached_steps)
    assert callable(ModelChecks.test_cached_decoding)
