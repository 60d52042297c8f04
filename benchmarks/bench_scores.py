"""Benchmark: the score accumulator (curves, AUROC, AP, calibration, top-k) against torchmetrics.

Run from the repository root (torch/torchmetrics and scikit-learn for the comparisons)::

    python -m benchmarks.bench_scores            # everything
    python -m benchmarks.bench_scores --quick    # fewer rounds, 10^7 scores for the memory case
    python -m benchmarks.bench_scores --only accuracy update

Cases (times are medians of interleaved rounds, ratios from the same run):

Updates are timed in CPU time, ten calls a sample (one call a sample would add the clock's own
0.6 us), the candidates taking turns, and the median sample is reported (see ``single_calls``:
on a loaded shared machine means over long blocks measure the scheduler).

* ``update``: one update of 256x10 float32 probabilities (every state at once: ROC/PR
  histograms, top-k ranks, calibration, Brier and log loss) against torchmetrics'
  ``MulticlassAUROC(thresholds=100).update``, ``MulticlassAccuracy(top_k=5)`` and
  ``MulticlassCalibrationError`` on the same batch (targets: <= 5 us, >= 400x); and one
  update of the same batch's float32 logits (``logits=True``: the softmax for calibration,
  Brier and log loss) against ``MulticlassAUROC(thresholds=100)`` on those logits;
* ``update_k1000``: the same with 1,000 classes (target >= 100x ``thresholds=100``);
* ``large``: one update of 10^6 x 10 float32 scores against a read-only pass over them
  (``np.max``; target: within 2x);
* ``memory``: tracemalloc peak while 10^8 scores stream through (O(C x bins), not O(N));
* ``accuracy``: AUROC and AP of the default bins against scikit-learn's exact values on 12
  score sets (and AP with ``within_bins="tied"``), beside torchmetrics binned (100 and 1,000
  thresholds) and Keras-style 200 thresholds; the reported bound must contain the exact
  value.

Before a time is reported, the accumulator's AUROC is checked against scikit-learn on the data
it counted.
"""

from __future__ import annotations

import argparse
import os
import time
import tracemalloc
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from metricstream.scores import ScoreAccumulator

from ._timing import cpu_description


# ---------------------------------------------------------------------- score sets
@dataclass
class ScoreSet:
    """Scores with the truth: ``y`` labels (multiclass) or 0/1 (binary)."""

    name: str
    y: np.ndarray
    scores: np.ndarray
    task: str  # "binary" or "multiclass"
    logits: bool = False
    note: str = ""


def _softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    return shifted / shifted.sum(axis=1, keepdims=True)


def _bf16(values: np.ndarray) -> np.ndarray:
    return (np.asarray(values, np.float32).view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)


def score_sets(seed: int = 0) -> list[ScoreSet]:
    """The accuracy table's score sets (deterministic)."""
    from sklearn.datasets import load_digits
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import train_test_split
    from sklearn.naive_bayes import GaussianNB
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    rng = np.random.default_rng(seed)
    sets = []
    n = 100_000
    y = rng.integers(0, 2, n)
    smooth = 1 / (1 + np.exp(-(rng.normal(size=n) + 1.5 * y)))
    sets.append(ScoreSet("smooth binary, 1e5", y, smooth.astype(np.float32), "binary"))
    y = (rng.random(n) < 0.01).astype(int)
    rare = 1 / (1 + np.exp(-(rng.normal(size=n) + 2.5 * y - 3)))
    sets.append(ScoreSet("1% positives, 1e5", y, rare.astype(np.float32), "binary"))
    y = rng.integers(0, 2, 20_000)
    ties = np.round(np.clip(rng.normal(0.4 + 0.2 * y, 0.2), 0, 1), 2)
    sets.append(ScoreSet("ties (2 decimals)", y, ties.astype(np.float32), "binary"))
    y = rng.integers(0, 10, 20_000)
    logits = rng.normal(size=(20_000, 10)) + 2.0 * np.eye(10)[y]
    sets.append(
        ScoreSet("softmax, 10 classes", y, _softmax(logits).astype(np.float32), "multiclass")
    )
    sets.append(ScoreSet("same, float64", y, _softmax(logits), "multiclass"))

    digits = load_digits()
    x_train, x_test, y_train, y_test = train_test_split(
        digits.data, digits.target, test_size=0.5, random_state=0, stratify=digits.target
    )
    model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000))
    model.fit(x_train, y_train)
    proba = model.predict_proba(x_test).astype(np.float32)
    sets.append(ScoreSet("digits logistic, OvR", y_test, proba, "multiclass"))
    sets.append(
        ScoreSet("digits logistic, 3 vs rest", (y_test == 3).astype(int), proba[:, 3], "binary")
    )
    sets.append(
        ScoreSet(
            "digits logistic, logits",
            y_test,
            model.decision_function(x_test).astype(np.float32),
            "multiclass",
            logits=True,
        )
    )
    sets.append(
        ScoreSet(
            "digits logistic, log-proba",
            y_test,
            model.predict_log_proba(x_test).astype(np.float32),
            "multiclass",
            logits=True,
        )
    )
    bayes = GaussianNB().fit(x_train, y_train).predict_proba(x_test).astype(np.float32)
    sets.append(
        ScoreSet(
            "digits GaussianNB (0/1)",
            y_test,
            bayes,
            "multiclass",
            note=f"{np.mean((bayes == 0) | (bayes == 1)):.0%} exact 0/1",
        )
    )
    sets.append(ScoreSet("bfloat16 softmax", y, _bf16(_softmax(logits)), "multiclass"))
    half = 1 / (1 + np.exp(-(rng.normal(size=n) + 1.5 * (yb := rng.integers(0, 2, n)))))
    sets.append(ScoreSet("float16 binary", yb, half.astype(np.float16), "binary"))
    return sets


