"""SegmentationAccumulator: against a hand-written per-image numpy loop, torchmetrics and MONAI,
on randomized masks with absent classes, empty images and void pixels, 2-D and 3-D."""

from __future__ import annotations

import math

import numpy as np
import pytest

from metricstream import ConfusionAccumulator
from metricstream.segmentation import RULES, AbsentRule, SegmentationAccumulator
from metricstream.segmentation.accumulator import t_quantile
from tests.marks import slow_beyond

TOL = 1e-12
VOID = 255
# The absent rules whose per-image class-mean ("macro") is kept in the state.
MACRO_RULES = {(r.both_absent, r.pred_only, r.truth_only) for r in RULES.values()}


# ---------------------------------------------------------------------------- data
def masks(seed, images=6, shape=(9, 7), k=5, void=True, empty=True, dtype=np.uint8):
    """Blocky masks where some classes are missing from some images (truth, prediction or
    both), with void pixels and (optionally) an image that is all void."""
    rng = np.random.default_rng(seed)
    truth = np.zeros((images, *shape), dtype=np.int64)
    pred = np.zeros_like(truth)
    for b in range(images):
        present = rng.choice(k, size=rng.integers(1, k + 1), replace=False)
        truth[b] = rng.choice(present, size=shape)
        keep = rng.random(shape) < rng.uniform(0.3, 0.9)
        pred_classes = rng.choice(k, size=rng.integers(1, k + 1), replace=False)
        pred[b] = np.where(keep, truth[b], rng.choice(pred_classes, size=shape))
    if void:
        truth[rng.random(truth.shape) < 0.1] = VOID
    if empty and images > 2:
        truth[1] = VOID  # an image with no counted pixel
    return truth.astype(dtype), pred.astype(dtype)


def counts(truth, pred, k, ignore=VOID):
    """Per image and class: intersection, truth and prediction pixel counts (numpy, by hand)."""
    n = truth.shape[0]
    inter = np.zeros((n, k), dtype=np.int64)
    t_count = np.zeros((n, k), dtype=np.int64)
    p_count = np.zeros((n, k), dtype=np.int64)
    for b in range(n):
        valid = truth[b] != ignore if ignore is not None else np.ones(truth[b].shape, bool)
        for c in range(k):
            t = (truth[b] == c) & valid
            p = (pred[b] == c) & valid
            inter[b, c] = (t & p).sum()
            t_count[b, c] = t.sum()
            p_count[b, c] = p.sum()
    return inter, t_count, p_count


def value(metric, i, t, p):
    if metric == "iou":
        return i / (t + p - i)
    if metric == "dice":
        return 2 * i / (t + p)
    return i / t


def image_value(metric, i, t, p, rule):
    """One (image, class) value under ``rule``: a float, None (skipped) or NaN."""
    if metric == "accuracy":
        if t == 0:
            return None
        if p == 0:
            return None if rule.truth_only == "skip" else 0.0
        return i / t
    if t == 0 and p == 0:
        return {"skip": None, "zero": 0.0, "one": 1.0, "nan": math.nan}[rule.both_absent]
    if t == 0:
        return None if rule.pred_only == "skip" else 0.0
    if p == 0:
        return None if rule.truth_only == "skip" else 0.0
    return value(metric, i, t, p)


