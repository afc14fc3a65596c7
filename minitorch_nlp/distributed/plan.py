"""Planning past this machine: memory per device and communication per step of a GPT trained on
many devices with a data x tensor x pipeline layout and ZeRO, from the model's shapes alone
(``models.gpt3.count_parameters``; nothing is allocated).

Memory per device:

* model state: Psi_d = Psi / (tp pp) parameters per model replica shard, at ``parameter_bytes``
  + ``gradient_bytes`` + ``optimizer_bytes`` per parameter (mixed-precision Adam: 2 + 2 + 12;
  float32 AdamW as this framework trains: 4 + 4 + 8), divided over the dp replicas as the ZeRO
  stage divides it (``zero.zero_state_bytes``; Rajbhandari et al., 2020, figure 1);
* activations (Korthikanti et al., 2022, "Reducing Activation Recomputation in Large Transformer
  Models", eq. 2, 16-bit activations): per layer and micro-batch s b h (10 + 24 / t +
  5 a s / (h t)) bytes with tensor parallelism t (and no sequence parallelism); with full
  recomputation only each layer's input, 2 s b h. Under the 1F1B pipeline schedule the first
  stage holds pp micro-batches of its L / pp layers: L layers' worth.

Communication per device and step (bytes sent, ring algorithms: an all-reduce of n bytes over p
ranks sends 2 n (p - 1) / p):

* data parallelism: the gradients' all-reduce, 2 Psi_d (dp - 1) / dp gradient bytes; ZeRO 1
  and 2 the same volume (reduce-scatter + all-gather), ZeRO 3 1.5 times it (section 7);
* tensor parallelism: 4 all-reduces of s b h activations per layer and micro-batch (Megatron's
  f and g, forward and backward; 6 with recomputation), over the device's L / pp layers;
* pipeline parallelism: each micro-batch's s b h activations sent forward and their gradients
  back across each stage boundary.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from .. import checks
from .zero import zero_state_bytes

__all__ = ["Layout", "MEGATRON_SIZES", "PRECISIONS", "model_config", "parse_layout", "plan"]

PRECISIONS = {"mixed": dict(parameter_bytes=2, gradient_bytes=2, optimizer_bytes=12,
                            activation_scale=1.0),
              "float32": dict(parameter_bytes=4, gradient_bytes=4, optimizer_bytes=8,
                              activation_scale=2.0)}


MEGATRON_SIZES = {   # Shoeybi et al. (2019), table 1: (reported, hidden, heads, layers)
    "megatron-1.2b": (1.2e9, 1536, 16, 40),
    "megatron-2.5b": (2.5e9, 1920, 20, 54),
    "megatron-4.2b": (4.2e9, 2304, 24, 64),
    "megatron-8.3b": (8.3e9, 3072, 32, 72),
}
"""Megatron-LM's GPT-2 configurations: 1024 positions, a vocabulary padded to 51 200."""


def model_config(name):
    """The config of a named model: ``gpt3-small`` ... ``gpt3-175b`` (GPT-3's table 2.1) or
    ``megatron-1.2b`` ... ``megatron-8.3b``."""
    from ..models.gpt import GPTConfig
    from ..models.gpt3 import GPT3_SIZES, GPT3Config
    if name in GPT3_SIZES:
        return GPT3Config.preset(name)
    if name in MEGATRON_SIZES:
        _, hidden, heads, layers = MEGATRON_SIZES[name]
        return GPTConfig(vocab_size=51200, n_positions=1024, n_embd=hidden, n_head=heads,
                         n_layer=layers)
    raise ValueError(f"plan: unknown --model {name!r}; models: "
                     f"{', '.join(list(GPT3_SIZES) + list(MEGATRON_SIZES))}")


@dataclass(frozen=True)
class Layout:
    """Data-, tensor- and pipeline-parallel degrees; their product is the number of devices."""

    dp: int = 1
    tp: int = 1
    pp: int = 1

    @property
    def devices(self):
        return self.dp * self.tp * self.pp