def exact_values(s: ScoreSet) -> tuple[float, float]:
    """scikit-learn's AUROC and AP (macro one-vs-rest for multiclass) on the raw scores."""
    from sklearn import metrics

    scores = s.scores.astype(np.float64)
    if s.logits and s.task == "multiclass":  # ranked by their softmax, as scikit-learn's input
        scores = _softmax(scores)
    if s.task == "binary":
        return (metrics.roc_auc_score(s.y, scores), metrics.average_precision_score(s.y, scores))
    onehot = np.eye(scores.shape[1])[s.y]
    return (
        metrics.roc_auc_score(onehot, scores, average="macro"),
        metrics.average_precision_score(onehot, scores, average="macro"),
    )


def accumulate(s: ScoreSet, **kwargs) -> ScoreAccumulator:
    classes = None if s.task == "binary" else s.scores.shape[1]
    acc = ScoreAccumulator(s.task, classes, logits=s.logits, **kwargs)
    for lo in range(0, len(s.y), 4096):
        acc.update(s.y[lo : lo + 4096], s.scores[lo : lo + 4096])
    return acc


def keras_auroc(y: np.ndarray, scores: np.ndarray, num_thresholds: int = 200) -> float:
    """Keras' ``AUC(num_thresholds=200)`` ROC area: thresholds ``[-eps, 1/199, ..., 1 + eps]``,
    a sample is positive when ``score > t``, trapezoids between the points."""
    eps = 1e-7
    thresholds = np.r_[-eps, np.arange(1, num_thresholds - 1) / (num_thresholds - 1), 1 + eps]
    positives = np.sort(scores[y == 1])
    negatives = np.sort(scores[y == 0])
    tp = len(positives) - np.searchsorted(positives, thresholds, side="right")
    fp = len(negatives) - np.searchsorted(negatives, thresholds, side="right")
    tpr = tp / max(len(positives), 1)
    fpr = fp / max(len(negatives), 1)
    return float(np.sum((fpr[:-1] - fpr[1:]) * (tpr[:-1] + tpr[1:]) / 2))


def torchmetrics_values(s: ScoreSet, thresholds: int) -> tuple[float, float] | None:
    try:
        import torch
        from torchmetrics import classification as tmc
    except ImportError:
        return None
    if s.logits:
        return None  # torchmetrics softmaxes logits: another ranking than the raw scores
    scores = torch.from_numpy(s.scores.astype(np.float32))
    target = torch.from_numpy(np.asarray(s.y, dtype=np.int64))
    if s.task == "binary":
        auroc = tmc.BinaryAUROC(thresholds=thresholds)
        ap = tmc.BinaryAveragePrecision(thresholds=thresholds)
    else:
        classes = s.scores.shape[1]
        auroc = tmc.MulticlassAUROC(classes, average="macro", thresholds=thresholds)
        ap = tmc.MulticlassAveragePrecision(classes, average="macro", thresholds=thresholds)
    auroc.update(scores, target)
    ap.update(scores, target)
    return float(auroc.compute()), float(ap.compute())


