"""The accumulator protocol (metricstream.base): what every accumulator and every group inherits.

Oracles: one accumulator fed everything (for splits, merges and groups), the sentences of the
base class docstring (tested literally), and scikit-learn for the counts.
"""

from __future__ import annotations

import inspect
import os
import warnings

import numpy as np
import pytest

import metricstream
from metricstream import (
    Accumulator,
    AccumulatorGroup,
    ConfusionAccumulator,
    UndefinedMetricWarning,
    metrics,
)
from metricstream.accumulator import _METRIC_METHODS


# ---------------------------------------------------------------------------- methods = functions
@pytest.mark.parametrize("name", _METRIC_METHODS)
def test_method_signature_and_doc_match_the_function(name):
    function = getattr(metrics, name)
    method = getattr(ConfusionAccumulator, name)
    function_parameters = list(inspect.signature(function).parameters.values())[1:]
    method_parameters = list(inspect.signature(method).parameters.values())[1:]
    assert method_parameters == function_parameters
    assert inspect.getdoc(function).split("\n")[0] in inspect.getdoc(method)


def test_undefined_metric_warning_points_at_the_callers_line():
    acc = ConfusionAccumulator(3).update([0, 1], [0, 1])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        acc.precision(average="macro")
        metrics.recall(acc.matrix, average="macro")
    assert [w.category for w in caught] == [UndefinedMetricWarning] * 2
    assert {os.path.basename(w.filename) for w in caught} == {"test_framework.py"}


def test_class_names_work_as_pos_label_and_labels():
    acc = ConfusionAccumulator(2, class_names=["ham", "spam"]).update([0, 1, 1, 0], [0, 1, 0, 0])
    assert (
        acc.precision(average="binary", pos_label="spam")
        == acc.precision(average="binary", pos_label=1)
        == 1.0
    )
    assert acc.recall(average="binary", pos_label="ham") == 1.0
    assert acc.f1(labels=["spam"]).tolist() == acc.f1(labels=[1]).tolist()
    with pytest.raises(ValueError, match=r"unknown class name 'eggs'"):
        acc.precision(average="binary", pos_label="eggs")


