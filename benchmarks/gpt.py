"""A small GPT (Radford et al., 2018/2019) three times, for the training-step benchmark in
``benchmarks/backends.py``: built from minitorch_nlp's own layers, in PyTorch eager, and as pure
functions for HIPS autograd. The three take the same weights (copied from ours), so their losses
agree at step 0.

The model is nanoGPT's ``model.py`` without dropout: token + learned position embeddings, pre-LN
blocks (causal self-attention, then a GELU MLP, each added to the residual stream), a final layer
norm and a language-model head tied to the token embedding (or a separate weight).

These are benchmark peers, not library code (the library's GPT belongs in ``minitorch_nlp.models``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

import minitorch_nlp as mt
import minitorch_nlp.functional as F
from minitorch_nlp import nn


@dataclass
class GPTConfig:
    vocab_size: int = 65
    block_size: int = 128
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    tied: bool = True           # the head reuses the token embedding (GPT-2, nanoGPT)
    approximate: str = "tanh"   # GPT-2's GELU
    fused_gelu: bool = True     # bias + GELU in one kernel (F.bias_gelu) or linear then gelu
    init_std: float = 0.02


# ---- minitorch_nlp -------------------------------------------------------------------------------
class CausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        if config.n_embd % config.n_head:
            raise ValueError(f"n_embd {config.n_embd} is not a multiple of n_head {config.n_head}")
        self.n_head = config.n_head
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)  # q, k, v of every head at once
        self.c_proj = nn.Linear(config.n_embd, config.n_embd)

    def forward(self, x):
        B, T, C = x.shape
        heads = (B, T, self.n_head, C // self.n_head)
        q, k, v = (t.reshape(*heads).permute(0, 2, 1, 3)        # (B, nh, T, hs)
                   for t in self.c_attn(x).split(C, axis=2))
        y = F.scaled_dot_product_attention(q, k, v, causal=True)
        y = y.permute(0, 2, 1, 3).reshape(B, T, C)                # heads side by side again
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.approximate, self.fused = config.approximate, config.fused_gelu
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd)
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd)

    def forward(self, x):
        if self.fused:  # the product without its bias, then bias + GELU in one pass
            h = F.bias_gelu(F.linear(x, self.c_fc.weight), self.c_fc.bias, self.approximate)
        else:
            h = F.gelu(self.c_fc(x), self.approximate)
        return self.c_proj(h)


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd)
        self.mlp = MLP(config)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.block_size, config.n_embd)
        self.h = nn.ModuleList([Block(config) for _ in range(config.n_layer)])
        self.ln_f = nn.LayerNorm(config.n_embd)
        if not config.tied:
            self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        for name, p in self.named_parameters():  # nanoGPT's init; layer norms keep 1 and 0
            if name.endswith(".bias"):
                nn.init.zeros_(p)
            elif "ln_" not in name:
                nn.init.normal_(p, 0.0, config.init_std)

    def forward(self, idx, targets=None):
        T = idx.shape[1]
        if T > self.config.block_size:
            raise ValueError(f"sequence of length {T} is longer than block_size "
                             f"{self.config.block_size}")
        x = self.wte(idx) + self.wpe(mt.arange(T, backend=idx.backend))
        for block in self.h:
            x = block(x)
        x = self.ln_f(x)
        head = self.wte.weight if self.config.tied else self.lm_head.weight
        logits = F.linear(x, head)
        loss = None if targets is None else F.cross_entropy(logits, targets)
        return logits, loss


def train_step(model, opt, x, y):
    """One AdamW step on the batch (x, y); returns the loss before the update as a float."""
    _, loss = model(x, y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.item()


def weights_of(model):
    """name -> float NumPy array (copies), the format the two peers below load."""
    return {name: t.numpy().copy() for name, t in model.state_dict().items()}


# ---- PyTorch eager -------------------------------------------------------------------------------
def torch_gpt(config, weights):
    """The same model as a ``torch.nn.Module`` holding a copy of ``weights``."""
    import torch
    import torch.nn.functional as TF
    from torch import nn as tnn

    class TorchAttention(tnn.Module):
        def __init__(self):
            super().__init__()
            self.n_head = config.n_head
            self.c_attn = tnn.Linear(config.n_embd, 3 * config.n_embd)
            self.c_proj = tnn.Linear(config.n_embd, config.n_embd)

        def forward(self, x):
            B, T, C = x.shape
            q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
                       for t in self.c_attn(x).split(C, dim=2))
            y = TF.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))

    class TorchMLP(tnn.Module):
        def __init__(self):
            super().__init__()
            self.c_fc = tnn.Linear(config.n_embd, 4 * config.n_embd)
            self.c_proj = tnn.Linear(4 * config.n_embd, config.n_embd)

        def forward(self, x):
            return self.c_proj(TF.gelu(self.c_fc(x), approximate=config.approximate))

    class TorchBlock(tnn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = tnn.LayerNorm(config.n_embd)
            self.attn = TorchAttention()
            self.ln_2 = tnn.LayerNorm(config.n_embd)
            self.mlp = TorchMLP()

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class TorchGPT(tnn.Module):
        def __init__(self):
            super().__init__()
            self.wte = tnn.Embedding(config.vocab_size, config.n_embd)
            self.wpe = tnn.Embedding(config.block_size, config.n_embd)
            self.h = tnn.ModuleList([TorchBlock() for _ in range(config.n_layer)])
            self.ln_f = tnn.LayerNorm(config.n_embd)
            if not config.tied:
                self.lm_head = tnn.Linear(config.n_embd, config.vocab_size, bias=False)

        def forward(self, idx, targets=None):
            T = idx.shape[1]
            x = self.wte(idx) + self.wpe(torch.arange(T))
            for block in self.h:
                x = block(x)
            x = self.ln_f(x)
            head = self.wte.weight if config.tied else self.lm_head.weight
            logits = TF.linear(x, head)
            loss = None if targets is None else TF.cross_entropy(
                logits.view(-1, logits.shape[-1]), targets.view(-1))
            return logits, loss

    model = TorchGPT()
    model.load_state_dict({name: torch.from_numpy(array.copy())
                           for name, array in weights.items()})
    return model


def torch_train_step(model, opt, x, y):
    _, loss = model(x, y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.item()


# ---- HIPS autograd -------------------------------------------------------------------------------
def autograd_loss(config):
    """loss(params, idx, targets): the model as a pure function of a dict of arrays."""
    import autograd.numpy as anp

    def layer_norm(x, weight, bias, eps=1e-5):
        centred = x - anp.mean(x, axis=-1, keepdims=True)
        var = anp.mean(centred * centred, axis=-1, keepdims=True)
        return centred / anp.sqrt(var + eps) * weight + bias

    def linear(x, weight, bias=None):
        y = anp.dot(x, weight.T)
        return y if bias is None else y + bias

    def gelu(x):
        if config.approximate == "tanh":
            return 0.5 * x * (1.0 + anp.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))
        from autograd.scipy.special import erf

        return 0.5 * x * (1.0 + erf(x * (1.0 / math.sqrt(2.0))))

    def softmax(scores):
        e = anp.exp(scores - anp.max(scores, axis=-1, keepdims=True))
        return e / anp.sum(e, axis=-1, keepdims=True)

    def attention(p, x):
        B, T, C = x.shape
        H = config.n_head
        qkv = linear(x, p["c_attn.weight"], p["c_attn.bias"])
        q, k, v = (anp.transpose(anp.reshape(qkv[:, :, i * C:(i + 1) * C], (B, T, H, C // H)),
                                 (0, 2, 1, 3)) for i in range(3))
        scores = anp.matmul(q, anp.swapaxes(k, -1, -2)) * (1.0 / math.sqrt(C // H))
        future = np.triu(np.ones((T, T), dtype=bool), k=1)
        probs = softmax(anp.where(future, -np.inf, scores))
        y = anp.reshape(anp.transpose(anp.matmul(probs, v), (0, 2, 1, 3)), (B, T, C))
        return linear(y, p["c_proj.weight"], p["c_proj.bias"])

    def loss(params, idx, targets):
        def block_params(prefix):
            return {name[len(prefix):]: value for name, value in params.items()
                    if name.startswith(prefix)}

        T = idx.shape[1]
        x = params["wte.weight"][idx] + params["wpe.weight"][np.arange(T)]
        for i in range(config.n_layer):
            p = block_params(f"h.{i}.")
            x = x + attention(block_params(f"h.{i}.attn."),
                              layer_norm(x, p["ln_1.weight"], p["ln_1.bias"]))
            h = layer_norm(x, p["ln_2.weight"], p["ln_2.bias"])
            h = gelu(linear(h, p["mlp.c_fc.weight"], p["mlp.c_fc.bias"]))
            x = x + linear(h, p["mlp.c_proj.weight"], p["mlp.c_proj.bias"])
        x = layer_norm(x, params["ln_f.weight"], params["ln_f.bias"])
        logits = linear(x, params["wte.weight"] if config.tied else params["lm_head.weight"])
        shifted = logits - anp.max(logits, axis=-1, keepdims=True)
        log_probs = shifted - anp.log(anp.sum(anp.exp(shifted), axis=-1, keepdims=True))
        picked = log_probs.reshape(-1, config.vocab_size)[np.arange(targets.size),
                                                          targets.reshape(-1)]
        return -anp.mean(picked)

    return loss


class NumpyAdamW:
    """AdamW on a dict of NumPy arrays, PyTorch's update (decoupled decay first)."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
        self.lr, self.betas, self.eps, self.weight_decay = lr, betas, eps, weight_decay
        self.m = {k: np.zeros_like(v) for k, v in params.items()}
        self.v = {k: np.zeros_like(v) for k, v in params.items()}
        self.t = 0

    def step(self, params, grads):
        self.t += 1
        beta1, beta2 = self.betas
        for name, g in grads.items():
            p, m, v = params[name], self.m[name], self.v[name]
            p *= 1 - self.lr * self.weight_decay
            m *= beta1
            m += (1 - beta1) * g
            v *= beta2
            v += (1 - beta2) * g * g
            m_hat = m / (1 - beta1 ** self.t)
            v_hat = v / (1 - beta2 ** self.t)
            p -= self.lr * m_hat / (np.sqrt(v_hat) + self.eps)


def autograd_train_step(value_and_grad, opt, params, x, y):
    loss, grads = value_and_grad(params, x, y)
    opt.step(params, grads)
    return float(loss)