def accuracy_rows(sets: list[ScoreSet] | None = None) -> list[dict]:
    """One row per score set: exact values, errors of each method, the bound check."""
    rows = []
    for s in sets if sets is not None else score_sets():
        exact_auroc, exact_ap = exact_values(s)
        acc = accumulate(s)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            auroc = acc.auroc("macro", with_bound=True)
            ap = acc.average_precision("macro", with_bound=True)
            tied = acc.average_precision("macro", within_bins="tied")
        row = {
            "name": s.name,
            "n": len(s.y),
            "exact_auroc": exact_auroc,
            "exact_ap": exact_ap,
            "auroc_error": abs(auroc.value - exact_auroc),
            "ap_error": abs(ap.value - exact_ap),
            "ap_tied_error": abs(tied - exact_ap),
            "auroc_bound": (auroc.lower, auroc.upper),
            "ap_bound": (ap.lower, ap.upper),
            "contained": (
                auroc.lower - 1e-12 <= exact_auroc <= auroc.upper + 1e-12
                and ap.lower - 1e-12 <= exact_ap <= ap.upper + 1e-12
            ),
            "exact": bool(acc.exact().all()),
            "bins": acc.num_bins,
            "sixteen_bit": s.scores.dtype == np.float16 or s.name.startswith("bfloat16"),
        }
        for count in (100, 1000):
            values = torchmetrics_values(s, count)
            row[f"tm{count}"] = (
                None
                if values is None
                else (abs(values[0] - exact_auroc), abs(values[1] - exact_ap))
            )
        if s.task == "binary" and not s.logits:
            row["keras200"] = abs(keras_auroc(s.y, s.scores.astype(np.float64)) - exact_auroc)
        elif not s.logits:
            onehot = np.eye(s.scores.shape[1])[s.y]
            row["keras200"] = abs(
                np.mean(
                    [keras_auroc(onehot[:, c], s.scores[:, c]) for c in range(s.scores.shape[1])]
                )
                - exact_auroc
            )
        else:
            row["keras200"] = None
        rows.append(row)
    return rows


def _e(value: float | None) -> str:
    return "n/a" if value is None else ("0" if value == 0 else f"{value:.1e}")


def print_accuracy(rows: list[dict]) -> None:
    print("\n## accuracy: |value - scikit-learn exact| (AUROC / AP, macro for multiclass)")
    print("   (AP tied: average_precision(within_bins='tied'), same bins)")
    print(
        f"{'score set':30} {'n':>7} {'metricstream (default bins)':>29} {'AP tied':>9} "
        f"{'bound ok':>8} {'torchmetrics 100':>17} {'torchmetrics 1000':>18} {'Keras 200':>9}"
    )
    for r in rows:
        ms = f"{_e(r['auroc_error'])} / {_e(r['ap_error'])}" + (" exact" if r["exact"] else "")
        tm = [
            ("n/a" if r[k] is None else f"{_e(r[k][0])} / {_e(r[k][1])}")
            for k in ("tm100", "tm1000")
        ]
        print(
            f"{r['name']:30} {r['n']:>7} {ms:>29} {_e(r['ap_tied_error']):>9} "
            f"{'yes' if r['contained'] else 'NO':>8} {tm[0]:>17} {tm[1]:>18} "
            f"{_e(r['keras200']):>9}"
        )


# ---------------------------------------------------------------------- speed
def _logits64(rows: int, classes: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, rows)
    return y, rng.normal(size=(rows, classes)) + 3.0 * np.eye(classes)[y]