def parse_layout(text, devices, *, command="plan", devices_name="--gpus"):
    """``"dp=8,tp=8,pp=16"`` for ``devices`` devices; a degree left out is 1, except dp, which
    defaults to what the others leave (devices / (tp pp)). Errors name ``command``'s
    ``--parallel`` and the count of devices as ``devices_name``."""
    where = f"{command}: --parallel"
    devices = checks.positive_int(devices, devices_name, command)
    degrees = {}
    for item in filter(None, (part.strip() for part in (text or "").split(","))):
        match = re.fullmatch(r"(dp|tp|pp)=(\d+)", item)
        if not match or int(match.group(2)) < 1:
            raise ValueError(f"{where}: {item!r} is not dp=N, tp=N or pp=N with N >= 1")
        degrees[match.group(1)] = int(match.group(2))
    tp, pp = degrees.get("tp", 1), degrees.get("pp", 1)
    if "dp" not in degrees:
        if devices % (tp * pp):
            raise ValueError(f"{where}: tp x pp = {tp * pp} does not divide {devices_name} "
                             f"{devices}")
        degrees["dp"] = devices // (tp * pp)
    layout = Layout(degrees["dp"], tp, pp)
    if layout.devices != devices:
        raise ValueError(f"{where}: dp x tp x pp = {layout.dp} x {tp} x {pp} = "
                         f"{layout.devices} devices, but {devices_name} is {devices}")
    return layout


def plan(config, layout, *, zero=0, micro_batch=1, global_batch=None, seq_len=None,
         precision="mixed", recompute=False):
    """Memory per device and bytes sent per device and step (see the module docstring) for a
    GPT ``config`` (``GPTConfig`` or ``GPT3Config``) trained with ``layout``, ZeRO stage
    ``zero`` over the data-parallel replicas, ``micro_batch`` sequences of ``seq_len`` tokens
    (default: n_positions) per micro-batch and ``global_batch`` sequences per step (default:
    one micro-batch per replica). Returns a dict: ``parameters`` (the model's),
    ``parameters_per_device``, ``model_state`` (bytes of parameters, gradients and optimizer
    state per device), ``activations`` (bytes, as ``recompute`` says; both variants are there
    too), ``micro_batches`` per step and the bytes sent per device and step, ``dp_bytes``,
    ``tp_bytes``, ``pp_bytes``."""
    from ..models.gpt3 import count_parameters
    if precision not in PRECISIONS:
        raise ValueError(f"plan: --precision must be one of {tuple(PRECISIONS)}, got "
                         f"{precision!r}")
    sizes = PRECISIONS[precision]
    micro_batch = checks.positive_int(micro_batch, "micro_batch", "plan")
    seq_len = config.n_positions if seq_len is None else checks.positive_int(seq_len, "seq_len",
                                                                              "plan")
    global_batch = layout.dp * micro_batch if global_batch is None else global_batch
    if global_batch % (layout.dp * micro_batch):
        raise ValueError(f"plan: --global-batch {global_batch} must be a multiple of dp x "
                         f"--micro-batch = {layout.dp * micro_batch}")
    for name, degree, total in (("tp", layout.tp, config.n_head), ("pp", layout.pp,
                                                                    config.n_layer)):
        if total % degree:
            raise ValueError(f"plan: {name}={degree} must divide the model's "
                             f"{'heads' if name == 'tp' else 'layers'} ({total})")
    micro_batches = global_batch // (layout.dp * micro_batch)
    psi = count_parameters(config)
    psi_device = psi / (layout.tp * layout.pp)
    state = zero_state_bytes(max(1, round(psi_device)), layout.dp, zero,
                             parameter_bytes=sizes["parameter_bytes"],
                             gradient_bytes=sizes["gradient_bytes"],
                             optimizer_bytes=sizes["optimizer_bytes"])
    s, b, h, a, t = seq_len, micro_batch, config.n_embd, config.n_head, layout.tp
    per_layer = s * b * h * (10 + 24 / t + 5 * a * s / (h * t))
    in_flight_layers = config.n_layer // layout.pp * min(layout.pp, micro_batches)
    scale = sizes["activation_scale"]
    activations = scale * per_layer * in_flight_layers
    recomputed = scale * 2 * s * b * h * in_flight_layers

    def ring(nbytes, ranks):
        return 2 * nbytes * (ranks - 1) / ranks

    gradient_bytes = psi_device * sizes["gradient_bytes"]
    dp_volume = ring(gradient_bytes, layout.dp) * (1.5 if zero == 3 else 1.0)
    activation_bytes = s * b * h * 2 * scale
    tp_volume = (6 if recompute else 4) * ring(activation_bytes, t) * \
        (config.n_layer // layout.pp) * micro_batches
    pp_volume = 2 * activation_bytes * micro_batches if layout.pp > 1 else 0.0
    return {"parameters": psi, "parameters_per_device": psi_device, "model_state": state,
            "activations": recomputed if recompute else activations,
            "activations_without_recompute": activations,
            "activations_with_recompute": recomputed, "micro_batches": micro_batches,
            "dp_bytes": dp_volume, "tp_bytes": tp_volume, "pp_bytes": pp_volume}
