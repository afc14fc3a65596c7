"""Reference maths for GPT-1 (Radford et al., 2018) and GPT-2 (Radford et al., 2019), the survey's
sections IV-B and V-A, eq 18-24, in ``autograd.numpy``: the references of
``tests/test_sec4_gpt1.py`` and ``tests/test_sec5_gpt2.py``.

Written from the papers (and OpenAI's released code for what the papers leave implicit: the
tanh form of GELU, the layout of a block), one sequence, one head and one query at a time:
embeddings are one-hot rows times W_e, causal and padding masks multiply the exponentials,
heads are column blocks of the projection matrices, LayerNorm and softmax are the textbook
formulas, the input transformations are spelled out per task. Weight matrices follow the
library's layout ((out_features, in_features), y = x W^T + b) only so that a test can pass the
same arrays.

``params`` is a dict: ``wte`` (V, d) = W_e, ``wpe`` (P, d) = W_p, ``layers`` a list of dicts with
``q_w q_b k_w k_b v_w v_b o_w o_b`` (attention), ``fc_w fc_b proj_w proj_b`` (MLP),
``ln1_g ln1_b ln2_g ln2_b``; for GPT-2 also ``lnf_g lnf_b``; for fine-tuning ``wy_w wy_b`` (W_y).
"""
from __future__ import annotations

import autograd.numpy as anp
import numpy as np
from autograd.scipy.special import erf


