"""The counting kernels and their dispatch: exact counts, first-error positions, atomic failure.

Both execution paths are checked against ``np.bincount``/``np.argmax``: the serial in-place path
(with its ``sign=-1`` rollback) and the chunked multi-thread path (private matrices, forced here
with tiny chunk sizes so that every test batch is split many ways).
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import metricstream
from metricstream import ConfusionAccumulator
from metricstream.confusion import _dispatch, _kernels

LABEL_DTYPES = [
    np.int8,
    np.uint8,
    np.int16,
    np.uint16,
    np.int32,
    np.uint32,
    np.int64,
    np.uint64,
    np.float32,
    np.float64,
]


@pytest.fixture(params=["serial", "threads"])
def path(request, monkeypatch):
    """Run a test once on the serial path and once split into many chunks across threads."""
    if request.param == "threads":
        monkeypatch.setattr(_dispatch, "PARALLEL_MIN_LABELS", 1)
        monkeypatch.setattr(_dispatch, "PARALLEL_MIN_LABELS_PER_CELL", 0)
        monkeypatch.setattr(_dispatch, "CHUNK_LABELS", 97)
        previous = metricstream.get_num_threads()
        metricstream.set_num_threads(3)
        yield request.param
        metricstream.set_num_threads(previous)
    else:
        monkeypatch.setattr(_dispatch, "PARALLEL_MIN_LABELS", 1 << 62)
        yield request.param


def expected_matrix(y_true, y_pred, num_classes, weights=None, ignore_index=None):
    y_true = np.asarray(y_true).astype(np.int64)
    y_pred = np.asarray(y_pred).astype(np.int64)
    keep = np.ones(y_true.shape, bool) if ignore_index is None else y_true != ignore_index
    flat = num_classes * y_true[keep] + y_pred[keep]
    w = None if weights is None else np.asarray(weights)[keep]
    return np.bincount(flat, weights=w, minlength=num_classes**2).reshape(num_classes, num_classes)


# Each label dtype is its own kernel specialisation on each path (2-3 s of compilation on a cold
# cache): the default run keeps one signed, one unsigned and one float type on the serial path
# and int64 on the threaded one (the types the rest of the suite compiles anyway). CI reads
# every dtype on the serial path; the threaded path, the same reading code counting into
# private int32 matrices, gets one type of each kind and width class.
DEFAULT_LABEL_DTYPES = {"serial": (np.int64, np.uint8, np.float32), "threads": (np.int64,)}
THREADED_LABEL_DTYPES = (np.int64, np.uint8, np.int16, np.uint64, np.float32)


def dtype_and_path(dtypes):
    """``(dtype, path)`` pairs (``path`` fixture parametrized indirectly), slow off the defaults."""
    return [
        pytest.param(
            d,
            p,
            id=f"{p}-{np.dtype(d).name}",
            marks=[] if d in DEFAULT_LABEL_DTYPES[p] else [pytest.mark.slow],
        )
        for p in ("serial", "threads")
        for d in dtypes
        if p == "serial" or d in THREADED_LABEL_DTYPES
    ]


@pytest.mark.parametrize(("dtype", "path"), dtype_and_path(LABEL_DTYPES), indirect=["path"])
@pytest.mark.parametrize("size", [0, 1, 255, 256, 257, 1000, 5000])
def test_label_counts_equal_bincount(dtype, size, path):
    rng = np.random.default_rng(size)
    num_classes = 7
    y_true = rng.integers(0, num_classes, size).astype(dtype)
    y_pred = rng.integers(0, num_classes, size).astype(dtype)
    acc = ConfusionAccumulator(num_classes).update(y_true, y_pred)
    np.testing.assert_array_equal(acc.matrix, expected_matrix(y_true, y_pred, num_classes))


@pytest.mark.parametrize("dtype", [np.int64, np.uint8], ids=["int64", "uint8"])
def test_sixteen_bit_sub_histogram_is_flushed_before_it_wraps(dtype):
    # 17 to 100 classes count long ranges into one copy of 16-bit counters, added to the matrix
    # before a counter could pass 65535: one cell hit 200,000 times, and random labels with
    # ignored pairs and a late bad label (the counted prefix is undone).
    num_classes = 40
    size = 200_000
    same = np.zeros(size, dtype=dtype)
    out = np.zeros((num_classes, num_classes), dtype=np.int64)
    flags = _kernels.COMMIT
    assert _kernels.count_labels(same, same, None, out, 0, size, 1, flags, 0, np.inf)[0] == 0
    assert out[0, 0] == size and out.sum() == size
    rng = np.random.default_rng(12)
    y_true = rng.integers(0, num_classes, size).astype(dtype)
    y_true[rng.random(size) < 0.1] = 39
    y_pred = rng.integers(0, num_classes, size).astype(dtype)
    acc = ConfusionAccumulator(num_classes, ignore_index=39).update(y_true, y_pred)
    expected = expected_matrix(y_true, y_pred, num_classes, ignore_index=39)
    np.testing.assert_array_equal(acc.matrix, expected)
    y_pred[190_000] = 77
    with pytest.raises(ValueError, match="position 190000"):
        acc.update(y_true, y_pred)
    np.testing.assert_array_equal(acc.matrix, expected)


@pytest.mark.parametrize("ignore_index", [-1, 0, 3, 255], ids=lambda i: f"ignore={i}")
def test_ignore_index_skips_true_labels_only(ignore_index, path):
    rng = np.random.default_rng(1)
    num_classes = 5
    y_true = rng.integers(0, num_classes, 3000)
    y_true[rng.random(3000) < 0.2] = ignore_index
    y_pred = rng.integers(0, num_classes, 3000)
    acc = ConfusionAccumulator(num_classes, ignore_index=ignore_index).update(y_true, y_pred)
    np.testing.assert_array_equal(
        acc.matrix, expected_matrix(y_true, y_pred, num_classes, ignore_index=ignore_index)
    )


@pytest.mark.parametrize("weighted", [False, True], ids=["int64-matrix", "float64-matrix"])
def test_weights_equal_bincount(weighted, path):
    rng = np.random.default_rng(2)
    y_true = rng.integers(0, 6, 2000)
    y_pred = rng.integers(0, 6, 2000)
    weights = rng.random(2000) if weighted else rng.integers(0, 5, 2000)
    acc = ConfusionAccumulator(6, weighted=weighted).update(y_true, y_pred, weights)
    np.testing.assert_allclose(acc.matrix, expected_matrix(y_true, y_pred, 6, weights), rtol=1e-12)


@pytest.mark.parametrize("weighted", [False, True], ids=["int64-matrix", "float64-matrix"])
@pytest.mark.parametrize("where", ["first", "block-edge", "middle", "last"])
@pytest.mark.parametrize("what", ["y_true", "y_pred", "negative", "weight"])
def test_failed_update_reports_first_bad_element_and_changes_nothing(weighted, where, what, path):
    rng = np.random.default_rng(3)
    size = 3000
    position = {"first": 0, "block-edge": _kernels.BLOCK, "middle": 1717, "last": size - 1}[where]
    y_true = rng.integers(0, 4, size)
    y_pred = rng.integers(0, 4, size)
    weights = rng.integers(0, 3, size).astype(np.float64)
    if what == "y_true":
        y_true[position] = 4
        y_true[position + 1 :][::50] = 9  # later bad elements must not be the ones reported
    elif what == "y_pred":
        y_pred[position] = 4
        y_pred[position + 1 :][::50] = 9
    elif what == "negative":
        y_true[position] = -2
    else:
        weights[position] = np.nan
    acc = ConfusionAccumulator(4, weighted=weighted)
    acc.update(rng.integers(0, 4, 500), rng.integers(0, 4, 500))
    before = acc.matrix.copy()
    name = "weights" if what == "weight" else ("y_pred" if what == "y_pred" else "y_true")
    with pytest.raises(ValueError, match=rf"`{name}` holds .* at position {position}\b"):
        acc.update(y_true, y_pred, weights)
    np.testing.assert_array_equal(acc.matrix, before)


def test_fractional_weight_into_int_matrix_is_rejected(path):
    weights = np.ones(1000)
    weights[600] = 0.5
    acc = ConfusionAccumulator(3)
    with pytest.raises(ValueError, match="fractional value 0.5 at position 600"):
        acc.update(np.zeros(1000, int), np.zeros(1000, int), weights)
    assert acc.num_samples == 0


# The threaded runs of the next two tests compile float64 and uint64 labels into int32 private
# matrices for these tests alone: CI only.
SERIAL_BY_DEFAULT = ["serial", pytest.param("threads", marks=pytest.mark.slow)]


@pytest.mark.parametrize("path", SERIAL_BY_DEFAULT, indirect=True)
@pytest.mark.parametrize("bad", [np.nan, 1.5, -1.0, 3.0, np.inf], ids=str)
def test_float_labels_must_be_whole_numbers_in_range(bad, path):
    y_true = np.zeros(700)
    y_true[400] = bad
    acc = ConfusionAccumulator(3)
    with pytest.raises(ValueError, match="position 400"):
        acc.update(y_true, np.zeros(700))
    assert acc.num_samples == 0


# uint64 labels: a kernel specialisation of their own (CI only)
@pytest.mark.parametrize(
    "path", [pytest.param(p, marks=pytest.mark.slow) for p in ("serial", "threads")], indirect=True
)
def test_uint64_labels_above_int64_range_are_rejected(path):
    y_true = np.zeros(600, dtype=np.uint64)
    y_true[300] = np.uint64(2**63 + 1)
    with pytest.raises(ValueError, match="position 300"):
        ConfusionAccumulator(3).update(y_true, np.zeros(600, dtype=np.uint64))


# ---------------------------------------------------------------------------- scores
def special_scores(rng, size, num_classes, dtype):
    scores = rng.normal(size=(size, num_classes)).astype(dtype)
    scores[::7] = 0.0
    scores[::7, -1] = -0.0  # signed zeros tie with +0.0: first wins, as np.argmax
    scores[1::7, :] = -np.inf
    scores[2::7, min(1, num_classes - 1)] = np.inf
    scores[2::7, -1] = np.inf
    scores[3::7] = np.round(scores[3::7])  # many ties
    scores[4::7, 0] = -0.0
    scores[4::7, 1:] = -1.0
    scores[5::7] = np.finfo(dtype).max
    scores[5::7, 0] = -np.finfo(dtype).max
    return scores


# Default: float32 on both paths, float64 and int64 scores on the serial path (one kernel
# specialisation per dtype and path); CI runs every pair.
# Integer scores (a loop of their own) in CI only: one kernel specialisation each, cold.
ROW_SCORE_DEFAULTS = {(np.float32, "serial"), (np.float32, "threads"), (np.float64, "serial")}


@pytest.mark.parametrize(
    ("dtype", "path"),
    [
        pytest.param(
            d,
            p,
            id=f"{p}-{np.dtype(d).name}",
            marks=[] if (d, p) in ROW_SCORE_DEFAULTS else [pytest.mark.slow],
        )
        for p in ("serial", "threads")
        for d in (np.float32, np.float64, np.int32, np.int64)
    ],
    indirect=["path"],
)
# 16 and 33: one whole vector of scores per row, and two with a one-score tail.
@pytest.mark.parametrize("num_classes", [1, 2, 3, 16, 17, 33, 100])
def test_row_scores_argmax_equals_numpy(dtype, num_classes, path):
    rng = np.random.default_rng(num_classes)
    size = 1500
    if np.dtype(dtype).kind == "f":
        scores = special_scores(rng, size, num_classes, dtype)
    else:
        scores = rng.integers(-3, 3, (size, num_classes)).astype(dtype)
    y_true = rng.integers(0, num_classes, size)
    acc = ConfusionAccumulator(num_classes).update(y_true, scores)
    np.testing.assert_array_equal(
        acc.matrix, expected_matrix(y_true, np.argmax(scores, axis=1), num_classes)
    )


def test_channels_first_scores_argmax_equals_numpy(path):
    rng = np.random.default_rng(5)
    scores = special_scores(rng, 2 * 31 * 29, 4, np.float32).reshape(2, 31, 29, 4)
    scores = np.moveaxis(scores, -1, 1).copy()  # (B, C, H, W)
    y_true = rng.integers(0, 4, (2, 31, 29))
    acc = ConfusionAccumulator(4).update(y_true, scores)
    np.testing.assert_array_equal(
        acc.matrix, expected_matrix(y_true.ravel(), np.argmax(scores, 1).ravel(), 4)
    )


def test_non_contiguous_row_scores(path):
    rng = np.random.default_rng(6)
    scores = rng.normal(size=(9, 800)).astype(np.float32).T  # (800, 9), Fortran order
    y_true = rng.integers(0, 9, 800)
    acc = ConfusionAccumulator(9).update(y_true, scores)
    np.testing.assert_array_equal(acc.matrix, expected_matrix(y_true, np.argmax(scores, axis=1), 9))


@pytest.mark.parametrize(
    ("dtype", "path"),
    [
        pytest.param(
            d,
            p,
            id=f"{p}-{np.dtype(d).name}",
            marks=[pytest.mark.slow] if (d, p) == (np.float64, "threads") else [],
        )
        for p in ("serial", "threads")
        for d in (np.float32, np.float64)
    ],
    indirect=["path"],
)
@pytest.mark.parametrize("row", [0, 255, 256, 999])
@pytest.mark.parametrize("num_classes", [5, 40], ids=lambda k: f"C={k}")
def test_nan_score_is_reported_and_changes_nothing(dtype, row, num_classes, path):
    rng = np.random.default_rng(7)
    scores = rng.normal(size=(1000, num_classes)).astype(dtype)
    column = num_classes - 2  # C=40: in the third vector of the row
    scores[row, column] = np.nan
    scores[row, -1] = np.nan
    scores[row + 1 :, 2] = np.nan
    acc = ConfusionAccumulator(num_classes)
    acc.update([0, 1], [1, 1])
    before = acc.matrix.copy()
    with pytest.raises(ValueError, match=rf"NaN at position \({row}, {column}\)"):
        acc.update(rng.integers(0, num_classes, 1000), scores)
    np.testing.assert_array_equal(acc.matrix, before)


def test_bad_label_with_scores_is_reported(path):
    scores = np.zeros((900, 3), dtype=np.float32)
    y_true = np.zeros(900, dtype=np.int64)
    y_true[700] = 3
    acc = ConfusionAccumulator(3)
    with pytest.raises(ValueError, match="position 700"):
        acc.update(y_true, scores)
    assert acc.num_samples == 0


# ---------------------------------------------------------------------------- kernel contract
def test_kernel_contract_sign_and_dry_run():
    y_true = np.array([0, 1, 2, 1, 5, 0], dtype=np.int64)
    y_pred = np.array([0, 1, 1, 1, 0, 0], dtype=np.int64)
    out = np.zeros((3, 3), dtype=np.int64)
    flags = _kernels.COMMIT
    status, position, counted = _kernels.count_labels(
        y_true, y_pred, None, out, 0, 6, 1, flags, 0, np.inf
    )
    assert (status, position) == (_kernels.BAD_TRUE, 4)
    assert counted <= position
    # Everything below ``counted`` was counted, nothing above: undoing that prefix restores zero.
    _kernels.count_labels(y_true, y_pred, None, out, 0, counted, -1, flags, 0, np.inf)
    assert not out.any()
    # A dry run validates without counting.
    assert _kernels.count_labels(y_true, y_pred, None, out, 0, 4, 1, 0, 0, np.inf)[0] == _kernels.OK
    assert not out.any()
    assert _kernels.count_labels(y_true, y_pred, None, out, 0, 4, 1, flags, 0, np.inf) == (0, 4, 4)
    assert out.sum() == 4


@pytest.mark.parametrize("what", ["label", "nan"])
@pytest.mark.parametrize("num_classes", [7, 40], ids=lambda k: f"C={k}")
def test_rows_kernel_counts_whole_tiles_before_a_late_error(what, num_classes):
    # Rows are counted a tile at a time (``COUNT_TILE`` rows with more than
    # ``TILE_MAX_CLASSES`` classes, ``ROW_TILE`` with fewer): an error after the first tile
    # leaves exactly the rows below ``counted`` counted, and undoing that prefix restores zero.
    rng = np.random.default_rng(11)
    k = num_classes
    size = 2 * _kernels.COUNT_TILE + 300
    bad = _kernels.COUNT_TILE + 500
    scores = rng.normal(size=(size, k)).astype(np.float32)
    y_true = rng.integers(0, k, size)
    if what == "label":
        y_true[bad] = k
    else:
        scores[bad, 3] = np.nan
    out = np.zeros((k, k), dtype=np.int64)
    flags = _kernels.COMMIT
    status, position, counted = _kernels.count_argmax_rows(
        y_true, scores, None, out, 0, size, 1, flags, 0, np.inf
    )
    if what == "label":
        assert (status, position) == (_kernels.BAD_TRUE, bad)
    else:
        assert (status, position) == (_kernels.BAD_SCORE, bad * k + 3)
    assert _kernels.COUNT_TILE <= counted <= bad
    expected = expected_matrix(y_true[:counted], np.argmax(scores[:counted], axis=1), k)
    np.testing.assert_array_equal(out, expected)
    _kernels.count_argmax_rows(y_true, scores, None, out, 0, counted, -1, flags, 0, np.inf)
    assert not out.any()
    # Without the bad row, the whole call counts every row, across tiles.
    status, position, counted = _kernels.count_argmax_rows(
        y_true, scores, None, out, 0, bad, 1, flags, 0, np.inf
    )
    assert (status, position, counted) == (_kernels.OK, bad, bad)
    np.testing.assert_array_equal(
        out, expected_matrix(y_true[:bad], np.argmax(scores[:bad], axis=1), k)
    )


@settings(max_examples=60, deadline=None)
@given(
    size=st.integers(0, 1300),
    bad=st.lists(st.integers(0, 1299), max_size=3),
    num_classes=st.integers(1, 12),
    chunk=st.integers(1, 700),
    seed=st.integers(0, 2**32 - 1),
)
def test_threaded_and_serial_paths_agree(size, bad, num_classes, chunk, seed):
    rng = np.random.default_rng(seed)
    y_true = rng.integers(0, num_classes, size)
    y_pred = rng.integers(0, num_classes, size)
    bad = sorted(b for b in bad if b < size)
    for b in bad:
        y_pred[b] = num_classes
    results = []
    saved = (
        _dispatch.PARALLEL_MIN_LABELS,
        _dispatch.PARALLEL_MIN_LABELS_PER_CELL,
        _dispatch.CHUNK_LABELS,
    )
    try:
        for threaded in (False, True):
            _dispatch.PARALLEL_MIN_LABELS = 1 if threaded else 1 << 62
            _dispatch.PARALLEL_MIN_LABELS_PER_CELL = 0
            _dispatch.CHUNK_LABELS = chunk
            acc = ConfusionAccumulator(num_classes).update([0], [0])
            try:
                acc.update(y_true, y_pred)
                error = None
            except ValueError as caught:
                error = str(caught)
            results.append((acc.matrix.copy(), error))
    finally:
        (
            _dispatch.PARALLEL_MIN_LABELS,
            _dispatch.PARALLEL_MIN_LABELS_PER_CELL,
            _dispatch.CHUNK_LABELS,
        ) = saved
    (serial, serial_error), (threaded, threaded_error) = results
    np.testing.assert_array_equal(serial, threaded)
    assert serial_error == threaded_error
    if bad:
        assert f"position {bad[0]}," in serial_error
        assert serial.sum() == 1
    else:
        np.testing.assert_array_equal(
            serial
            - np.eye(1, num_classes * num_classes, dtype=np.int64).reshape(
                num_classes, num_classes
            ),
            expected_matrix(y_true, y_pred, num_classes),
        )


def test_import_compiles_nothing_and_imports_no_optional_library():
    import subprocess
    import sys

    code = (
        "import sys, metricstream\n"
        "from metricstream.confusion import _kernels\n"
        "kernels = [getattr(_kernels, n) for n in dir(_kernels)\n"
        "           if hasattr(getattr(_kernels, n), 'signatures')]\n"
        "assert kernels and not any(k.signatures for k in kernels), 'compiled at import'\n"
        "heavy = {'torch', 'torchmetrics', 'boost_histogram', 'sklearn', 'pandas'}\n"
        "assert not heavy & set(sys.modules), heavy & set(sys.modules)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize(
    "dtype",
    [np.float32, pytest.param(np.float64, marks=pytest.mark.slow)],
    ids=lambda d: np.dtype(d).name,
)
@pytest.mark.parametrize("where", [(0, 0, 0, 0), (1, 2, 5, 7), (1, 3, 8, 10)], ids=str)
def test_nan_in_channels_first_scores_is_reported_and_changes_nothing(where, dtype, path):
    rng = np.random.default_rng(8)
    scores = rng.normal(size=(2, 4, 9, 11)).astype(dtype)
    scores[where] = np.nan
    acc = ConfusionAccumulator(4)
    acc.update([0, 1], [1, 1])
    before = acc.matrix.copy()
    with pytest.raises(ValueError, match=rf"NaN at position {re.escape(str(where))}"):
        acc.update(rng.integers(0, 4, (2, 9, 11)), scores)
    np.testing.assert_array_equal(acc.matrix, before)


@pytest.fixture
def public_tmp():
    """A temporary directory an unprivileged user can reach (pytest's tmp_path is 0700)."""
    import os
    import shutil
    import tempfile
    from pathlib import Path

    path = Path(tempfile.mkdtemp(prefix="metricstream-ro-"))
    os.chmod(path, 0o755)
    yield path
    for sub in [path, *path.rglob("*")]:
        if sub.is_dir():
            os.chmod(sub, 0o755)
    shutil.rmtree(path, ignore_errors=True)


def _run_from_read_only_copy(root, home):
    """Import metricstream from a read-only copy as an unprivileged user; count one batch."""
    import os
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to run as an unprivileged user")
    package = Path(metricstream.__file__).parent
    site = root / "site"
    shutil.copytree(package, site / "metricstream", ignore=shutil.ignore_patterns("__pycache__"))
    for path in [site, *site.rglob("*")]:
        os.chmod(path, 0o555 if path.is_dir() else 0o444)
    env = {key: value for key, value in os.environ.items() if not key.startswith("NUMBA_")}
    env.update(HOME=str(home), XDG_CACHE_HOME=str(home / ".cache"), PYTHONPATH=str(site))
    # Compile at the call (not in the background, which a short process may exit before).
    env["METRICSTREAM_BACKGROUND_COMPILE"] = "0"
    code = (
        "import numpy as np, metricstream\n"
        "acc = metricstream.ConfusionAccumulator(3)\n"
        "acc.update(np.array([0, 2]), np.array([1, 2]))\n"
        f"assert acc.matrix.sum() == 2 and metricstream.__file__.startswith({str(site)!r})\n"
    )
    subprocess.run(
        [
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--",
            sys.executable,
            "-c",
            code,
        ],
        env=env,
        cwd=root,
        check=True,
    )
    return site


@pytest.mark.slow
def test_read_only_package_caches_kernels_in_the_user_cache_dir(public_tmp):
    import os

    home = public_tmp / "home"
    home.mkdir()
    os.chown(home, 65534, 65534)
    site = _run_from_read_only_copy(public_tmp, home)
    assert list(home.rglob("*.nbi")), "no kernel cached under the user's home"
    assert not list(site.rglob("*.nbi")), "kernel cached inside the read-only package"


@pytest.mark.slow
def test_import_works_with_no_writable_cache_dir(public_tmp):
    # Neither the package nor HOME is writable: kernels compile in memory instead of failing.
    _run_from_read_only_copy(public_tmp, public_tmp / "missing-home")
