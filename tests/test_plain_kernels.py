"""The score kernels' plain twins: every LLVM intrinsic of ``metricstream.scores._kernels`` has a
plain-Numba twin of the same bits, the kernels compiled with the twins count the same state bit
for bit, and one switch (``METRICSTREAM_PLAIN_KERNELS`` / ``plain_kernels``) picks them."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import numpy as np
import pytest
from numba import njit
from numba.core.dispatcher import Dispatcher
from numba.core.extending import _Intrinsic

from metricstream import ScoreAccumulator
from metricstream._core import flags
from metricstream.scores import _kernels as k


@pytest.fixture
def plain_mode():
    """Restores the switch whatever a test does with it."""
    previous = flags.plain_kernels()
    yield
    flags.plain_kernels(previous)


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


# ---------------------------------------------------------------------------- the switch
def test_switch_returns_the_previous_setting_and_refuses_non_booleans(plain_mode):
    flags.plain_kernels(False)
    assert flags.plain_kernels(True) is False
    assert flags.PLAIN_KERNELS is True
    assert flags.plain_kernels() is True  # None only asks
    assert flags.plain_kernels(False) is True
    assert flags.PLAIN_KERNELS is False
    for bad in (1, "yes", None.__class__):
        with pytest.raises(TypeError, match="`enable` must be True, False or None"):
            flags.plain_kernels(bad)  # type: ignore[arg-type]
    assert flags.PLAIN_KERNELS is False


@pytest.mark.parametrize(
    ("value", "expected"), [("1", True), ("true", True), ("0", False), ("", False)]
)
def test_environment_variable_is_read_at_import(value, expected):
    code = "from metricstream._core import flags; print(flags.PLAIN_KERNELS)"
    env = {**os.environ, "METRICSTREAM_PLAIN_KERNELS": value}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == str(expected)


# ---------------------------------------------------------------------------- the twins
def test_every_intrinsic_names_its_plain_twin_and_the_plain_kernels_use_none():
    intrinsics = {name for name, value in vars(k).items() if isinstance(value, _Intrinsic)}
    # _transpose_tile is reached only through the _copy_columns overload, whose twin is named.
    assert intrinsics - {"_transpose_tile"} <= set(k.PLAIN_TWINS)
    assert "_copy_columns" in k.PLAIN_TWINS
    plain = k.plain()
    for name, value in vars(plain).items():
        if not isinstance(value, Dispatcher) or value.py_func.__module__ != k.__name__:
            continue
        if value in k.PLAIN_TWINS.values():
            continue
        namespace = value.py_func.__globals__
        assert namespace is vars(plain) or namespace == vars(plain), name
        for used in value.py_func.__code__.co_names:
            target = namespace.get(used)
            assert not isinstance(target, _Intrinsic), f"{name} uses the intrinsic {used}"
    assert plain.count_small_rows is None  # reads arrays from addresses: no twin


@njit
def _fma_both(a, b, c, simd, plain):
    for i in range(a.shape[0]):
        simd[i] = k._fma(a[i], b[i], c[i])
        plain[i] = k._fma_plain(a[i], b[i], c[i])


@pytest.mark.slow
def test_fma_twin_rounds_once_as_llvm_fma_does():
    rng = np.random.default_rng(0)
    n = 400_000

    def spread(size):
        return rng.standard_normal(size) * np.exp2(rng.integers(-80, 80, size))

    a, b = spread(n), spread(n)
    c = spread(n)
    # Cancellation: c close to -a*b, down to the last bits.
    near = slice(0, n // 2)
    c[near] = -(a[near] * b[near]) * (
        1 + rng.standard_normal(n // 2) * np.exp2(-rng.integers(20, 60, n // 2))
    )
    # Ties: 26-bit significands multiply exactly into 52 bits, and c adds half an ulp.
    m = n // 8
    a[:m] = rng.integers(2**25, 2**26, m).astype(np.float64)
    b[:m] = rng.integers(2**25, 2**26, m).astype(np.float64)
    c[:m] = np.ldexp(rng.choice([-1.0, 1.0, 0.5, -0.5, 1.5], m), rng.integers(-2, 2, m))
    # The kernels' own arguments: exp's reduction and polynomial, log1p's.
    special = np.array([0.0, -0.0, 1.0, -1.0, 2.0**-1022, 5e-324, 1e300])
    a = np.r_[a, special, special, k._EXP_LN2_HI, -5.0]
    b = np.r_[b, special, special[::-1], -3.0, k._EXP_LN2_LO]
    c = np.r_[c, special[::-1], special, 2.0, -(2.0**-30)]
    simd, plain = np.empty_like(a), np.empty_like(a)
    _fma_both(a, b, c, simd, plain)
    differ = np.flatnonzero(simd.view(np.int64) != plain.view(np.int64))
    assert differ.size == 0, (a[differ[:3]], b[differ[:3]], c[differ[:3]], simd[differ[:3]])
    if hasattr(math, "fma"):  # Python 3.13: the reference itself
        for i in range(0, a.size, 997):
            assert simd[i] == math.fma(a[i], b[i], c[i]) or math.isnan(simd[i])


@njit
def _bits_both(values, simd, plain):
    for i in range(values.shape[0]):
        simd[i] = k._float32_bits(values[i])
        plain[i] = k._float32_bits_plain(values[i])


@njit
def _from_bits_both(bits, simd, plain):
    for i in range(bits.shape[0]):
        simd[i] = k._float64_from_bits(bits[i])
        plain[i] = k._float64_from_bits_plain(bits[i])


@pytest.mark.slow
def test_bit_twins_on_every_kind_of_float():
    rng = np.random.default_rng(1)
    patterns = rng.integers(0, 2**32, 200_000, dtype=np.uint64).astype(np.uint32)
    patterns = np.r_[patterns, 0, 0x80000000, 1, 0x807FFFFF, 0x7F800000, 0xFF800000, 0x7F7FFFFF]
    values = patterns.view(np.float32)
    values = values[~np.isnan(values)]  # (NaN payloads are not kept; NaN is never counted)
    simd, plain = np.empty(values.size, np.uint32), np.empty(values.size, np.uint32)
    _bits_both(values, simd, plain)
    np.testing.assert_array_equal(simd, values.view(np.uint32))
    np.testing.assert_array_equal(plain, simd)
    bits = rng.integers(-(2**63), 2**63 - 1, 100_000, dtype=np.int64)
    bits = np.r_[bits, (np.arange(-1100, 1100) + 1023).clip(1, 2046) << 52, 0, 1, -(2**63)]
    wide = bits.view(np.float64)
    keep = ~np.isnan(wide)
    simd, plain = np.empty(keep.sum()), np.empty(keep.sum())
    _from_bits_both(bits[keep], simd, plain)
    assert same_bits(simd, wide[keep]) and same_bits(plain, simd)


@pytest.mark.slow
def test_exp_and_log1p_twins_give_the_same_bits():
    rng = np.random.default_rng(2)
    x = -np.r_[
        rng.exponential(5.0, 300_000),
        rng.uniform(0, 750, 100_000),
        np.ldexp(1.0, -rng.integers(0, 1074, 20_000)),
        0.0,
        745.1,
        746.0,
        np.inf,
        708.4,
    ]
    x = np.r_[x, -0.0]
    plain = k.plain()
    for simd_kernel, plain_kernel, values in (
        (k.exp_nonpositive, plain.exp_nonpositive, x),
        (k.log1p_unit, plain.log1p_unit, np.r_[np.exp(x[:-3]), 1.0, 0.0, k._SQRT2_MINUS_1]),
    ):
        values = np.ascontiguousarray(values)
        a, b = np.empty_like(values), np.empty_like(values)
        simd_kernel(values, a)
        plain_kernel(values, b)
        assert same_bits(a, b), values[a.view(np.int64) != b.view(np.int64)][:5]


# ---------------------------------------------------------------------------- the kernels
def _probabilities(rng, n, c, dtype):
    p = rng.dirichlet(np.full(c, 0.3), n)
    # corners: exact 0 and 1, ties, one-hot rows, float16 values
    p[: n // 10] = np.eye(c)[rng.integers(0, c, n // 10)]
    p[n // 10 : n // 5] = np.full(c, 1.0 / c)
    p[n // 5 : n // 4] = p[n // 5 : n // 4].astype(np.float16).astype(np.float64)
    return p.astype(dtype)


def _labels(rng, n, c, ignore=None):
    y = rng.integers(0, c, n)
    if ignore is not None:
        y[rng.random(n) < 0.1] = ignore
    return y


def _cases(seed):
    """(name, accumulator options, update arguments) covering every kernel and intrinsic."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(200, 700))
    cases = []
    for c, dtype in ((10, np.float32), (16, np.float64)):  # the row kernel (16 lanes)
        cases.append(
            (f"rows-{c}-{np.dtype(dtype).name}", {"task": "multiclass", "num_classes": c},
             (_labels(rng, n, c), _probabilities(rng, n, c, dtype)), {})
        )  # fmt: skip
    # 70 float32 classes: the transposing copy; histograms past 8 MB: the prefetches.
    cases.append(
        ("block-70", {"task": "multiclass", "num_classes": 70, "ignore_index": -100},
         (_labels(rng, n, 70, -100), _probabilities(rng, n, 70, np.float32)), {})
    )  # fmt: skip
    logits = (rng.standard_normal((n, 12)) * rng.uniform(0.1, 30)).astype(np.float32)
    logits[rng.random((n, 12)) < 0.05] = -np.inf  # masked logits
    logits[:, 0] = np.where(rng.random(n) < 0.5, 0.0, logits[:, 0])
    cases.append(
        ("logits-12", {"task": "multiclass", "num_classes": 12, "logits": True},
         (_labels(rng, n, 12), logits), {})
    )  # fmt: skip
    cases.append(
        ("thresholds-5", {"task": "multiclass", "num_classes": 5,
                          "thresholds": np.linspace(0, 1, 33)},
         (_labels(rng, n, 5), _probabilities(rng, n, 5, np.float32)), {})
    )  # fmt: skip
    cases.append(
        ("weights-6", {"task": "multiclass", "num_classes": 6},
         (_labels(rng, n, 6), _probabilities(rng, n, 6, np.float32)),
         {"weights": rng.integers(0, 4, n)})
    )  # fmt: skip
    binary = rng.standard_normal(n) * rng.uniform(0.1, 20)
    binary[:5] = [0.0, -0.0, -np.inf, 40.0, -40.0]
    cases.append(
        ("binary-logits", {"task": "binary", "logits": True}, (rng.integers(0, 2, n), binary), {})
    )
    cases.append(
        ("binary-probabilities", {"task": "binary"},
         (rng.integers(0, 2, n), rng.random(n).astype(np.float32)), {})
    )  # fmt: skip
    targets = rng.integers(0, 2, (n, 4))
    cases.append(
        ("multilabel-logits", {"task": "multilabel", "num_classes": 4, "logits": True},
         (targets, rng.standard_normal((n, 4)).astype(np.float32) * 5), {})
    )  # fmt: skip
    return cases


