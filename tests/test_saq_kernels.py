"""SAQ kernels against the NumPy reference (tests/reference/saq.py): CAQ codes and factors,
packing, lookup tables, estimates, scans and the 4-bit lookup-table scan, on random and
adversarial inputs."""

from __future__ import annotations

import numpy as np
import pytest
from reference import saq as ref

from bbqlib._kernels import saq as saq_kernels
from bbqlib._kernels.lut import avx2_available
from bbqlib.quantizers.saq.plan import SAQPlan, Segment

needs_avx2 = pytest.mark.skipif(not avx2_available(), reason="the 4-bit scan needs AVX2")


def _plan(dims, bits, dim=None):
    segs, pos = [], 0
    for d, b in zip(dims, bits, strict=True):
        segs.append(Segment(pos, d, b))
        pos += d
    total = dim or -(-pos // 64) * 64
    return SAQPlan(tuple(segs), total, total, 16, 10**9)


def _encode(Y, plan, rounds=6):
    a = plan.arrays()
    n = len(Y)
    codes = np.zeros((n, plan.code_bytes), dtype=np.uint8)
    fac = np.zeros((n, 1 + 2 * len(plan.segments)), dtype=np.float32)
    saq_kernels.caq_encode_rows(
        np.ascontiguousarray(Y, np.float32),
        a["start"],
        a["dims"],
        a["bits"],
        a["msb_off"],
        a["low_off"],
        rounds,
        codes,
        fac,
    )
    return codes, fac


def _adversarial(d, rng):
    """Rows that stress CAQ: zeros, constants, one-hots, ties at grid points, huge and tiny
    magnitudes, alternating signs."""
    rows = [
        np.zeros(d),
        np.ones(d),
        -np.ones(d),
        np.eye(d)[0] * 5.0,
        np.linspace(-1, 1, d),
        np.round(rng.uniform(-1, 1, d) * 4) / 4,
        rng.standard_normal(d) * 1e30,
        rng.standard_normal(d) * 1e-30,
        np.where(np.arange(d) % 2 == 0, 1.0, -1.0) * 3.0,
        np.r_[np.full(d - 1, 1e-6), 1.0],
    ]
    return np.array(rows, dtype=np.float32)


@pytest.mark.parametrize("bits", [1, 2, 3, 4, 6, 8, 12])
@pytest.mark.parametrize("d", [8, 16, 32, 64, 96])
def test_caq_encode_matches_reference(bits, d):
    rng = np.random.default_rng(bits * 100 + d)
    Y = np.vstack([rng.standard_normal((6, d)).astype(np.float32), _adversarial(d, rng)])
    plan = _plan([d], [bits])
    codes, fac = _encode(Y, plan)
    ref_codes, scale, norm = ref.encode_rows(Y, [d], [bits])
    np.testing.assert_array_equal(codes, ref_codes)
    np.testing.assert_allclose(fac[:, 1], scale.ravel(), rtol=2e-6)
    np.testing.assert_allclose(fac[:, 2], norm.ravel(), rtol=2e-6)


@pytest.mark.parametrize("rounds", [0, 1, 6])
def test_caq_multi_segment_rows_and_rounds(rounds):
    rng = np.random.default_rng(rounds)
    dims, bits = [32, 64, 16], [5, 2, 1]
    Y = rng.standard_normal((20, sum(dims))).astype(np.float32) * np.repeat([3.0, 1.0, 0.2], dims)
    codes, fac = _encode(Y, _plan(dims, bits), rounds)
    ref_codes, scale, norm = ref.encode_rows(Y, dims, bits, rounds)
    np.testing.assert_array_equal(codes, ref_codes)
    np.testing.assert_allclose(fac[:, 1:4], scale, rtol=2e-6)
    np.testing.assert_allclose(fac[:, 4:7], norm, rtol=2e-6)


def test_pack_layout_puts_top_planes_first():
    """Row prefix = every segment's top plane; unpacking returns the levels."""
    rng = np.random.default_rng(5)
    dims, bits = [16, 32], [3, 2]
    levels = [rng.integers(0, 2**b, d) for d, b in zip(dims, bits, strict=True)]
    row = ref.pack_row(levels, bits)
    assert len(row) == (16 * 3 + 32 * 2) // 8
    top = np.unpackbits(row[: (16 + 32) // 8])
    np.testing.assert_array_equal(top[:16], levels[0] >> 2)
    np.testing.assert_array_equal(top[16:], levels[1] >> 1)
    for got, want in zip(ref.unpack_row(row, dims, bits), levels, strict=True):
        np.testing.assert_array_equal(got, want)


def test_tables_match_definition():
    rng = np.random.default_rng(1)
    Q = rng.standard_normal((3, 24)).astype(np.float32)
    T = np.empty((3, 3, 256), dtype=np.float32)
    saq_kernels.build_tables(Q, T)
    bits = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1)  # [256, 8] MSB first
    for q in range(3):
        for p in range(3):
            want = bits.astype(np.float64) @ Q[q, 8 * p : 8 * p + 8]
            np.testing.assert_allclose(T[q, p], want, atol=2e-6)


def _estimate_case(rng, is_l2, dims=(32, 48, 16), bits=(4, 2, 1), n=40, nq=5, scale=1.0):
    dims, bits = list(dims), list(bits)
    plan = _plan(dims, bits)
    Y = (rng.standard_normal((n, sum(dims))) * scale).astype(np.float32)
    Qc = (rng.standard_normal((nq, sum(dims))) * scale).astype(np.float32)
    codes, fac = _encode(Y, plan)
    fac[:, 0] = rng.standard_normal(n)
    q_add = rng.standard_normal(nq)
    T = np.empty((nq, sum(dims) // 8, 256), dtype=np.float32)
    saq_kernels.build_tables(Qc, T)
    S = len(dims)
    qconst = np.stack(
        [
            (2**b - 1) / 2 * Qc[:, p : p + d].sum(1, dtype=np.float64)
            for p, d, b in zip(np.cumsum([0, *dims[:-1]]), dims, bits, strict=True)
        ],
        1,
    )
    want = ref.estimate(
        Qc,
        codes,
        fac[:, 1 : 1 + S].astype(np.float64),
        fac[:, 0].astype(np.float64),
        q_add,
        dims,
        bits,
        is_l2,
    )
    return plan, codes, fac, T, qconst, q_add, want


@pytest.mark.parametrize("is_l2", [True, False])
@pytest.mark.parametrize("scale", [1.0, 1e-3, 1e3])
def test_estimate_and_scan_match_reference(is_l2, scale):
    rng = np.random.default_rng(int(is_l2) + 7)
    plan, codes, fac, T, qconst, q_add, want = _estimate_case(rng, is_l2, scale=scale)
    a = plan.arrays()
    seg = (a["start"], a["dims"], a["bits"], a["msb_off"], a["low_off"])
    out = np.empty(want.shape)
    saq_kernels.estimate_rows(T, qconst, q_add, codes, fac, *seg, is_l2, out)
    # float32 tables: error about 1e-7 of the summed magnitudes
    tol = 1e-5 * (np.abs(want).max() + scale * scale * 100)
    np.testing.assert_allclose(out, want, atol=tol)
    k = 7
    for chunks in (1, 3):
        keys = np.full((chunks, len(T), k), -np.inf)
        ids = np.full((chunks, len(T), k), np.iinfo(np.int64).max, dtype=np.int64)
        saq_kernels.scan_rows(
            T, qconst, q_add, codes, fac, *seg, is_l2, np.empty(0, np.uint8), 0, keys, ids
        )
        got = np.sort(ids.transpose(1, 0, 2).reshape(len(T), -1), axis=1)
        key = -out if is_l2 else out
        best = np.sort(np.argsort(-key, axis=1, kind="stable")[:, :k], axis=1)
        got = np.array(
            [np.sort(r[np.argsort(-key[i, r], kind="stable")][:k]) for i, r in enumerate(got)]
        )
        np.testing.assert_array_equal(got, best)


def test_scan_mask_and_id_base():
    rng = np.random.default_rng(3)
    plan, codes, fac, T, qconst, q_add, want = _estimate_case(rng, False)
    a = plan.arrays()
    seg = (a["start"], a["dims"], a["bits"], a["msb_off"], a["low_off"])
    mask = (np.arange(len(codes)) % 3 == 0).astype(np.uint8)
    keys = np.full((1, len(T), 5), -np.inf)
    ids = np.full((1, len(T), 5), np.iinfo(np.int64).max, dtype=np.int64)
    saq_kernels.scan_rows(T, qconst, q_add, codes, fac, *seg, False, mask, 1000, keys, ids)
    assert np.all((ids - 1000) % 3 == 0)


@needs_avx2
@pytest.mark.parametrize("is_l2", [True, False])
@pytest.mark.parametrize("planes", [None, 2, 1])
def test_fastscan_estimate_matches_dequantized_query(is_l2, planes):
    """The 4-bit lookup-table scan computes the estimate of the dequantized 4-bit query; with
    ``keep`` < bits, that of the levels cut to their top bits plus the dropped bits' midpoint."""
    from bbqlib._kernels.lut import build_tables as nibble_tables
    from bbqlib._kernels.saq_fastscan import fastscan_estimate
    from bbqlib.packing import lut_blocks

    rng = np.random.default_rng(11)
    dims, bits = [32, 48, 16], [4, 2, 1]
    keep = np.array(bits if planes is None else [min(b, planes) for b in bits])
    plan = _plan(dims, bits)
    n, nq = 70, 4  # 70: a partial last block
    codes, fac = _encode(rng.standard_normal((n, 96)).astype(np.float32), plan)
    fac[:, 0] = rng.standard_normal(n)
    y = rng.integers(0, 16, (nq, 96)).astype(np.uint8)
    lo = rng.standard_normal((nq, 3))
    step = rng.uniform(0.01, 0.2, (nq, 3))
    starts = np.cumsum([0, *dims[:-1]])
    segs = list(zip(starts, dims, bits, keep, strict=True))
    Qq = np.concatenate(
        [lo[:, [s]] + step[:, [s]] * y[:, p : p + d] for s, (p, d, _, _) in enumerate(segs)], 1
    )
    q_add = rng.standard_normal(nq)
    want = np.zeros((nq, n))
    levels = [ref.unpack_row(r, dims, bits) for r in codes]
    for s, (p, d, b, kp) in enumerate(segs):
        r = b - kp
        cut = np.array([((lv[s] >> r) << r) + (2**r - 1) / 2 for lv in levels])  # [n, d]
        qs = Qq[:, p : p + d]
        want += fac[:, 1 + s][None, :] * (qs @ cut.T - (2**b - 1) / 2 * qs.sum(1)[:, None])
    want = (q_add[:, None] + fac[:, 0] - 2 * want) if is_l2 else (want + fac[:, 0] + q_add[:, None])
    w = np.array([[2.0 ** (b - kp) for _, _, b, kp in segs]] * nq)
    const = np.stack(
        [
            ((2 ** (b - kp) - 1) / 2 - (2**b - 1) / 2) * Qq[:, p : p + d].sum(1)
            for p, d, b, kp in segs
        ],
        1,
    )
    tables = np.empty((nq, 2 * 12 * 32), dtype=np.uint8)
    nibble_tables(y, 12, tables)
    ksum = np.array(
        [[(lv[s] >> (b - kp)).sum() for s, (_, _, b, kp) in enumerate(segs)] for lv in levels]
    )
    a = plan.arrays()
    out = np.empty((nq, n))
    fastscan_estimate(
        tables,
        lo,
        step,
        w,
        const,
        q_add,
        lut_blocks(codes),
        n,
        np.ascontiguousarray(fac.T),
        np.ascontiguousarray(ksum.T.astype(np.float32)),
        a["start"],
        a["dims"],
        keep,
        a["msb_off"],
        a["low_off"],
        is_l2,
        out,
    )
    np.testing.assert_allclose(out, want, atol=1e-6 * np.abs(want).max())


def _drive_gather(bkeys, gnorm, hmax, k):
    """Two-pass candidate gathering over blocks of 32 rows inside a prange loop, as the
    flat and IVF two-pass scans run it (``_gather`` inlined)."""
    import numba

    from bbqlib._kernels.saq_fastscan import _gather

    @numba.njit(parallel=True)
    def drive(bkeys, gnorm, hmax, k):
        n = bkeys.shape[0]
        out = np.zeros((1, 3 * n + 1))
        cols = np.zeros((2, n), dtype=np.float32)
        qerr = np.ones(1)
        qtrunc = np.zeros(1)
        ids = np.empty(0, dtype=np.int64)
        allowed = np.empty(0, dtype=np.uint8)
        for q in numba.prange(1):
            pess = np.full(k, -np.inf)
            pess_ids = np.full(k, np.iinfo(np.int64).max, dtype=np.int64)
            cand = np.empty(1024, dtype=np.int64)
            cand_key = np.empty(1024, dtype=np.float64)
            cand_add = np.empty(1024, dtype=np.float64)
            cm = 0
            for r0 in range(0, n, 32):
                m = min(32, n - r0)
                cand, cand_key, cand_add, cm = _gather(
                    bkeys[r0 : r0 + m], m, r0, hmax, cols, gnorm, qerr, qtrunc, 1.0, ids,
                    allowed, pess, pess_ids, cand, cand_key, cand_add, cm, 0.5,
                )  # fmt: skip
            out[q, 0] = cm
            for i in range(cm):
                out[q, 1 + i] = cand[i]
                out[q, 1 + n + i] = cand_key[i]
                out[q, 1 + 2 * n + i] = cand_add[i]
        return out

    return drive(bkeys, gnorm, hmax, k)


def test_two_pass_candidates_grow_after_a_partial_compaction():
    """Keys rising along the rows with half-widths of 0.35: the first full buffer (1,024)
    keeps about 700 candidates above the bar, so it drops some and doubles. Compiled inside
    a prange loop, the buffer's slice copies raised a numba size assertion there ("Sizes of
    bigger, ... do not match", seen on 1M vectors); the result equals the same function run
    by the interpreter."""
    from bbqlib._kernels.saq_fastscan import _gather

    n, k = 4096, 10
    bkeys = np.arange(n) * 1e-3
    gnorm = np.full((1, n), 0.35, dtype=np.float32)
    out = _drive_gather(bkeys, gnorm, 0.35, k)[0]
    cm = int(out[0])
    # the interpreted twin, block by block
    cols = np.zeros((2, n), dtype=np.float32)
    pess, pess_ids = np.full(k, -np.inf), np.full(k, np.iinfo(np.int64).max, dtype=np.int64)
    cand, cand_key, cand_add = np.empty(1024, np.int64), np.empty(1024), np.empty(1024)
    rm = 0
    for r0 in range(0, n, 32):
        cand, cand_key, cand_add, rm = _gather.py_func(
            bkeys[r0 : r0 + 32], 32, r0, 0.35, cols, gnorm, np.ones(1), np.zeros(1), 1.0,
            np.empty(0, np.int64), np.empty(0, np.uint8), pess, pess_ids, cand, cand_key,
            cand_add, rm, 0.5,
        )  # fmt: skip
    assert len(cand) > 1024  # the buffer grew
    assert 512 < cm < n and cm == rm
    np.testing.assert_array_equal(out[1 : 1 + cm], cand[:cm])
    np.testing.assert_array_equal(out[1 + n : 1 + n + cm], cand_key[:cm])
    np.testing.assert_array_equal(out[1 + 2 * n : 1 + 2 * n + cm], cand_add[:cm])


# ------------------------------------------------------------------- query preparation
U = np.finfo(np.float64).eps / 2  # unit roundoff


def _queries(rng, dims, nq=6):
    """Random rows plus adversarial ones: constant segments (step 0), values tied at .5
    between levels, zeros, huge and tiny magnitudes."""
    d = sum(dims)
    Q = rng.standard_normal((nq, d))
    ties = np.resize([0.0, 15.0, 0.5, 1.5, 2.5, 3.5, 7.5, 14.5, 13.5, 6.5], d)  # step 1
    rows = [ties, np.full(d, 3.0), np.zeros(d), rng.standard_normal(d) * 1e30,
            rng.standard_normal(d) * 1e-30, np.r_[np.full(d - 1, -2.0), 2.0]]  # fmt: skip
    Q = np.vstack([Q, rows]).astype(np.float32)
    Q[0, : dims[0]] = -1.25  # one constant segment in an otherwise random row
    return Q


def _sum_tol(rows, dims, coef=1.0):
    """Bound on the difference of two float64 sums of each segment in different orders:
    ``2 d u Σ|t|`` (each order errs by at most ``(d - 1) u Σ|t|``), times ``|coef|``."""
    out = np.stack(
        [2 * d * U * np.abs(rows[:, p : p + d].astype(np.float64)).sum(1)
         for p, d in zip(np.cumsum([0, *dims[:-1]]), dims, strict=True)], 1,
    )  # fmt: skip
    return out * np.abs(coef)


_QUERY_PLANS = [([16, 32, 16], [4, 2, 1], [2, 1, 1]), ([1, 7, 8, 16, 32], [1, 2, 4, 3, 6],
                [1, 2, 2, 3, 4]), ([64], [8], [8])]  # fmt: skip


@pytest.mark.parametrize("dims, bits, keep", _QUERY_PLANS)
def test_fastscan_tables_match_reference(dims, bits, keep):
    """Codes, tables, ``lo``, ``step`` and ``w`` equal the NumPy reference exactly; the sums
    (``const``, ``rounding``, ``trunc``) within the bound of two summation orders."""
    from bbqlib._kernels.saq_query import fastscan_tables

    rng = np.random.default_rng(len(dims))
    Q = _queries(rng, dims)
    start = np.cumsum([0, *dims[:-1]]).astype(np.int64)
    nq, S = len(Q), len(dims)
    tables = np.empty((nq, 2 * (sum(dims) // 8) * 32), dtype=np.uint8)
    got = [np.empty((nq, S)) for _ in range(6)]
    arrs = [np.array(x, dtype=np.int64) for x in (dims, bits, keep)]
    fastscan_tables(Q, start, *arrs, tables, *got)
    want = ref.fastscan_queries(Q, dims, bits, keep)
    np.testing.assert_array_equal(tables, want[0])
    for g, w in zip(got[:3], want[1:4], strict=True):  # lo, step, w
        np.testing.assert_array_equal(g, w)
    assert np.all(got[1][[-5, -4]] == 0) and got[1][0, 0] == 0  # constant segments: step 0
    Qq, _, _, _, _ = ref.quantize_query(Q, dims, 4)
    r = np.array(bits) - np.array(keep)
    coef = (2.0**r - 1) / 2 - (2.0 ** np.array(bits) - 1) / 2
    assert np.all(np.abs(got[3] - want[4]) <= _sum_tol(Qq, dims, coef))
    rtol = (2 * max(dims) + 4) * U  # a sum of squares (relative), its root and a division
    np.testing.assert_allclose(got[4], want[5], rtol=rtol, atol=0)
    np.testing.assert_allclose(got[5], want[6], rtol=rtol, atol=0)
    for q in range(nq):  # a row alone gives the numbers it gives in the batch
        one = np.empty((1, tables.shape[1]), dtype=np.uint8)
        alone = [np.empty((1, S)) for _ in range(6)]
        fastscan_tables(Q[q : q + 1], start, *arrs, one, *alone)
        np.testing.assert_array_equal(one[0], tables[q])
        for a1, g in zip(alone, got, strict=True):
            np.testing.assert_array_equal(a1[0], g[q])


@pytest.mark.parametrize("qb", [1, 2, 4, 8, 12])
def test_round_queries_and_constants_match_reference(qb):
    from bbqlib._kernels.saq_query import round_queries, segment_constants

    dims, bits = [1, 7, 8, 16, 32], [1, 2, 4, 3, 6]
    rng = np.random.default_rng(qb)
    Q = _queries(rng, dims)
    start = np.cumsum([0, *dims[:-1]]).astype(np.int64)
    nq, S = len(Q), len(dims)
    out = np.empty_like(Q)
    codes = np.empty(Q.shape, dtype=np.uint16 if qb > 8 else np.uint8)
    lo, step, err = (np.empty((nq, S)) for _ in range(3))
    round_queries(Q, start, np.array(dims), 2**qb - 1, out, codes, lo, step, err)
    w_out, w_err, w_codes, w_lo, w_step = ref.quantize_query(Q, dims, qb)
    np.testing.assert_array_equal(out, w_out)
    np.testing.assert_array_equal(codes, w_codes)
    np.testing.assert_array_equal(lo, w_lo)
    np.testing.assert_array_equal(step, w_step)
    np.testing.assert_allclose(err, w_err, rtol=(2 * max(dims) + 4) * U, atol=0)
    qconst = np.empty((nq, S))
    segment_constants(out, start, np.array(dims), np.array(bits), qconst)
    want = ref.segment_constants(out, dims, bits)
    assert np.all(np.abs(qconst - want) <= _sum_tol(out, dims, (2.0 ** np.array(bits) - 1) / 2))


def test_query_preparation_through_the_quantizer_helpers():
    """``fastscan_queries`` and ``float_rows`` of the search module call the kernels: one
    query equals its row of a batch bit for bit, the tables equal the reference's."""
    from types import SimpleNamespace

    from bbqlib.quantizers.saq.search import fastscan_queries, float_rows

    dims, bits = [16, 32, 16], [4, 2, 1]
    rng = np.random.default_rng(5)
    Q = _queries(rng, dims)
    for query_bits in (None, 4):
        enc = SimpleNamespace(query_bits=query_bits)
        q = SimpleNamespace(plan_=_plan(dims, bits), encoding_=enc)
        keep = np.array([2, 1, 1])
        batch = fastscan_queries(q, Q, keep)
        np.testing.assert_array_equal(batch[0], ref.fastscan_queries(Q, dims, bits, keep)[0])
        frows, fconst, rounding = float_rows(q, Q)
        plain = SimpleNamespace(plan_=q.plan_, encoding_=SimpleNamespace(query_bits=None))
        for a1, b in zip(float_rows(q, Q, unrounded=True), float_rows(plain, Q), strict=True):
            np.testing.assert_array_equal(a1, b)  # the two-pass float query
        Q64 = Q.astype(np.float64) + rng.standard_normal(Q.shape) * 1e-6  # read as float64
        want = ref.fastscan_queries(Q64, dims, bits, keep)
        np.testing.assert_array_equal(fastscan_queries(q, Q64, keep)[0], want[0])
        for i in (0, 3, len(Q) - 1):
            for a1, b in zip(fastscan_queries(q, Q[i : i + 1], keep), batch, strict=True):
                np.testing.assert_array_equal(a1[0], b[i])
            for a1, b in zip(float_rows(q, Q[i : i + 1]), (frows, fconst, rounding), strict=True):
                np.testing.assert_array_equal(a1[0], b[i])


@pytest.mark.parametrize("d, m", [(1, 1), (7, 16), (64, 32), (130, 96)])
def test_rotate_rows_match_reference(d, m):
    """The queries' rotation equals the reference bit for bit (one float32 order), on random
    and adversarial rows (``_adversarial``: huge values overflow to inf as in NumPy), and a
    row alone equals its row of a batch."""
    from bbqlib._kernels.saq_query import rotate_block, rotate_rows

    rng = np.random.default_rng(d + m)
    F = rng.standard_normal((d, m)).astype(np.float32)
    X = np.concatenate([rng.standard_normal((5, d)).astype(np.float32), _adversarial(d, rng)])
    out = np.empty((len(X), m), dtype=np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        rotate_rows(X, F, out)
        want = ref.rotate_rows(X, F)
    np.testing.assert_array_equal(out, want)
    exact = X.astype(np.float64) @ F.astype(np.float64)
    ok = np.abs(X).max(1) < 1e20
    bound = (d + 1) * 2.0**-24 * (np.abs(X[ok]).astype(np.float64) @ np.abs(F)) + 1e-37
    assert np.all(np.abs(out[ok] - exact[ok]) <= bound)  # a float32 sum of d products
    one = np.empty((1, m), dtype=np.float32)
    for q in range(len(X)):
        rotate_block(X[q : q + 1], 0, 1, F, one)
        np.testing.assert_array_equal(one[0], out[q])