def oracle(metric, aggregation, average, inter, t, p, rule, classes):
    """The view, by explicit loops over images and classes."""
    rule = RULES[rule] if isinstance(rule, str) else rule
    if aggregation == "dataset":
        i_all, t_all, p_all = inter.sum(0), t.sum(0), p.sum(0)
        if average in ("none", "macro"):
            vals = []
            for c in classes:
                v = image_value(metric, i_all[c], t_all[c], p_all[c], rule)
                vals.append(math.nan if v is None else v)
            if average == "none":
                return np.array(vals)
            if rule.both_absent == "nan" and any(math.isnan(v) for v in vals):
                return math.nan
            kept = [v for v in vals if not math.isnan(v)]
            return float(np.mean(kept)) if kept else rule.empty
        si, st_, sp = (float(a[classes].sum()) for a in (i_all, t_all, p_all))
        if average == "micro":
            den = {"iou": st_ + sp - si, "dice": st_ + sp, "accuracy": st_}[metric]
            return (2 * si if metric == "dice" else si) / den if den else rule.empty
        if st_ == 0:
            return rule.empty
        total = 0.0
        for c in classes:
            if t_all[c] > 0:
                total += value(metric, i_all[c], t_all[c], p_all[c]) * t_all[c]
        return total / st_
    n = inter.shape[0]
    if average in ("none", "class_mean", "pooled"):
        per_class = []
        pooled = []
        for c in classes:
            vals = [image_value(metric, inter[b, c], t[b, c], p[b, c], rule) for b in range(n)]
            vals = [v for v in vals if v is not None]
            pooled += vals
            if any(math.isnan(v) for v in vals):
                per_class.append((math.nan, True))
            elif vals:
                per_class.append((float(np.mean(vals)), True))
            else:
                per_class.append((rule.empty, False))
        if average == "none":
            return np.array([v for v, _ in per_class])
        if average == "pooled":
            if any(math.isnan(v) for v in pooled):
                return math.nan
            return float(np.mean(pooled)) if pooled else rule.empty
        if any(math.isnan(v) for v, d in per_class if d):
            return math.nan
        kept = [v for v, d in per_class if d]
        return float(np.mean(kept)) if kept else rule.empty
    per_image = []
    for b in range(n):
        i, tt, pp = inter[b, classes], t[b, classes], p[b, classes]
        if average == "macro":
            vals = [image_value(metric, i[j], tt[j], pp[j], rule) for j in range(len(classes))]
            vals = [v for v in vals if v is not None]
            if vals:
                per_image.append(float(np.mean(vals)))
        elif average == "micro":
            si, st_, sp = i.sum(), tt.sum(), pp.sum()
            den = {"iou": st_ + sp - si, "dice": st_ + sp, "accuracy": st_}[metric]
            if den:
                per_image.append((2 * si if metric == "dice" else si) / den)
        else:
            if tt.sum():
                total = sum(
                    value(metric, i[j], tt[j], pp[j]) * tt[j]
                    for j in range(len(classes))
                    if tt[j] > 0
                )
                per_image.append(total / tt.sum())
    if any(math.isnan(v) for v in per_image):
        return math.nan
    return float(np.mean(per_image)) if per_image else rule.empty


def close(a, b, tol=TOL):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    assert a.shape == b.shape, (a, b)
    assert np.allclose(a, b, rtol=0, atol=tol, equal_nan=True), (a, b)


# ---------------------------------------------------------------------------- the numpy oracle
@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("shape", [(9, 7), (3, 4, 5)], ids=["2d", "3d"])
def test_every_view_matches_a_per_image_loop(seed, shape):
    k = 5
    truth, pred = masks(seed, shape=shape, k=k)
    acc = SegmentationAccumulator(k, ignore_index=VOID).update(truth, pred)
    inter, t, p = counts(truth, pred, k)
    rules = [*RULES, AbsentRule("skip", "skip", "skip"), AbsentRule("one", "skip", "zero", 0.0)]
    for metric in ("iou", "dice", "accuracy"):
        view = getattr(acc, metric)
        for background in (True, False):
            classes = list(range(k)) if background else list(range(1, k))
            for rule in rules:
                for aggregation, averages in (
                    ("dataset", ("none", "macro", "micro", "weighted")),
                    ("image", ("none", "class_mean", "pooled", "macro", "micro", "weighted")),
                ):
                    for average in averages:
                        if (
                            aggregation == "image"
                            and average == "macro"
                            and metric != "accuracy"
                            and isinstance(rule, AbsentRule)
                            and (rule.both_absent, rule.pred_only, rule.truth_only)
                            not in MACRO_RULES
                        ):
                            with pytest.raises(ValueError, match="per-image 'macro'"):
                                view(aggregation, average, absent=rule)
                            continue
                        got = view(aggregation, average, include_background=background, absent=rule)
                        expected = oracle(metric, aggregation, average, inter, t, p, rule, classes)
                        close(got, expected)
    assert acc.num_images == truth.shape[0]
    assert acc.num_empty_images == 1
    assert acc.num_pixels == int((truth != VOID).sum())
    assert np.array_equal(
        acc.matrix, ConfusionAccumulator(k, ignore_index=VOID).update(truth, pred).matrix
    )


