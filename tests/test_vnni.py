"""The VNNI byte dot of 7-bit codes (``bbqlib._kernels.vnni``) against NumPy.

``byte_dot7`` must give the integers ``byte_dot`` gives (an exact int64 dot) for a first row of
any bytes and a second row of values below 128, at every length: the 64-byte steps, the
32- and 16-byte tail steps and the single bytes after them. On a CPU without AVX-512 VNNI
``byte_dot7`` is ``byte_dot`` and these tests check that path instead.
"""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit
from reference.scoring import estimate_reference, int_dot

from bbqlib._kernels import scoring as KS
from bbqlib._kernels import vnni as KV

# Every tail shape: lengths around the 16/32/64-byte steps and their sums.
LENGTHS = [1, 2, 15, 16, 17, 31, 32, 33, 47, 48, 49, 63, 64, 65, 80, 95, 96, 97, 111, 112, 113,
           127, 128, 129, 300, 384, 768, 1000]  # fmt: skip


@njit(cache=False)
def _dots(Q, D):
    out = np.empty((Q.shape[0], D.shape[0]), dtype=np.int64)
    for i in range(Q.shape[0]):
        for j in range(D.shape[0]):
            out[i, j] = KV.byte_dot7(Q[i], D[j])
    return out


def _rows(rng, n, d, high):
    return rng.integers(0, high, (n, d), dtype=np.int64).astype(np.uint8)


@pytest.mark.parametrize("d", LENGTHS)
def test_byte_dot7_equals_numpy(d):
    rng = np.random.default_rng(d)
    Q = _rows(rng, 6, d, 256)
    D = _rows(rng, 9, d, 128)
    # extremes: all-max rows (the largest sums), zeros, one set byte at each end
    Q[0] = 255
    D[0] = 127
    Q[1] = 0
    D[1] = 0
    D[2] = 0
    D[2, -1] = 127
    Q[2] = 0
    Q[2, 0] = 255
    np.testing.assert_array_equal(_dots(Q, D), int_dot(Q, D))


def test_byte_dot7_reads_only_the_second_rows_length():
    """Like ``byte_dot``, the dot runs over ``len(d)``; a longer first row is allowed."""
    rng = np.random.default_rng(1)
    Q = _rows(rng, 3, 100, 256)
    D = _rows(rng, 4, 70, 128)
    np.testing.assert_array_equal(_dots(Q, D), int_dot(Q[:, :70], D))


def test_long_rows_take_the_64_bit_loop():
    """Beyond ``BYTE_RUN`` a 32-bit sum could wrap: those rows take ``byte_dot``'s int64 loop."""
    d = KS.BYTE_RUN + 5
    Q = np.full((1, d), 255, np.uint8)
    D = np.full((1, d), 127, np.uint8)
    assert _dots(Q, D)[0, 0] == 255 * 127 * d


@pytest.mark.parametrize("is_l2", [False, True])
@pytest.mark.parametrize("d", [24, 300, 384])
def test_estimate_bytes7_equals_estimate_bytes(d, is_l2):
    """The plan's estimates: the same floats as ``estimate_bytes`` (same integers, same
    expression), and the NumPy reference's to rounding."""
    rng = np.random.default_rng(d + is_l2)
    Q = _rows(rng, 5, d, 128)
    D = _rows(rng, 200, d, 128)
    qf = rng.normal(size=(5, 4))
    df = rng.normal(size=(200, 4)).astype(np.float32)
    got = np.empty((5, 200))
    ref = np.empty((5, 200))
    KV.estimate_bytes7(Q, qf, D, df, d, 0.25, is_l2, got)
    KS.estimate_bytes(Q, qf, D, df, d, 0.25, is_l2, ref)
    np.testing.assert_array_equal(got, ref)
    serial = np.empty((5, 200))
    KV.estimate_bytes7.serial(Q, qf, D, df, d, 0.25, is_l2, serial)
    np.testing.assert_array_equal(serial, ref)
    expected = estimate_reference(qf, df, int_dot(Q, D), d, 0.25, is_l2)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-9 * np.abs(expected).max())


def test_vnni_only_for_this_cpu(monkeypatch):
    """Code compiled for another CPU (``NUMBA_CPU_NAME``) never uses the instruction."""
    import numba

    monkeypatch.setattr(numba.config, "CPU_NAME", "generic")
    assert not KV._host_has_vnni()
