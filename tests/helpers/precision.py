"""16-bit numbers: the path a mixed-precision mode takes on this CPU (:func:`expected_precision_path`)
and sums in fp16 or bf16 checked against their rounding bound (:func:`assert_16_bit_sum`)."""

import numpy as np

__all__ = ['expected_precision_path', 'UNIT_ROUNDOFF', 'rounded', 'assert_16_bit_sum']


def expected_precision_path(mode):
    """The path a mixed-precision mode should take here, from the CPU's flags (written out here,
    not taken from the library): the tests compare it with the path measured at the first step."""
    try:
        with open('/proc/cpuinfo') as f:
            flags = {flag for line in f if line.startswith('flags') for flag in line.split(':', 1)[1].split()}
    except OSError:
        flags = set()
    if mode == 'fp16':
        return 'emulated'      # no GPU can run TensorFlow here
    if not flags & {'avx512f', 'avx_ne_convert'}:
        return 'float32'       # TensorFlow's oneDNN bfloat16 rewrite leaves the graph alone
    return 'native' if flags & {'avx512_bf16', 'amx_bf16'} else 'emulated'


UNIT_ROUNDOFF = {'fp16': 2.0 ** -11, 'bf16': 2.0 ** -8}
"""The largest relative error of one rounding to nearest in each 16-bit format (within its
normal range)."""


def rounded(values, compression):
    """``values`` rounded to nearest even in 16 bits (``'fp16'`` or ``'bf16'``), back in float32."""
    import ml_dtypes
    wire = np.float16 if compression == 'fp16' else ml_dtypes.bfloat16
    return np.asarray(values, np.float32).astype(wire).astype(np.float32)


def assert_16_bit_sum(value, parts, compression, scale=1):
    """``value`` is a 16-bit number (held in float32 or float64) within the error bound of
    summing the N ``parts``, each times ``scale`` first, in 16 bits in any order: N - 1
    roundings of partial sums and one of each part, each off by at most u times what it
    rounds (u: :data:`UNIT_ROUNDOFF`), plus half the smallest fp16 subnormal (2^-25) below
    fp16's normal range; and not the exact sum (rounding happened)."""
    value = np.asarray(value)
    np.testing.assert_array_equal(rounded(value, compression), value.astype(np.float32))
    scaled = [np.asarray(p, np.float64) * scale for p in parts]
    exact = np.sum(scaled, axis=0)
    count = len(parts)
    magnitude = np.sum(np.abs(scaled), axis=0)
    tolerance = count * UNIT_ROUNDOFF[compression] * magnitude * 1.01 + 2 * count * 2.0 ** -25
    excess = np.abs(value - exact) - tolerance
    assert np.all(excess <= 0), "16-bit sum off by {} more than its bound".format(excess.max())
    assert not np.array_equal(value, exact.astype(value.dtype))