def test_worked_example():
    # image 0: truth [[0, 0], [1, 1]], prediction [[0, 0], [1, 0]]
    # image 1: truth all 0, prediction one pixel of class 1 (class 1 is "pred only")
    truth = np.array([[[0, 0], [1, 1]], [[0, 0], [0, 0]]])
    pred = np.array([[[0, 0], [1, 0]], [[0, 0], [0, 1]]])
    acc = SegmentationAccumulator(2).update(truth, pred)
    # dataset: class 0 I=5, U=7; class 1 I=1, U=3
    close(acc.iou("dataset", "none"), [5 / 7, 1 / 3])
    # per image: class 0 (2/3 + 3/4)/2, class 1 (1/2 + 0)/2
    close(acc.iou("image", "none"), [(2 / 3 + 3 / 4) / 2, 0.25])
    # class 1 absent from image 1's truth: MONAI (ignore_empty) skips it
    close(acc.iou("image", "none", absent="skip_truth_absent"), [(2 / 3 + 3 / 4) / 2, 0.5])
    close(acc.iou("image", "macro"), ((2 / 3 + 1 / 2) / 2 + (3 / 4 + 0) / 2) / 2)
    close(acc.accuracy("image", "micro"), (3 / 4 + 3 / 4) / 2)
    assert acc.absent_counts()["pred_only"].tolist() == [0, 1]


def test_scores_layouts_and_dtypes_count_their_argmax():
    k = 4
    rng = np.random.default_rng(3)
    truth, _ = masks(7, images=5, shape=(6, 5), k=k)
    scores = rng.standard_normal((5, k, 6, 5))
    scores[0, :, 0, 0] = 0.5  # a tie: the first maximum wins, as np.argmax
    labels = np.argmax(scores, axis=1)
    expected = SegmentationAccumulator(k, ignore_index=VOID).update(truth, labels)
    for dtype in (np.float32, np.float64, np.float16):
        s = scores.astype(dtype)
        want = SegmentationAccumulator(k, ignore_index=VOID).update(truth, np.argmax(s, axis=1))
        first = SegmentationAccumulator(k, ignore_index=VOID).update(truth, s)
        last = SegmentationAccumulator(k, ignore_index=VOID, class_axis=-1)
        last.update(truth, np.moveaxis(s, 1, -1))
        assert first == want
        assert last.state_arrays().keys() == want.state_arrays().keys()
        for name, array in last.state_arrays().items():
            assert np.array_equal(array, want.state_arrays()[name]), name
    assert expected == SegmentationAccumulator(k, ignore_index=VOID).update(
        truth, scores.astype(np.float64)
    )
    # float32 scores with int32 truth; K > 256 with uint8 truth and float64 scores
    s32 = scores.astype(np.float32)
    assert SegmentationAccumulator(k, ignore_index=VOID).update(
        truth.astype(np.int32), s32
    ) == SegmentationAccumulator(k, ignore_index=VOID).update(truth, np.argmax(s32, axis=1))
    wide = rng.standard_normal((2, 300, 4, 3))
    small_truth = rng.integers(0, 256, (2, 4, 3)).astype(np.uint8)
    for dtype in (np.float64, np.float32):
        got = SegmentationAccumulator(300).update(small_truth, wide.astype(dtype))
        want = SegmentationAccumulator(300).update(
            small_truth.astype(np.int64), np.argmax(wide.astype(dtype), axis=1)
        )
        assert got == want
    empty = SegmentationAccumulator(k).update(np.zeros((0, 3, 3), np.uint8), np.zeros((0, k, 3, 3)))
    assert empty.num_images == 0 and empty == SegmentationAccumulator(k)
    frozen = truth.copy()
    frozen.flags.writeable = False
    assert SegmentationAccumulator(k, ignore_index=VOID).update(frozen, s32) == (
        SegmentationAccumulator(k, ignore_index=VOID).update(truth, s32)
    )
    # label dtypes: uint8, int64, int32, bool all count alike
    a = SegmentationAccumulator(k, ignore_index=VOID).update(truth, labels.astype(np.uint8))
    b = SegmentationAccumulator(k, ignore_index=VOID).update(
        truth.astype(np.int32), labels.astype(np.int16)
    )
    assert a == b


