"""Reference maths, written in ``autograd.numpy`` so that HIPS autograd differentiates it.

One function per paper equation, named ``eqNN_short_name`` (``eq11_scaled_attention``), in a
module per paper section, plus ``primitives`` for the engine's own operations. See README.md for
the pattern and how a test uses it.
"""