def test_matthews_default_is_silent_zero_as_scikit_learn():
    acc = ConfusionAccumulator(2).update([0, 0], [0, 0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert acc.matthews_corrcoef() == 0.0


# ---------------------------------------------------------------------------- views are snapshots
def test_class_counts_are_read_only_snapshots():
    acc = ConfusionAccumulator(3).update([0, 1, 2], [0, 1, 1])
    counts = acc.class_counts()
    for array in (
        counts.matrix,
        counts.true_positives,
        counts.actual_positives,
        counts.predicted_positives,
    ):
        with pytest.raises(ValueError):
            array[0] = 7
    acc.update([2], [2])
    assert counts.true_positives.tolist() == [1, 1, 0]  # the kept snapshot did not go stale
    assert acc.class_counts().true_positives.tolist() == [1, 1, 1]


# ---------------------------------------------------------------------------- configuration
def test_class_axis_is_configuration():
    a, b = ConfusionAccumulator(3), ConfusionAccumulator(3, class_axis=-1)
    assert a != b
    assert "class_axis=-1" in repr(b)
    with pytest.raises(ValueError, match=r"different `class_axis`: 1 here, -1 in the other"):
        a.merge(b)


@pytest.mark.parametrize("value", [2**63, -(2**63) - 1, 2**64])
def test_ignore_index_beyond_int64_is_refused_at_construction(value):
    with pytest.raises(ValueError, match=r"`ignore_index` must fit in int64"):
        ConfusionAccumulator(3, ignore_index=value)


def test_huge_num_classes_is_a_value_error_naming_the_bytes():
    with pytest.raises(ValueError, match=r"needs 8,000,000,000,000 bytes of state"):
        ConfusionAccumulator(10**6)


def test_threshold_needs_two_classes():
    with pytest.raises(ValueError, match=r"`threshold` is for binary tasks"):
        ConfusionAccumulator(3, threshold=0.5)
    with pytest.raises(ValueError, match=r"`threshold` must be finite"):
        ConfusionAccumulator(2, threshold=float("nan"))
    with pytest.warns(UserWarning, match="logits"):  # 0.0 is a logit's threshold: a warning
        assert ConfusionAccumulator(2, threshold=0.0).threshold == 0.0


# ---------------------------------------------------------------------------- merging never wraps
def test_merge_refuses_int64_overflow_and_leaves_state():
    big = ConfusionAccumulator.from_matrix(np.array([[2**62, 0], [0, 1]]))
    before = big.state_arrays()
    with pytest.raises(ValueError, match=r"overflow the int64 count .* at \(0, 0\)"):
        big.merge(big.copy().merge(big.copy()))
    np.testing.assert_array_equal(big.state_arrays()["matrix"], before["matrix"])


@pytest.mark.parametrize(
    "bad",
    [
        np.array([[2**64 - 1, 0], [0, 0]], dtype=np.uint64),
        np.array([[1e300, 0.0], [0.0, 0.0]]),
        np.array([[2.0**63, 0.0], [0.0, 0.0]]),
    ],
    ids=["uint64-max", "1e300", "2-63"],
)
def test_from_matrix_refuses_counts_beyond_int64(bad):
    with pytest.raises(ValueError, match=r"`matrix`: holds .* beyond the int64 counts"):
        ConfusionAccumulator.from_matrix(bad, weighted=False)


# ---------------------------------------------------------------------------- groups
def _group() -> AccumulatorGroup:
    return AccumulatorGroup(
        counts=ConfusionAccumulator(3),
        weighted=ConfusionAccumulator(3, weighted=True),
        ignoring=ConfusionAccumulator(3, ignore_index=0),
    )


def _stream(seed: int = 0):
    rng = np.random.default_rng(seed)
    for _ in range(5):
        n = int(rng.integers(1, 50))
        yield rng.integers(0, 3, n), rng.integers(0, 3, n), rng.integers(0, 4, n)


def test_group_merge_mismatch_names_member_and_field():
    a = AccumulatorGroup(x=ConfusionAccumulator(3))
    b = AccumulatorGroup(x=ConfusionAccumulator(4))
    with pytest.raises(ValueError, match=r"member 'x': .*`num_classes`: 3 here, 4"):
        a.merge(b)
    with pytest.raises(ValueError, match=r"different members"):
        a.merge(AccumulatorGroup(y=ConfusionAccumulator(3)))


def test_group_converts_torch_inputs_once():
    torch = pytest.importorskip("torch")
    # no weighted member: float32 logits into a float64 matrix would compile a kernel for this alone
    group = AccumulatorGroup(
        counts=ConfusionAccumulator(3), ignoring=ConfusionAccumulator(3, ignore_index=0)
    )
    y_true = torch.tensor([0, 1, 2, 2])
    logits = torch.randn(4, 3, requires_grad=True)
    group.update(y_true, logits)
    expected = ConfusionAccumulator(3).update(y_true.numpy(), logits.detach().numpy())
    assert group["counts"] == expected


# ---------------------------------------------------------------------------- new accumulators
class _Histogram(Accumulator):
    """A minimal accumulator: counts of integer values in [0, size). Shows how small one is."""

    def __init__(self, size: int) -> None:
        self._size = int(size)
        super().__init__({"counts": ((self._size,), np.int64)})

    def config(self):
        return {"size": self._size}

    def _prepare(self, values, weights=None, extra=None):
        values = np.asarray(values, dtype=np.int64)
        if values.size and (values.min() < 0 or values.max() >= self._size):
            raise ValueError(f"`values` must lie in [0, {self._size}).")
        return values

    def _count(self, arrays, batch):
        np.add.at(arrays["counts"], batch, 1)

    def total(self) -> int:
        return self._view(lambda state: int(state["counts"].sum()))


def test_import_metricstream_pulls_in_no_optional_library():
    import subprocess
    import sys

    code = (
        "import sys, metricstream; bad = [m for m in ('torch', 'dask', 'pyarrow', "
        "'matplotlib', 'mpi4py', 'sklearn') if m in sys.modules]; print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def _every_module() -> list[str]:
    import pkgutil

    return sorted(
        info.name.removeprefix("metricstream.")
        for info in pkgutil.walk_packages(metricstream.__path__, "metricstream.")
    )


# Imported first in a fresh interpreter in the default run; every other module in the slow run.
_FIRST_IMPORTS = {"base", "accumulator", "scores", "multilabel", "bootstrap", "cli", "dask"}


@pytest.mark.parametrize(
    "module",
    [
        module if module in _FIRST_IMPORTS else pytest.param(module, marks=pytest.mark.slow)
        for module in _every_module()
    ],
)
def test_every_module_imports_alone(module):
    """No import cycle: each module imports first in a fresh interpreter (an integration whose
    host library is not installed may say so, and only so)."""
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-c", f"import metricstream.{module}"], capture_output=True, text=True
    )
    if result.returncode != 0:
        last = result.stderr.strip().splitlines()[-1]
        assert last.startswith(("ImportError", "ModuleNotFoundError")), result.stderr
        assert "metricstream" not in last.split(":", 1)[1] or "pip install" in last, last


def test_merge_refuses_a_total_beyond_int64_even_when_no_cell_wraps():
    half = ConfusionAccumulator.from_matrix(np.array([[2**62, 0], [0, 0]]))
    other = ConfusionAccumulator.from_matrix(np.array([[0, 0], [0, 2**62]]))
    with pytest.raises(ValueError, match=r"total of .* to 2\*\*63 or more"):
        half.merge(other)
    assert half.matrix[1, 1] == 0


def test_update_after_merge_near_the_limit_still_refuses_to_wrap():
    """The O(1) overflow bound of updates is recomputed after merges, resets and restores."""
    acc = ConfusionAccumulator(2).update([0], [0])
    near = 2**63 - 2**21
    acc.merge(ConfusionAccumulator.from_matrix(np.array([[0, 0], [0, near]])))
    ones = np.ones(2**21, dtype=np.int64)
    with pytest.raises(ValueError, match=r"overflow|2\*\*63|int64"):
        acc.update(ones, ones)
    assert acc.matrix[1, 1] == near
    restored = ConfusionAccumulator.from_bytes(acc.to_bytes())
    with pytest.raises(ValueError, match=r"overflow|2\*\*63|int64"):
        restored.update(ones, ones)
    acc.reset().update([1] * 20, [1] * 20)
    assert acc.num_samples == 20


def test_macro_average_with_nan_is_bit_equal_to_scikit_learn(slow_run):
    """scikit-learn's macro average is np.nanmean over every class (summation order matters)."""
    sklearn_metrics = pytest.importorskip("sklearn.metrics")
    seeds = 400 if slow_run else 100  # the full run draws more matrices
    checked = 0
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        k, n = int(rng.integers(2, 12)), int(rng.integers(1, 40))
        y_true, y_pred = rng.integers(0, k, n), rng.integers(0, k, n)
        acc = ConfusionAccumulator(k).update(y_true, y_pred)
        for name in ("precision", "recall", "f1"):
            ours = getattr(acc, name)(average="macro", labels=list(range(k)), zero_division=np.nan)
            theirs = getattr(sklearn_metrics, f"{name}_score")(
                y_true, y_pred, average="macro", labels=list(range(k)), zero_division=np.nan
            )
            assert ours == theirs or (np.isnan(ours) and np.isnan(theirs)), (seed, name)
            checked += 1
    assert checked == 3 * seeds
