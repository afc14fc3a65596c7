"""GShard's mixture-of-experts layer against a dense feed-forward network with the same active
parameters per token, forward + backward, ours beside PyTorch CPU running the same two layers.

    python benchmarks/moe.py [--threads 1 2] [--repeats 7] [--budget 20]

The MoE layer: d_model 256, E = 8 experts of d_ff 512, top-2 gating with capacity 2S/E, on
S = 2 x 256 tokens; each token runs through two experts, so the dense peer is one FFN of d_ff
1024 (ReLU, no biases): the same multiply-adds per token, a quarter of the MoE's parameters.
PyTorch's MoE is the same algorithm (softmax gate, top-2, capacity, dense (S, E, C) dispatch and
combine einsums). Times: medians of interleaved rounds; ratios: medians of per-round ratios
(the machine is shared, so compare ratios measured in the same run).

Needs ``torch`` for its column: run it from a throw-away virtual environment
(``pip install torch==2.13.0``), never a dependency of the library.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import minitorch_nlp as mt  # noqa: E402 - after the path set-up above
from backends import interleaved, median_ms, median_ratio, optional_peers, pin_threads  # noqa: E402
from minitorch_nlp import nn  # noqa: E402

D_MODEL, D_FF, EXPERTS, TOKENS = 256, 512, 8, (2, 256)


def ours():
    mt.manual_seed(0)
    layer = nn.MixtureOfExperts(D_MODEL, D_FF, EXPERTS, k=2, second_expert="all")
    dense = nn.Experts(1, D_MODEL, 2 * D_FF)               # one ReLU FFN without biases
    x = mt.randn(*TOKENS, D_MODEL, requires_grad=True)

    def moe_step():
        layer(x).sum().backward()

    def dense_step():
        dense(x.reshape(1, -1, D_MODEL)).sum().backward()
    return moe_step, dense_step


def torch_runners(torch):
    generator = torch.Generator().manual_seed(0)
    wg = torch.randn(D_MODEL, EXPERTS, generator=generator, requires_grad=True)
    wi = torch.randn(EXPERTS, D_MODEL, D_FF, generator=generator, requires_grad=True)
    wo = torch.randn(EXPERTS, D_FF, D_MODEL, generator=generator, requires_grad=True)
    w1 = torch.randn(D_MODEL, 2 * D_FF, generator=generator, requires_grad=True)
    w2 = torch.randn(2 * D_FF, D_MODEL, generator=generator, requires_grad=True)
    x = torch.randn(TOKENS[0] * TOKENS[1], D_MODEL, generator=generator, requires_grad=True)
    tokens = x.shape[0]
    capacity = 2 * tokens // EXPERTS

    def moe_step():
        gates = torch.softmax(x @ wg, dim=-1)
        top = gates.topk(2, dim=-1)
        weights = top.values / top.values.sum(-1, keepdim=True)
        combine = torch.zeros(tokens, EXPERTS, capacity)
        filled = torch.zeros(EXPERTS, dtype=torch.long)
        for choice in range(2):                      # first choices, then second choices
            experts = top.indices[:, choice]
            one_hot = torch.nn.functional.one_hot(experts, EXPERTS)
            slots = ((one_hot.cumsum(0) - one_hot) * one_hot).sum(-1) + filled[experts]
            kept = slots < capacity
            filled += (one_hot * kept[:, None]).sum(0)
            place = one_hot[:, :, None] * torch.nn.functional.one_hot(
                slots.clamp(max=capacity - 1), capacity)[:, None, :] * kept[:, None, None]
            combine = combine + weights[:, choice, None, None] * place
        dispatch = (combine > 0).to(x.dtype)
        inputs = torch.einsum("sec,sm->ecm", dispatch, x)
        outputs = torch.relu(inputs @ wi) @ wo
        torch.einsum("sec,ecm->sm", combine, outputs).sum().backward()

    def dense_step():
        (torch.relu(x @ w1) @ w2).sum().backward()
    return moe_step, dense_step


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--budget", type=float, default=20.0)
    args = parser.parse_args()
    torch = optional_peers()["torch"]
    for threads in args.threads:
        print(pin_threads(threads))
        runners = dict(zip(("ours MoE", "ours dense"), ours()))
        if torch is not None:
            runners.update(zip(("torch MoE", "torch dense"), torch_runners(torch)))
        times = interleaved(runners, args.repeats, args.budget)
        print("  " + ", ".join(f"{name} {median_ms(t):.1f} ms" for name, t in times.items()))
        print(f"  MoE / dense: ours {median_ratio(times['ours MoE'], times['ours dense']):.2f}x"
              + (f", PyTorch {median_ratio(times['torch MoE'], times['torch dense']):.2f}x; "
                 f"MoE ours / PyTorch "
                 f"{median_ratio(times['ours MoE'], times['torch MoE']):.2f}x"
                 if torch is not None else ""))


if __name__ == "__main__":
    main()