def _batch(rows: int, classes: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    y, logits = _logits64(rows, classes, seed)
    return y, _softmax(logits).astype(np.float32)


def _logit_batch(rows: int, classes: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The labels of :func:`_batch` and its logits before the softmax, as float32."""
    y, logits = _logits64(rows, classes, seed)
    return y, logits.astype(np.float32)


def bench_update(classes: int, repeats: int) -> dict[str, float]:
    import torch
    from torchmetrics import classification as tmc

    # One thread each: metricstream counts on one, and torch's idle pool threads would
    # otherwise spin on this shared 2-core machine and slow every candidate down.
    torch.set_num_threads(1)
    y, scores = _batch(256, classes)
    _, logits = _logit_batch(256, classes)
    acc = ScoreAccumulator("multiclass", classes)
    acc.update(y, scores)
    from_logits = ScoreAccumulator("multiclass", classes, logits=True)
    from_logits.update(y, logits)
    from sklearn import metrics

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        onehot = np.eye(classes)[y]
        present = onehot.sum(axis=0) > 0
        for values, logit in ((scores, False), (logits, True)):
            check = ScoreAccumulator("multiclass", classes, logits=logit).update(y, values)
            ranked = _softmax(values.astype(np.float64)) if logit else values
            reference = metrics.roc_auc_score(onehot[:, present], ranked[:, present])
            bound = check.auroc("macro", with_bound=True)
            assert bound.lower <= reference <= bound.upper, "AUROC outside its bound"
    ty, ts, tl = torch.from_numpy(y), torch.from_numpy(scores), torch.from_numpy(logits)
    auroc100 = tmc.MulticlassAUROC(classes, thresholds=100)
    # torchmetrics softmaxes scores outside [0, 1] itself.
    auroc100_logits = tmc.MulticlassAUROC(classes, thresholds=100)
    candidates: dict[str, Callable[[], object]] = {
        "metricstream update (all views)": lambda: acc.update(y, scores),
        "torchmetrics MulticlassAUROC(thresholds=100)": lambda: auroc100.update(ts, ty),
        "metricstream update (all views), logits": lambda: from_logits.update(y, logits),
        "torchmetrics MulticlassAUROC(thresholds=100), logits": lambda: auroc100_logits.update(
            tl, ty
        ),
    }
    if classes <= 100:
        topk = tmc.MulticlassAccuracy(classes, top_k=5)
        calibration = tmc.MulticlassCalibrationError(classes, n_bins=15)
        candidates["torchmetrics MulticlassAccuracy(top_k=5)"] = lambda: topk.update(ts, ty)
        candidates["torchmetrics MulticlassCalibrationError"] = lambda: calibration.update(ts, ty)
    with torch.inference_mode():
        if classes <= 100:
            result = single_calls(candidates, calls=200 * repeats, per_sample=10)
            result["metricstream update, one call a sample"] = single_calls(
                {"one": candidates["metricstream update (all views)"]}, calls=100 * repeats
            )["one"]
            result["metricstream update, cold cache"] = cold_update(
                lambda: acc.update(y, scores), calls=20 * repeats
            )
            result["torchmetrics MulticlassAUROC(thresholds=100), cold cache"] = cold_update(
                lambda: auroc100.update(ts, ty), calls=20 * repeats
            )
        else:  # torchmetrics takes a quarter of a second per call here
            result = single_calls(candidates, calls=4 * repeats, block=2)
    return result


def single_calls(
    candidates: dict[str, Callable[[], object]],
    calls: int,
    block: int = 100,
    clock: Callable[[], float] = time.thread_time,
    per_sample: int = 1,
) -> dict[str, float]:
    """Median seconds of a call, each candidate called ``block`` times in a row, the
    candidates taking turns block by block; each sample times ``per_sample`` calls in a row.

    On this shared machine (load average 7-9 on 2 cores) a process is descheduled for
    milliseconds now and then: the mean over a block of 15 us calls came out 57 us while
    the median single call was 15 us (p99 35 us), and a 1.5 ms call measured 4-12 ms of wall
    time. So calls are timed in CPU time of the calling thread (``time.thread_time``; torch
    runs on one thread here) and the median is reported: it measures the work. Reading that
    clock costs about 0.3 us (a system call): a sample of one call of a few microseconds
    includes about 0.6 us of clock (see :func:`clock_cost`), so short calls are timed
    ``per_sample`` at a time.
    Calls in a row keep each candidate's state in cache, as in a loop that only updates
    metrics; a training step between updates evicts it (see ``cold`` in the output).
    """
    samples: dict[str, list[float]] = {name: [] for name in candidates}
    for function in candidates.values():
        function()
    for _ in range(max(1, calls // block)):
        for name, function in candidates.items():
            for _ in range(max(1, block // per_sample)):
                start = clock()
                for _ in range(per_sample):
                    function()
                samples[name].append((clock() - start) / per_sample)
    return {name: float(np.median(values)) for name, values in samples.items()}


def clock_cost(samples: int = 20_000) -> float:
    """Median seconds a one-call sample of a call that does nothing measures (the clock)."""
    clock = time.thread_time
    times = []
    for _ in range(samples):
        start = clock()
        times.append(clock() - start)
    return float(np.median(times))


def cold_update(update: Callable[[], object], calls: int = 200) -> float:
    """Median update after 64 MiB of other memory traffic (a stand-in for a training step)."""
    junk = np.ones(8 << 20)
    clock = time.thread_time
    times = []
    for _ in range(calls):
        junk += 1.0
        start = clock()
        update()
        times.append(clock() - start)
    return float(np.median(times))


def bench_large(repeats: int, rows: int = 1_000_000, classes: int = 10) -> dict[str, float]:
    """CPU time of the calling thread, then wall time (process-wide CPU time equals the
    thread's: counting runs on the calling thread)."""
    y, scores = _batch(rows, classes, seed=1)
    acc = ScoreAccumulator("multiclass", classes)
    candidates: dict[str, Callable[[], object]] = {
        "metricstream update": lambda: acc.update(y, scores),
        "read-only pass (np.max)": lambda: np.max(scores),
        "read-only pass (np.sum)": lambda: np.sum(scores),
    }
    result = single_calls(candidates, calls=3 * repeats, block=1)
    wall = single_calls(candidates, calls=3 * repeats, block=1, clock=time.perf_counter)
    result.update({f"{name}, wall": seconds for name, seconds in wall.items()})
    return result


def bench_memory(total_scores: float) -> tuple[float, float]:
    """tracemalloc peak (MiB) streaming ``total_scores`` 10-class scores, and at a tenth."""
    y, scores = _batch(100_000, 10, seed=2)
    peaks = []
    for total in (total_scores / 10, total_scores):
        acc = ScoreAccumulator("multiclass", 10)
        acc.update(y, scores)  # compile and allocate before measuring
        tracemalloc.start()
        for _ in range(int(total // scores.size)):
            acc.update(y, scores)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        peaks.append(peak / 2**20)
        state = sum(a.nbytes for a in acc.state_arrays().values()) / 2**20
    print(f"state arrays: {state:.1f} MiB (10 classes x {acc.num_bins} bins)")
    return peaks[0], peaks[1]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--only",
        nargs="*",
        default=None,
        choices=["update", "update_k1000", "large", "memory", "accuracy"],
    )
    args = parser.parse_args(argv)
    cases = args.only or ["update", "update_k1000", "large", "memory", "accuracy"]
    repeats = 5 if args.quick else 15
    print(f"load average: {', '.join(f'{v:.2f}' for v in os.getloadavg())}")
    print(f"CPU: {cpu_description()}")
    print(f"clock (time.thread_time) read twice: {clock_cost() * 1e6:.2f} us")
    if "update" in cases:
        times = bench_update(10, repeats)
        _print_times(
            "## one update, 256 x 10 float32 probabilities (and logits)",
            times,
            "metricstream update (all views)",
        )
    if "update_k1000" in cases:
        times = bench_update(1000, max(3, repeats // 3))
        _print_times(
            "## one update, 256 x 1000 float32 probabilities (and logits)",
            times,
            "metricstream update (all views)",
        )
    if "large" in cases:
        times = bench_large(max(3, repeats // 3))
        _print_times("## one update, 10^6 x 10 float32 probabilities", times, "metricstream update")
    if "memory" in cases:
        total = 1e7 if args.quick else 1e8
        small, large = bench_memory(total)
        print(
            f"\n## memory: tracemalloc peak {small:.2f} MiB over {total / 10:.0e} scores, "
            f"{large:.2f} MiB over {total:.0e} scores"
        )
    if "accuracy" in cases:
        print_accuracy(accuracy_rows())


def _print_times(title: str, times: dict[str, float], mine: str) -> None:
    print(f"\n{title}")
    for name, seconds in times.items():
        reference = mine
        for variant in ("cold cache", "logits"):  # compared with the same kind of update
            if name.endswith(f", {variant}") and f"{mine}, {variant}" in times:
                reference = f"{mine}, {variant}"
        base = times[reference]
        ratio = "" if name == reference else f"  ({seconds / base:,.0f}x metricstream)"
        if name.startswith("read-only"):
            own = f"{mine}, wall" if name.endswith(", wall") else mine
            ratio = f"  (metricstream = {times[own] / seconds:.2f}x this)"
        elif name == f"{mine}, wall":
            ratio = ""
        print(f"  {name:56} {_format(seconds):>10}{ratio}")


def _format(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} us"
    if seconds < 1:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"


if __name__ == "__main__":
    main()