def gelu(x, activation="gelu_tanh"):
    """GELU(x) = x Phi(x) (Hendrycks & Gimpel, 2016); both GPT papers' code uses the tanh form
    0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))."""
    if activation == "gelu":
        return x * 0.5 * (1.0 + erf(x / np.sqrt(2.0)))
    return 0.5 * x * (1.0 + anp.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def layer_norm(x, gain, bias, eps):
    mu = anp.mean(x, axis=-1, keepdims=True)
    var = anp.mean((x - mu) ** 2, axis=-1, keepdims=True)
    return (x - mu) / anp.sqrt(var + eps) * gain + bias


def _affine(x, w, b):
    return anp.dot(x, w.T) + b


def masked_self_attention(x, p, n_head, real):
    """Multi-head self-attention over one sequence ``x`` (T, d): query i sees the keys j <= i
    that are real tokens (``real`` (T,) bool); softmax(q k / sqrt(d_k)) with the masks
    multiplying the exponentials; a query that sees nothing gets zeros."""
    time, d = x.shape
    d_k = d // n_head
    heads = []
    for h in range(n_head):
        cols = slice(h * d_k, (h + 1) * d_k)
        q = _affine(x, p["q_w"][cols], p["q_b"][cols])
        k = _affine(x, p["k_w"][cols], p["k_b"][cols])
        v = _affine(x, p["v_w"][cols], p["v_b"][cols])
        rows = []
        for i in range(time):
            allowed = np.array([1.0 if j <= i and real[j] else 0.0 for j in range(time)])
            scores = anp.dot(k, q[i]) / np.sqrt(d_k)
            e = anp.exp(scores - anp.max(scores)) * allowed
            rows.append(anp.dot(e, v) / anp.sum(e) if allowed.any() else 0.0 * v[0])
        heads.append(anp.stack(rows))
    return _affine(anp.concatenate(heads, axis=1), p["o_w"], p["o_b"])


def transformer_block(x, p, n_head, real, pre_ln, eps, activation):
    """One decoder block without cross-attention. GPT-1 (post-LN, as the original Transformer):
    n = LN(x + attn(x)), h = LN(n + mlp(n)). GPT-2 (section 2.3, pre-LN): a = x + attn(LN(x)),
    h = a + mlp(LN(a)). mlp(x) = gelu(x W_fc + b_fc) W_proj + b_proj."""
    def mlp(h):
        return _affine(gelu(_affine(h, p["fc_w"], p["fc_b"]), activation), p["proj_w"],
                       p["proj_b"])

    if pre_ln:
        x = x + masked_self_attention(layer_norm(x, p["ln1_g"], p["ln1_b"], eps), p, n_head, real)
        return x + mlp(layer_norm(x, p["ln2_g"], p["ln2_b"], eps))
    x = layer_norm(x + masked_self_attention(x, p, n_head, real), p["ln1_g"], p["ln1_b"], eps)
    return layer_norm(x + mlp(x), p["ln2_g"], p["ln2_b"], eps)


def eq20_input_embedding(ids, wte, wpe, positions=None):
    """h_0 = U W_e + W_p (eq 20): U is the one-hot matrix of the context tokens (T, V), W_p the
    rows of the positions 0 .. T-1 (or of ``positions`` (T,), as one-hot rows too)."""
    one_hot = np.eye(wte.shape[0])[np.asarray(ids)]
    if positions is None:
        return anp.dot(one_hot, wte) + wpe[:len(ids)]
    return anp.dot(one_hot, wte) + anp.dot(np.eye(wpe.shape[0])[np.asarray(positions)], wpe)


def eq19_transformer_blocks(h0, params, n_head, real=None, pre_ln=False, eps=1e-5,
                            activation="gelu_tanh"):
    """h_l = transformer_block(h_{l-1}) for l = 1 .. n (eq 19; the survey writes the index as
    "for all i in [1, n]"); GPT-2 adds a LayerNorm after the last block."""
    real = np.ones(h0.shape[0], dtype=bool) if real is None else np.asarray(real, dtype=bool)
    h = h0
    for p in params["layers"]:
        h = transformer_block(h, p, n_head, real, pre_ln, eps, activation)
    if pre_ln:
        h = layer_norm(h, params["lnf_g"], params["lnf_b"], eps)
    return h


def softmax_rows(z):
    e = anp.exp(z - anp.max(z, axis=-1, keepdims=True))
    return e / anp.sum(e, axis=-1, keepdims=True)


def log_softmax_rows(z):
    """log softmax(z) along the last axis as z - m - log sum exp(z - m), m the row's largest
    entry: finite for logits of any size, where log(softmax_rows(z)) underflows to -inf."""
    m = anp.max(z, axis=-1, keepdims=True)
    return z - m - anp.log(anp.sum(anp.exp(z - m), axis=-1, keepdims=True))


def eq21_output_distribution(h_n, wte):
    """P(u) = softmax(h_n W_e^T) (eq 21): the output layer is the transposed token embedding."""
    return softmax_rows(anp.dot(h_n, wte.T))


def eq18_lm_objective(probabilities, ids, counted=None):
    """L_1 = sum_i log P(u_i | u_{i-k} .. u_{i-1}) (eq 18) over one sequence: row i - 1 of
    ``probabilities`` (eq 21) is the distribution of token i given the tokens before it; the
    first token has no context and is not predicted. ``counted`` (T,) bool drops positions
    (padding) as targets."""
    total = 0.0
    for i in range(1, len(ids)):
        if counted is None or counted[i]:
            total = total + anp.log(probabilities[i - 1, ids[i]])
    return total


def lm_forward(ids, params, n_head, real=None, pre_ln=False, eps=1e-5, activation="gelu_tanh"):
    """eq 20 -> eq 19 -> eq 21 for one sequence: (h_n (T, d), P (T, V))."""
    h0 = eq20_input_embedding(ids, params["wte"], params["wpe"])
    h_n = eq19_transformer_blocks(h0, params, n_head, real, pre_ln, eps, activation)
    return h_n, eq21_output_distribution(h_n, params["wte"])


# ---- fine-tuning -----------------------------------------------------------------------------
def input_transformation(task, example, start, delimiter, extract):
    """GPT-1 section 3.3 / Figure 1: the token sequences a task example becomes."""
    if task == "classification":
        return [[start] + list(example) + [extract]]
    if task == "entailment":
        premise, hypothesis = example
        return [[start] + list(premise) + [delimiter] + list(hypothesis) + [extract]]
    if task == "similarity":
        a, b = example
        return [[start] + list(a) + [delimiter] + list(b) + [extract],
                [start] + list(b) + [delimiter] + list(a) + [extract]]
    context, answers = example
    return [[start] + list(context) + [delimiter] + list(answer) + [extract]
            for answer in answers]


def eq22_label_distribution(h_lm, wy_w, wy_b):
    """P(y | x^1 .. x^m) = softmax(h_l^m W_y) (eq 22; W_y with a bias, as in OpenAI's code)."""
    return softmax_rows(_affine(h_lm, wy_w, wy_b))


def eq18_lm_objective_of_logits(logits, ids, counted=None):
    """Eq 18 from the logits (T, V) of one sequence: the sum of log P(u_i | context) with log P
    taken by ``log_softmax_rows``."""
    log_p = log_softmax_rows(logits)
    total = 0.0
    for i in range(1, len(ids)):
        if counted is None or counted[i]:
            total = total + log_p[i - 1, ids[i]]
    return total


def eq23_task_objective_of_logits(scores, label):
    """Eq 23's term of one example from its task scores, log P(y | x) by ``log_softmax_rows``."""
    return log_softmax_rows(scores)[label]


def eq23_task_objective(probabilities, label):
    """L_2 = sum_(x, y) log P(y | x^1 .. x^m) (eq 23), one example's term."""
    return anp.log(probabilities[label])


def eq24_auxiliary_objective(l2, l1, lam):
    """L_3 = L_2 + lambda * L_1 (eq 24)."""
    return l2 + lam * l1


def fine_tuning_objectives(params, task, examples, labels, n_head, tokens, lam=0.5,
                           pre_ln=False, eps=1e-5):
    """L_2, L_1 and L_3 of a batch of task examples, with the per-example and per-token
    normalisation the library minimises (-L_2 / batch, -L_1 / predicted tokens), and the
    task scores of each example (before the softmax of eq 22 / over the K answers).

    Classification, entailment: P(y) from the one sequence's h_l^m. Similarity: the h_l^m of the
    two orderings are added before W_y. Multiple choice: score_k = h_l^m(k) W_y (one output) and
    P(y = k) = softmax over the K answers."""
    start, delimiter, extract = tokens
    l2, l1, predicted, scores = 0.0, 0.0, 0, []
    for example, label in zip(examples, labels):
        states = []
        for sequence in input_transformation(task, example, start, delimiter, extract):
            h_n, probabilities = lm_forward(sequence, params, n_head, pre_ln=pre_ln, eps=eps)
            l1 = l1 + eq18_lm_objective(probabilities, sequence)
            predicted += len(sequence) - 1
            states.append(h_n[len(sequence) - 1])      # h_l^m: the extract token's state
        if task == "multiple_choice":
            score = anp.stack([_affine(h, params["wy_w"], params["wy_b"])[0] for h in states])
            probabilities = softmax_rows(score)
        else:
            h_lm = states[0] + states[1] if task == "similarity" else states[0]
            score = _affine(h_lm, params["wy_w"], params["wy_b"])
            probabilities = eq22_label_distribution(h_lm, params["wy_w"], params["wy_b"])
        l2 = l2 + eq23_task_objective(probabilities, label)
        scores.append(score)
    l2, l1 = l2 / len(examples), l1 / predicted
    return l2, l1, eq24_auxiliary_objective(l2, l1, lam), anp.stack(scores)