def _count(options, args, kwargs, plain):
    flags.plain_kernels(plain)
    acc = ScoreAccumulator(**options)
    y, scores = args
    # the small-batch path, a split, and one batch past a validation chunk (the general path)
    acc.update(y[:7], scores[:7], **{key: v[:7] for key, v in kwargs.items()})
    acc.update(y[7:], scores[7:], **{key: v[7:] for key, v in kwargs.items()})
    reps = -(-5000 // len(y))
    big = {key: np.tile(v, reps) for key, v in kwargs.items()}
    tiled = np.tile(scores, (reps,) + (1,) * (scores.ndim - 1))
    acc.update(np.tile(y, (reps,) + (1,) * (y.ndim - 1)), tiled, **big)
    return acc


@pytest.mark.slow
@pytest.mark.parametrize("seed", [3, 4])
def test_plain_kernels_count_the_same_bits_as_the_simd_kernels(plain_mode, seed):
    for name, options, args, kwargs in _cases(seed):
        simd = _count(options, args, kwargs, False)
        plain = _count(options, args, kwargs, True)
        left, right = simd.state_arrays(), plain.state_arrays()
        for array in left:
            assert same_bits(left[array], right[array]), f"{name}: {array} differs"
        flags.plain_kernels(False)
        assert simd.auroc() == plain.auroc() or np.isnan(simd.auroc())
        assert simd.log_loss() == plain.log_loss()


def test_plain_switch_applies_to_an_existing_accumulator_and_bad_input(plain_mode):
    rng = np.random.default_rng(5)
    y, p = _labels(rng, 300, 10), _probabilities(rng, 300, 10, np.float32)
    flags.plain_kernels(False)
    simd = ScoreAccumulator("multiclass", 10).update(y, p)
    mixed = ScoreAccumulator("multiclass", 10).update(y[:100], p[:100])
    flags.plain_kernels(True)
    mixed.update(y[100:], p[100:])  # the same accumulator, now through the twins
    left, right = simd.state_arrays(), mixed.state_arrays()
    for array in ("curves", "inexact", "ranks", "calibration"):
        assert same_bits(left[array], right[array]), array
    np.testing.assert_allclose(left["losses"], right["losses"], rtol=1e-14)
    before = mixed.state_arrays()
    bad = p.copy()
    bad[17, 3] = 1.5
    with pytest.raises(ValueError, match=r"holds 1\.5 at position \(17, 3\)"):
        mixed.update(y, bad)
    after = mixed.state_arrays()
    assert all(same_bits(before[a], after[a]) for a in before)


def test_plain_row_kernel_writes_the_same_undo_log_in_a_group(plain_mode):
    """Groups count a score member through the row kernel with an undo log; a later member's
    failure undoes it exactly, in both modes."""
    from metricstream.base import AccumulatorGroup

    rng = np.random.default_rng(6)
    y, p = _labels(rng, 200, 8), _probabilities(rng, 200, 8, np.float32)
    y[5], p[5] = -1, np.nan  # ignored by the first member, refused by the second
    for plain in (False, True):
        flags.plain_kernels(plain)
        scores = ScoreAccumulator("multiclass", 8, ignore_index=-1).update(y[6:], p[6:])
        group = AccumulatorGroup({"scores": scores, "strict": ScoreAccumulator("multiclass", 8)})
        before = scores.state_arrays()
        with pytest.raises(ValueError, match="label -1 at position 5"):
            group.update(y, p)
        after = scores.state_arrays()
        assert all(same_bits(before[a], after[a]) for a in before), plain
