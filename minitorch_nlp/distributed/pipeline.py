"""Pipeline parallelism, GPipe's schedule (Huang et al., 2019): a model's layers cut into
consecutive stages, one per rank, and each batch cut into micro-batches that flow through the
stages, so that a model too deep for one device trains on several.

``PipelineParallelGPT2(config, comm)`` holds stage ``comm.rank`` of a GPT-2 language model: the
first stage the token and position embeddings, every stage ``n_layer / stages`` consecutive
blocks, the last the final LayerNorm and the output layer. ``forward_backward(input_ids,
micro_batches)`` runs GPipe's step:

* forward, micro-batch after micro-batch: a stage receives its input activations from the one
  before (``recv``), runs its blocks and sends the output on (``send``); the last stage computes
  the micro-batch's loss, divided by the number of micro-batches;
* then backward, last micro-batch first: the last stage differentiates its losses, every stage
  sends the gradient of its input back and differentiates its saved output with the gradient it
  receives, so each parameter's gradient sums over the micro-batches -- the gradient of the
  whole batch's loss;
* the output layer is tied to the token embedding, which lives on the first stage: the last
  stage holds a copy (equal at the start), and the two gradients are summed after backward, so
  that AdamW keeps the copies equal.

With micro-batches of equal size, the step equals one process's on the whole batch (the loss is
the mean over the batch's predictions, each micro-batch's mean weighted equally). The bubble --
stages idle while the pipeline fills and drains, (stages - 1) / (micro_batches + stages - 1) of
the step -- is what more micro-batches shrink; ``minitorch-nlp plan`` models it with ``pp``.
"""
from __future__ import annotations

import numpy as np

from .. import functional as F
from ..autograd import tensor
from ..models.gpt import GPT2LMHeadModel, causal_lm_loss
from ..nn import Module, Parameter
from ..nn.transformer import TransformerStack

__all__ = ["PipelineParallelGPT2"]


class PipelineParallelGPT2(Module):
    """Stage ``comm.rank`` of ``comm.size`` of GPT-2's language model for ``config`` (a
    ``GPTConfig``); built from the dense model, so the same seed gives the same weights. Its
    parameters are the stage's (the first stage's are named as the dense model's
    ``transformer.wte`` ..., the blocks ``stack.layers.i`` for the dense block
    ``first_layer + i``)."""

    def __init__(self, config, comm):
        super().__init__()
        stages = comm.size
        if config.n_layer % stages:
            raise ValueError(f"PipelineParallelGPT2: n_layer={config.n_layer} must be divisible "
                             f"by the {stages} pipeline stages (ranks)")
        dense = GPT2LMHeadModel(config)
        self.comm, self.config = comm, config
        self.first, self.last = comm.rank == 0, comm.rank == stages - 1
        per_stage = config.n_layer // stages
        self.first_layer = comm.rank * per_stage
        body = dense.transformer
        self.stack = TransformerStack(
            list(body.blocks.layers)[self.first_layer:self.first_layer + per_stage],
            norm=body.blocks.norm if self.last else None)
        if self.first:
            self.wte, self.wpe, self.drop = body.wte, body.wpe, body.drop
        if self.last:                                 # the tied output layer (a copy elsewhere)
            self.output_weight = body.wte.weight if self.first else Parameter(
                tensor(body.wte.weight.numpy().copy(), dtype=body.wte.weight.dtype))

    def _dtype(self):
        return np.dtype(next(iter(self.parameters())).dtype)

    def _activation_shape(self, micro_batch):
        batch, time = micro_batch.shape
        return (batch, time, self.config.n_embd)

    def forward_backward(self, input_ids, micro_batches):
        """GPipe's forward and backward of the batch ``input_ids`` (batch, time) as
        ``micro_batches`` equal micro-batches, labels being the ids (next-token prediction).
        Every stage must call it; gradients accumulate in the stage's parameters. Returns the
        batch's loss, a float on every stage."""
        ids = np.asarray(input_ids)
        if micro_batches < 1 or len(ids) % micro_batches:
            raise ValueError(f"PipelineParallelGPT2.forward_backward: a batch of {len(ids)} "
                             f"sequences does not split into micro_batches={micro_batches} "
                             "equal parts")
        before, after = self.comm.rank - 1, self.comm.rank + 1
        dtype = self._dtype()
        chunks = np.split(ids, micro_batches)
        inputs, outputs = [], []
        for chunk in chunks:                                               # forward
            if self.first:
                x = self.drop(self.wpe(self.wte(chunk)))
            else:
                x = tensor(self.comm.recv(before, self._activation_shape(chunk), dtype),
                           requires_grad=True)
            inputs.append(x)
            h = self.stack(x).last_hidden_state
            if self.last:
                logits = F.linear(h, self.output_weight)
                outputs.append(causal_lm_loss(logits, chunk) / micro_batches)
            else:
                self.comm.send(h.numpy(), after)
                outputs.append(h)
        for x, out, chunk in reversed(list(zip(inputs, outputs, chunks))):   # backward
            if self.last:
                out.backward()
            else:
                out.backward(tensor(self.comm.recv(after, self._activation_shape(chunk), dtype)))
            if not self.first:
                self.comm.send(x.grad.numpy(), before)
        self._sum_tied_gradients()
        loss = sum(float(out.item()) for out in outputs) if self.last else 0.0
        return float(self.comm.all_reduce(np.array([loss]))[0])

    def _sum_tied_gradients(self):
        """The token embedding's gradient (first stage) and the output layer's (last stage)
        summed on both; the stages between add zeros."""
        if self.comm.size == 1:
            return
        tied = self.wte.weight if self.first else self.output_weight if self.last else None
        shape = (self.config.vocab_size, self.config.n_embd)
        mine = np.zeros(shape, self._dtype()) if tied is None or tied.grad is None \
            else tied.grad.numpy()
        total = self.comm.all_reduce(np.ascontiguousarray(mine))
        if tied is not None:
            tied.grad = tensor(total, dtype=tied.dtype)
