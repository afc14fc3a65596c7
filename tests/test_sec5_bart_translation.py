"""BART's machine-translation recipe (Lewis et al. 2020, section 3.4; the survey's figure 12): a
new randomly initialised source encoder in front of a pretrained BART, trained in two stages.
Which parameters get gradients in each stage, that BART's own parameters are the ones the
recipe uses, generation, learning a tiny batch, and the errors."""
from __future__ import annotations

import numpy as np
import pytest

import minitorch_nlp as mt
from minitorch_nlp import optim
from minitorch_nlp.models.bart import BartConfig, BartForConditionalGeneration, BartForTranslation

pytestmark = pytest.mark.sec5

SOURCE = np.array([[5, 6, 7, 8, 1], [9, 10, 11, 1, 0]])
SOURCE_MASK = (np.arange(5) < np.array([[5], [4]])).astype(np.int64)
LABELS = np.array([[0, 12, 13, 14, 2], [0, 15, 16, 2, -100]])
STAGE_ONE = {"bart.model.encoder.embed_positions.table",
             *(f"bart.model.encoder.stack.layers.0.self_attn.{p}_proj.{w}"
               for p in "qkv" for w in ("weight", "bias"))}


def translator():
    mt.manual_seed(0)
    bart = BartForConditionalGeneration(BartConfig.tiny())
    return bart, BartForTranslation(bart, source_vocab_size=20, num_layers=1, num_heads=2)


def gradients_after_backward(model):
    for parameter in model.parameters():
        parameter.grad = None
    model(SOURCE, SOURCE_MASK, labels=LABELS).loss.backward()
    return {name for name, parameter in model.named_parameters()
            if parameter.grad is not None and np.abs(parameter.grad.numpy()).sum() > 0}


def test_stage_one_trains_the_new_encoder_positions_and_first_input_projection():
    _, model = translator()
    learning = model.set_stage(1)
    names = {name for name, _ in model.named_parameters()}
    source = {name for name in names if name.startswith("source_encoder.")}
    assert {name for name, p in model.named_parameters() if p.requires_grad} == \
        source | STAGE_ONE
    assert len(learning) == len(source | STAGE_ONE)
    assert gradients_after_backward(model) == source | STAGE_ONE


def test_stage_two_trains_everything():
    _, model = translator()
    model.set_stage(1)
    assert len(model.set_stage(2)) == len(list(model.parameters()))
    names = {name for name, _ in model.named_parameters()}
    # the rows of the BART embedding that no token of this batch reads get no gradient, so
    # compare parameters, not rows
    assert gradients_after_backward(model) == names


def test_it_is_bart_after_the_source_encoder():
    """Same parameters as the pretrained BART; the encoder reads the source encoder's output
    where BART read its token embeddings."""
    bart, model = translator()
    assert model.bart is bart
    positions = bart.model.encoder.embed_positions.table
    assert model.bart.model.encoder.embed_positions.table is positions
    mask = SOURCE_MASK.astype(bool)
    vectors = model.source_encoder(SOURCE, mask)
    expected = bart.model.encoder(vectors, key_mask=mask).last_hidden_state.numpy()
    np.testing.assert_allclose(model.encode(SOURCE, SOURCE_MASK).last_hidden_state.numpy(),
                               expected, rtol=1e-12, atol=1e-12)


def train(model, parameters, steps, *inputs, labels):
    optimizer = optim.AdamW(parameters, lr=1e-2, weight_decay=0.0)
    losses = []
    for _ in range(steps):
        loss = model(*inputs, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def test_the_two_stages_learn_a_tiny_batch_and_generate():
    """A BART pretrained (here: for a few steps) to reconstruct the target sentences; stage 1
    teaches the new encoder to feed it, stage 2 finishes the job."""
    bart, model = translator()
    targets = np.where(LABELS == -100, bart.config.pad_token_id, LABELS)
    train(bart, bart.parameters(), 40, targets, (targets != 1).astype(np.int64), labels=LABELS)
    first = train(model, model.set_stage(1), 60, SOURCE, SOURCE_MASK, labels=LABELS)
    second = train(model, model.set_stage(2), 30, SOURCE, SOURCE_MASK, labels=LABELS)
    assert first[-1] < 0.5 * first[0] and second[-1] < 0.5 * first[-1]
    model.eval()
    out = model.generate(SOURCE, SOURCE_MASK, max_new_tokens=6)
    assert out[0, 1:6].tolist() == LABELS[0].tolist()


def test_errors_name_the_problem():
    bart, model = translator()
    with pytest.raises(ValueError, match="stage must be 1 .* or 2 .*, got 3"):
        model.set_stage(3)
    with pytest.raises(TypeError, match="expected a BartForConditionalGeneration, got str"):
        BartForTranslation("bart", source_vocab_size=10)
    with pytest.raises(ValueError, match="BartForTranslation"):
        model.encode(np.array([[25, 1]]))  # outside the source vocabulary of 20