@pytest.mark.parametrize("k", [5, 255, 300])
@pytest.mark.parametrize("ignore", [None, -1, 2, 255, 1000])
def test_label_dtypes_and_ignore_values(k, ignore):
    rng = np.random.default_rng(k + (ignore or 0))
    truth = rng.integers(0, min(k, 256), (4, 6, 5))
    pred = rng.integers(0, min(k, 256), (4, 6, 5))
    if ignore is not None:
        truth[rng.random(truth.shape) < 0.2] = ignore
    # the rest of the labels (and of the oracle) stay valid: remove values ignore would hide
    expected_matrix = ConfusionAccumulator(k, ignore_index=ignore).update(truth, pred).matrix
    inter, t, p = counts(truth, pred, k, ignore=ignore)
    want = oracle("iou", "image", "none", inter, t, p, "skip_both", list(range(k)))
    dtypes = [np.int64, np.int32, np.uint16]
    if ignore is None or 0 <= ignore <= 255:
        dtypes.append(np.uint8)
    for dtype in dtypes:
        if dtype is np.uint16 and ignore == -1:
            continue
        acc = SegmentationAccumulator(k, ignore_index=ignore)
        acc.update(truth.astype(dtype), pred.astype(dtype if dtype is not np.uint8 else np.int64))
        assert np.array_equal(acc.matrix, expected_matrix), dtype
        close(acc.iou("image", "none"), want)
    bad = truth.copy()
    wrong = k + 1 if k == ignore else k
    bad[2, 3, 1] = wrong
    with pytest.raises(ValueError, match=rf"`y_true` holds {wrong} at \[2, 3, 1\] \(image 2\)"):
        SegmentationAccumulator(k, ignore_index=ignore).update(bad, pred)
    bad = pred.copy()
    bad[1, 0, 4] = -3
    truth[1, 0, 4] = 0  # a prediction is checked where the truth is not ignored
    with pytest.raises(ValueError, match=r"`y_pred` holds -3 at \[1, 0, 4\]"):
        SegmentationAccumulator(k, ignore_index=ignore).update(truth, bad)


def test_torch_tensors_are_read():
    torch = pytest.importorskip("torch")
    truth, pred = masks(4, k=3)
    acc = SegmentationAccumulator(3, ignore_index=VOID)
    acc.update(torch.from_numpy(truth), torch.from_numpy(pred))
    scores = torch.randn(6, 3, 9, 7, requires_grad=True)
    acc.update(torch.from_numpy(truth), scores)
    acc.update(torch.from_numpy(truth), scores.to(torch.bfloat16))
    want = SegmentationAccumulator(3, ignore_index=VOID).update(truth, pred)
    arg = scores.detach().numpy().argmax(1)
    want.update(truth, arg).update(
        truth, scores.detach().to(torch.bfloat16).float().numpy().argmax(1)
    )
    assert acc == want


# ---------------------------------------------------------------------------- torchmetrics
@pytest.fixture
def float64_torchmetrics(monkeypatch):
    """torchmetrics divides integer counts in float32 (`_safe_divide` casts them with
    `.float()`); the same divisions in float64, to compare to 1e-12. Everything else (what is
    counted, what is kept, how it is averaged) is torchmetrics' own code."""
    pytest.importorskip("torchmetrics")
    import torch
    from torchmetrics.functional.segmentation import dice as dice_module
    from torchmetrics.segmentation import mean_iou as iou_module
    from torchmetrics.utilities.compute import _safe_divide

    def divide(num, denom, zero_division=0.0):
        return _safe_divide(num.double(), denom.double(), zero_division=zero_division)

    def compute(intersection, union, zero_division):
        return divide(intersection, union, zero_division)

    monkeypatch.setattr(iou_module, "_mean_iou_compute", compute)
    monkeypatch.setattr(dice_module, "_safe_divide", divide)
    return torch


def one_hot(torch, truth, pred, k, dtype):
    """(B, K, ...) one-hot tensors with void pixels all-zero in both (counted nowhere)."""
    valid = truth != VOID
    t = np.stack([(truth == c) & valid for c in range(k)], axis=1)
    p = np.stack([(pred == c) & valid for c in range(k)], axis=1)
    return torch.from_numpy(p.astype(dtype)), torch.from_numpy(t.astype(dtype))


@pytest.mark.parametrize("shape", [(9, 7), (3, 4, 5)], ids=["2d", "3d"])
@pytest.mark.parametrize("seed", slow_beyond(range(3), 1))
def test_torchmetrics_mean_iou(float64_torchmetrics, seed, shape):
    torch = float64_torchmetrics
    from torchmetrics.segmentation import MeanIoU

    k = 5
    truth, pred = masks(seed, shape=shape, k=k)
    batches = [slice(0, 2), slice(2, 5), slice(5, 6)]
    acc = SegmentationAccumulator(k, ignore_index=VOID)
    for part in batches:
        acc.update(truth[part], pred[part])
    for background in (True, False):
        for per_class in (True, False):
            metric = MeanIoU(num_classes=k, include_background=background, per_class=per_class)
            metric.set_dtype(torch.float64)
            for part in batches:
                metric.update(*one_hot(torch, truth[part], pred[part], k, np.int64))
            expected = metric.compute().numpy()
            got = acc.reproduce(
                "torchmetrics.MeanIoU", include_background=background, per_class=per_class
            )
            close(got, expected if per_class else float(expected))


