"""Gradient rules for scipy.signal, registered lazily (registry._PENDING).

N-d convolution and correlation are bilinear; 'same' and 'valid' cut the
centre out of the full result, so the cotangent is first put back in place
(embed_centered) and then correlated with the other operand ('valid').
"""
from __future__ import annotations

from scipy import signal

from .registry import defvjp

defvjp(signal.convolve, "in1, in2, mode='full', method='auto'",
       prelude="gf = embed_centered(g, full_conv_shape(in1, in2))",
       in1="signal_correlate(gf, in2, 'valid')", in2="signal_correlate(gf, in1, 'valid')",
       name="scipy.signal.convolve")
defvjp(signal.correlate, "in1, in2, mode='full', method='auto'",
       prelude="gf = embed_centered(g, full_conv_shape(in1, in2))",
       in1="signal_convolve(gf, in2, 'valid')", in2="signal_correlate(in1, gf, 'valid')",
       name="scipy.signal.correlate")
