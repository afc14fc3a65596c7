"""T5's own maths (Raffel et al., 2020, section 2.1), which the survey states in words only: the
relative-position bucket of a key-minus-query offset and the RMS layer norm. Written from the
paper and Mesh TensorFlow's description, one offset or one vector at a time."""
from __future__ import annotations

import math

import autograd.numpy as anp


def relative_position_bucket(offset, *, bidirectional, num_buckets, max_distance):
    """The bucket of one offset (key position - query position), an int.

    Bidirectional: offsets > 0 (keys after the query) use buckets n/2 .. n - 1, the others
    0 .. n/2 - 1; causal: keys after the query all fall in bucket 0 and the n buckets count
    distances back. Within a direction of m buckets, distances below m/2 have a bucket each; a
    larger distance d gets m/2 + floor(log(d / (m/2)) / log(max_distance / (m/2)) * (m - m/2)),
    at most m - 1."""
    if bidirectional:
        per_direction = num_buckets // 2
        first = per_direction if offset > 0 else 0
        distance = abs(offset)
    else:
        per_direction, first = num_buckets, 0
        distance = -offset if offset < 0 else 0
    exact = per_direction // 2
    if distance < exact:
        return first + distance
    spread = math.log(distance / exact) / math.log(max_distance / exact)
    return first + min(exact + int(spread * (per_direction - exact)), per_direction - 1)


def rms_norm(x, weight, eps):
    """RMSNorm(x) = x / sqrt(mean(x_i^2) + eps) * g over the last axis (Zhang & Sennrich,
    2019), for x of shape (..., d): a loop over the vectors, the mean as a sum / d."""
    flat = anp.reshape(x, (-1, x.shape[-1]))
    rows = [row * weight / anp.sqrt(anp.sum(row ** 2) / x.shape[-1] + eps) for row in flat]
    return anp.reshape(anp.stack(rows), x.shape)