def test_torchmetrics_mean_iou_unpatched_float32():
    torch = pytest.importorskip("torch")
    pytest.importorskip("torchmetrics")
    from torchmetrics.segmentation import MeanIoU

    truth, pred = masks(11, k=4)
    acc = SegmentationAccumulator(4, ignore_index=VOID).update(truth, pred)
    metric = MeanIoU(num_classes=4, per_class=True)
    metric.update(*one_hot(torch, truth, pred, 4, np.int64))
    close(acc.reproduce("torchmetrics.MeanIoU", per_class=True), metric.compute().numpy(), 1e-6)


@pytest.mark.parametrize("shape", [(9, 7), (3, 4, 5)], ids=["2d", "3d"])
@pytest.mark.parametrize("seed", slow_beyond(range(3), 1))
def test_torchmetrics_dice_score(float64_torchmetrics, seed, shape):
    torch = float64_torchmetrics
    import warnings

    from torchmetrics.segmentation import DiceScore

    k = 5
    truth, pred = masks(seed + 20, shape=shape, k=k)
    if seed == 2:
        truth[3][truth[3] != VOID] = 0  # an image whose truth is background only
        pred[3] = np.where(pred[3] == 0, 2, pred[3])
    acc = SegmentationAccumulator(k, ignore_index=VOID).update(truth, pred)
    for background in (True, False):
        for level in ("samplewise", "global"):
            for average in ("micro", "macro", "weighted", "none"):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    metric = DiceScore(
                        num_classes=k,
                        include_background=background,
                        average=average,
                        aggregation_level=level,
                    )
                # integer one-hot: float inputs would be argmax-ed, void pixels becoming class 0
                metric.update(*one_hot(torch, truth[:4], pred[:4], k, np.int64))
                metric.update(*one_hot(torch, truth[4:], pred[4:], k, np.int64))
                expected = metric.compute().numpy()
                got = acc.reproduce(
                    "torchmetrics.DiceScore",
                    include_background=background,
                    average=average,
                    aggregation_level=level,
                )
                close(got, expected if average == "none" else float(expected))


# ---------------------------------------------------------------------------- MONAI
def monai_reduction(data, reduction):
    """MONAI's `do_metric_reduction` in float64 (MONAI casts to float32 with `.float()`)."""
    nans = np.isnan(data)
    f = np.where(nans, 0.0, data)
    not_nans = (~nans).astype(np.float64)
    if reduction == "mean":
        n = not_nans.sum(1)
        f = np.where(n > 0, f.sum(1) / np.maximum(n, 1), 0.0)
        n = (n > 0).sum()
        return float(f.sum() / n) if n > 0 else 0.0
    if reduction == "mean_batch":
        n = not_nans.sum(0)
        return np.where(n > 0, f.sum(0) / np.maximum(n, 1), 0.0)
    if reduction == "sum":
        return float(f.sum())
    return f.sum(0)


@pytest.mark.slow  # importing MONAI alone takes 10 s
@pytest.mark.parametrize("shape", [(9, 7), (3, 4, 5)], ids=["2d", "3d"])
@pytest.mark.parametrize("seed", range(2))
def test_monai_dice_and_iou(seed, shape):
    torch = pytest.importorskip("torch")
    pytest.importorskip("monai", reason="MONAI is not installed (pip install monai)")
    from monai.metrics import DiceMetric, MeanIoU

    k = 4
    truth, pred = masks(seed + 40, shape=shape, k=k)
    acc = SegmentationAccumulator(k, ignore_index=VOID)
    acc.update(truth[:3], pred[:3]).update(truth[3:], pred[3:])
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)  # MONAI's per-image values in float64
    try:
        for background in (True, False):
            for ignore_empty in (True, False):
                # One-hot float64 masks with the void pixels zeroed (counted nowhere): MONAI's
                # `ignore_index` path multiplies by a float32 mask, so it is checked below at
                # float32 precision.
                kwargs = {"include_background": background, "ignore_empty": ignore_empty}
                dice = DiceMetric(reduction="none", **kwargs)
                dice(*one_hot(torch, truth, pred, k, np.float64))
                iou = MeanIoU(reduction="none", **kwargs)
                iou(*one_hot(torch, truth, pred, k, np.float64))
                labels = DiceMetric(reduction="mean", num_classes=k, ignore_index=VOID, **kwargs)
                labels(
                    torch.from_numpy(pred[:, None].astype(np.int64)),
                    torch.from_numpy(truth[:, None].astype(np.int64)),
                )
                close(acc.reproduce("monai.DiceMetric", **kwargs), labels.aggregate().item(), 1e-6)
                for name, metric in (("monai.DiceMetric", dice), ("monai.MeanIoU", iou)):
                    data = metric.aggregate().numpy().astype(np.float64)
                    for reduction in ("mean", "mean_batch", "sum", "sum_batch"):
                        got = acc.reproduce(name, reduction=reduction, **kwargs)
                        close(got, monai_reduction(data, reduction))
                        # MONAI's own reduction, in float32
                        own, _ = __import__("monai").metrics.utils.do_metric_reduction(
                            torch.from_numpy(data.copy()), reduction
                        )
                        own = own.numpy().astype(np.float64).reshape(np.shape(got))
                        close(got, own, 1e-6 * max(1, k * len(truth)))
    finally:
        torch.set_default_dtype(default)


def test_monai_all_empty_truth_returns_zero_not_nan():
    truth = np.zeros((2, 3, 3), dtype=np.uint8)
    pred = np.zeros((2, 3, 3), dtype=np.uint8)
    acc = SegmentationAccumulator(2).update(truth, pred)
    # class 1 is absent everywhere: MONAI's "mean" without background averages nothing: 0.0
    assert acc.reproduce("monai.DiceMetric", include_background=False) == 0.0
    assert math.isnan(
        acc.dice("image", "macro", include_background=False, absent="skip_truth_absent")
    )


@pytest.mark.slow  # importing MONAI alone takes 10 s
def test_monai_itself_returns_zero_for_all_empty_truth():
    torch = pytest.importorskip("torch")
    pytest.importorskip("monai", reason="MONAI is not installed (pip install monai)")
    from monai.metrics import DiceMetric

    truth = np.zeros((2, 3, 3), dtype=np.uint8)
    metric = DiceMetric(include_background=False, num_classes=2)
    metric(torch.zeros((2, 1, 3, 3)), torch.zeros((2, 1, 3, 3)))
    acc = SegmentationAccumulator(2).update(truth, truth)
    assert metric.aggregate().item() == acc.reproduce("monai.DiceMetric", include_background=False)


# ---------------------------------------------------------------------------- mmsegmentation
def test_mmseg_iou_metric_rules():
    # mmsegmentation IoUMetric.total_area_to_metrics, written out: dataset-level areas,
    # NaN where the denominator is 0, nanmean over classes.
    k = 5
    truth, pred = masks(5, k=k)
    truth[truth == 4] = 0  # class 4 never in the truth (it may be predicted)
    pred[pred == 3] = 0
    truth[truth == 3] = 0  # class 3 absent from both
    acc = SegmentationAccumulator(k, ignore_index=VOID).update(truth, pred)
    inter, t, p = (a.sum(0).astype(np.float64) for a in counts(truth, pred, k))
    with np.errstate(divide="ignore", invalid="ignore"):
        iou = inter / (t + p - inter)
        accuracy = inter / t
        dice = 2 * inter / (p + t)
    close(acc.reproduce("mmseg.IoUMetric", metric="IoU"), iou)
    close(acc.reproduce("mmseg.IoUMetric", metric="mIoU"), np.nanmean(iou))
    close(acc.reproduce("mmseg.IoUMetric", metric="mAcc"), np.nanmean(accuracy))
    close(acc.reproduce("mmseg.IoUMetric", metric="mDice"), np.nanmean(dice))
    close(acc.reproduce("mmseg.IoUMetric", metric="aAcc"), inter.sum() / t.sum())
    close(acc.reproduce("mmseg.IoUMetric", metric="mIoU", nan_to_num=0), np.nan_to_num(iou).mean())


def test_reproduce_rejects_unknown_anchors_and_options():
    acc = SegmentationAccumulator(3, background=1)
    with pytest.raises(ValueError, match="`anchor` must be one of"):
        acc.reproduce("sklearn.jaccard")
    with pytest.raises(TypeError, match="no option"):
        acc.reproduce("monai.DiceMetric", smooth=1)
    with pytest.raises(ValueError, match="`reduction` must be one of"):
        acc.reproduce("monai.MeanIoU", reduction="mean_channel")
    with pytest.raises(ValueError, match="background=0"):
        acc.reproduce("torchmetrics.MeanIoU", include_background=False)


# ---------------------------------------------------------------------------- intervals
def test_interval_from_image_sums():
    scipy_stats = pytest.importorskip("scipy.stats")
    truth, pred = masks(9, images=12, k=4)
    acc = SegmentationAccumulator(4, ignore_index=VOID).update(truth, pred)
    inter, t, p = counts(truth, pred, 4)
    per_image = []
    for b in range(len(truth)):
        vals = [
            value("iou", inter[b, c], t[b, c], p[b, c]) for c in range(4) if t[b, c] + p[b, c] > 0
        ]
        if vals:
            per_image.append(np.mean(vals))
    per_image = np.array(per_image)
    n = len(per_image)
    result = acc.interval("iou", "macro", confidence=0.9)
    se = per_image.std(ddof=1) / math.sqrt(n)
    q = scipy_stats.t.ppf(0.95, n - 1)
    close(result.estimate, per_image.mean())
    close(result.standard_error, se, 1e-9)
    close([result.low, result.high], [per_image.mean() - q * se, per_image.mean() + q * se], 1e-9)
    per_class = acc.interval("dice", "none")
    assert per_class.estimate.shape == (4,)
    close(per_class.estimate, acc.dice("image", "none"))
    for df in (1, 2, 5, 30, 999, 1000, 10**4, 10**6, 10**12):
        for prob in (0.025, 0.51, 0.6, 0.9, 0.975, 0.999, 0.99999):
            assert t_quantile(prob, df) == pytest.approx(scipy_stats.t.ppf(prob, df), rel=1e-12)
    one = SegmentationAccumulator(2).update(truth[:1] % 2, pred[:1] % 2)
    assert math.isnan(one.interval().low)


# ---------------------------------------------------------------------------- streaming
# ---------------------------------------------------------------------------- bad input
def _bad(acc, y_true, y_pred, error, match):
    before = acc.state_arrays()
    with pytest.raises(error, match=match):
        acc.update(y_true, y_pred)
    after = acc.state_arrays()
    assert all(np.array_equal(before[name], after[name]) for name in before)


def test_bad_input_is_atomic_and_named():
    truth, pred = masks(1, k=4)
    acc = SegmentationAccumulator(4, ignore_index=VOID).update(truth, pred)
    bad = truth.copy()
    bad[4, 2, 3] = 7
    _bad(acc, bad, pred, ValueError, r"`y_true` holds 7 at \[4, 2, 3\] \(image 4\)")
    bad = pred.astype(np.int64)
    bad[5, 0, 1] = -1
    _bad(acc, truth, bad, ValueError, r"`y_pred` holds -1 at \[5, 0, 1\]")
    scores = np.zeros((6, 4, 9, 7), dtype=np.float32)
    scores[2, 1, 3, 3] = np.nan
    _bad(acc, truth, scores, ValueError, r"NaN score at pixel \[2, 3, 3\]")
    _bad(acc, truth, scores.astype(np.float64), ValueError, r"NaN score at pixel \[2, 3, 3\]")
    _bad(acc, truth, pred[:, :3], ValueError, "labels must match")
    _bad(acc, truth, np.zeros((6, 3, 9, 7), np.float32), ValueError, "3 scores on `class_axis`")
    _bad(acc, truth.astype(float), pred, TypeError, "integer class labels")
    _bad(acc, truth[0, 0], pred[0, 0], ValueError, "image axis first")
    with pytest.raises(TypeError, match="weights"):
        acc.update(truth, pred, np.ones(truth.shape))
    with pytest.raises(ValueError, match="`num_classes`"):
        SegmentationAccumulator(0)
    with pytest.raises(ValueError, match="`background`"):
        SegmentationAccumulator(3, background=3)
    with pytest.raises(ValueError, match="`aggregation`"):
        acc.iou("pixels")
    with pytest.raises(ValueError, match="`average`"):
        acc.iou("dataset", "pooled")
    with pytest.raises(ValueError, match="`absent`"):
        acc.iou(absent="ignore")


def test_counts_never_wrap():
    acc = SegmentationAccumulator(2)
    acc._arrays["matrix"][0, 0] = 2**63 - 10
    truth = np.zeros((1, 4, 4), dtype=np.uint8)
    _bad(acc, truth, truth, ValueError, "beyond int64")


# ---------------------------------------------------------------------------- state
def test_sync_in_a_fake_world():
    from tests.sync_fixtures import FakeWorld

    truth, pred = masks(12, images=9, k=4)
    whole = SegmentationAccumulator(4, ignore_index=VOID).update(truth, pred)
    shards = [
        SegmentationAccumulator(4, ignore_index=VOID).update(truth[r::3], pred[r::3])
        for r in range(3)
    ]
    world = FakeWorld(3)
    size = sum(array.size for array in whole.state_arrays().values())
    for rank, result in enumerate(world.run(shards)):
        assert result is shards[rank] and result == whole
        assert world.calls[rank] == [("gather", 6, "<i8"), ("sum", size, "<i8")]
    other = [SegmentationAccumulator(4, ignore_index=VOID), SegmentationAccumulator(4)]
    assert all(isinstance(r, ValueError) for r in FakeWorld(2).run(other))


def test_summary_and_text():
    truth, pred = masks(8, k=3)
    acc = SegmentationAccumulator(3, class_names=["bg", "cat", "dog"], ignore_index=VOID)
    acc.update(truth, pred)
    text = acc.summary("text")
    assert "dataset" in text and "per image" in text and "mIoU without background" in text
    assert "dog" in text
    data = acc.summary()
    close(data["dataset"]["miou"], acc.iou("dataset"))
    close(data["image"]["miou"], acc.iou("image"))
    assert data["per_class"]["cat"]["images_present"] == acc.absent_counts()["present"][1]


def test_npz_reader_streams_whole_images(tmp_path):
    from metricstream.segmentation.report import read_npz_masks

    truth, pred = masks(3, images=7, k=3)
    path = tmp_path / "masks.npz"
    np.savez(path, y_true=truth, y_pred=pred)
    acc = SegmentationAccumulator(3, ignore_index=VOID)
    for y_true, y_pred in read_npz_masks(path, images_per_batch=3):
        assert y_true.shape[0] <= 3
        acc.update(y_true, y_pred)
    assert acc == SegmentationAccumulator(3, ignore_index=VOID).update(truth, pred)


def test_cli_hook_prints_both_aggregations(tmp_path, monkeypatch, capsys):
    """The section the command line's report adds with --per-image (wired as in cli.py)."""
    import json

    from metricstream import cli

    truth, pred = masks(13, images=5, k=3)
    path = tmp_path / "masks.npz"
    np.savez(path, y_true=truth, y_pred=pred)
    acc = SegmentationAccumulator(3, ignore_index=VOID).update(truth, pred)
    assert cli.main(["report", str(path), "--ignore", "255", "--per-image"]) == 0
    out = capsys.readouterr().out
    assert "per image" in out and f"{acc.iou('image'):.4f}" in out
    assert (
        cli.main(["report", str(path), "--ignore", "255", "--per-image", "--format", "json"]) == 0
    )
    data = json.loads(capsys.readouterr().out)
    close(data["per_image"]["image"]["miou"], acc.iou("image"))
    assert cli.main(["report", str(path), "--ignore", "255"]) == 0
    assert "per image" not in capsys.readouterr().out


def test_tiles_of_an_image_streamed_through_its_matrix():
    truth, pred = masks(14, images=3, shape=(12, 10), k=4)
    whole = SegmentationAccumulator(4, ignore_index=VOID).update(truth, pred)
    tiled = SegmentationAccumulator(4, ignore_index=VOID)
    for b in range(3):
        tiles = ConfusionAccumulator(4, ignore_index=VOID)
        for rows in (slice(0, 5), slice(5, 12)):  # two tiles of image b, in two updates
            for cols in (slice(0, 4), slice(4, 10)):
                tiles.update(truth[b, rows, cols], pred[b, rows, cols])
        tiled.update_from_matrices(tiles.matrix)
    assert tiled == whole
    stacked = np.stack(
        [
            ConfusionAccumulator(4, ignore_index=VOID).update(t, p).matrix
            for t, p in zip(truth, pred, strict=True)
        ]
    )
    assert SegmentationAccumulator(4, ignore_index=VOID).update_from_matrices(stacked) == whole
    assert (
        SegmentationAccumulator(4, ignore_index=VOID).update_from_matrices(
            stacked.astype(np.float64)
        )
        == whole
    )
    before = tiled.state_arrays()
    for bad, error, match in (
        (np.zeros((3, 3)), ValueError, r"\(4, 4\) or \(B, 4, 4\)"),
        (-np.ones((4, 4)), ValueError, "non-negative"),
        (np.full((4, 4), 0.5), ValueError, "whole numbers"),
        (np.full((4, 4), "a"), TypeError, "counts"),
    ):
        with pytest.raises(error, match=match):
            tiled.update_from_matrices(bad)
    after = tiled.state_arrays()
    assert all(np.array_equal(before[name], after[name]) for name in before)
