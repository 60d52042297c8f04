"""Coverage study of metricstream's confidence intervals (a report, not a timed test).

``python -m benchmarks.coverage_study [--repetitions 1000] [--resamples 1000] [--json FILE]``

``python -m benchmarks.coverage_study --sweep 50 100 200 400 1000`` instead measures the
clustered accumulator alone at several B (the replicates of a smaller B are the first ones of a
larger B, so one accumulator of the largest B serves every column); this is how its default B
was chosen.

Simulated segmentation streams with a known population confusion distribution: each stream is
``--images`` images of ``--pixels`` pixels. Every image has a class mix ``π`` and an accuracy
``a``; a pixel of class ``i`` is predicted ``i`` with probability ``a`` and otherwise class
``j`` with probability ``Q_ij`` (confusions between neighbouring classes are likelier). So an
image's expected confusion matrix is ``P_ij = π_i (a [i = j] + (1 - a) Q_ij)``.

* **i.i.d.**: every image has the same ``π`` and ``a``: the pixels are independent draws from
  one distribution ``P``.
* **clustered**: each image draws its own ``π ~ Dirichlet`` and ``a ~ Beta(8, 2)``
  (independently): pixels of one image share their image's difficulty and class mix, as real
  masks do.

The estimand is the metric of the population matrix ``E[P]`` (what the pooled matrix of an
infinite stream converges to), known in closed form: ``E[P]_ij = E[π_i] (E[a] [i = j] +
(1 - E[a]) Q_ij)``. For each repetition we count one stream and ask every method for a nominal
95% interval of accuracy, macro F1, mIoU, MCC and Cohen's kappa, and count how often it
contains the truth. With 1,000 repetitions the Monte-Carlo standard error of a 95% coverage is
0.7 points, so 93.5–96.5% is "nominal within noise".

Methods: the read-time bootstrap of the matrix (percentile and BCa, multinomial resampling),
the delta method, and the clustered accumulator (one cluster per image, percentile).
"""

from __future__ import annotations

import argparse
import json
import os
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from metricstream import metrics
from metricstream.bootstrap import bootstrap, delta_method, interval_from_replicates
from metricstream.clustered import BootstrapConfusionAccumulator

K = 5
METRICS: dict[str, tuple[str, dict[str, Any], Callable[[np.ndarray], float]]] = {
    "accuracy": ("accuracy", {}, lambda p: metrics.accuracy(p)),
    "macro F1": ("macro_f1", {}, lambda p: metrics.f1(p, average="macro")),
    "mIoU": ("miou", {}, lambda p: metrics.miou(p)),
    "MCC": ("mcc", {}, lambda p: metrics.matthews_corrcoef(p)),
    "kappa": ("kappa", {}, lambda p: metrics.cohen_kappa(p)),
}
METHODS = ("bootstrap percentile", "bootstrap BCa", "delta", "clustered percentile")

# Population: class mix, accuracy, and where errors go.
BASE_MIX = np.array([0.4, 0.25, 0.15, 0.12, 0.08])
MIX_CONCENTRATION = 15.0  # Dirichlet(15 * BASE_MIX) per image in the clustered scenario
ACCURACY_BETA = (8.0, 2.0)  # mean 0.8
_distance = np.abs(np.arange(K)[:, None] - np.arange(K)[None, :])
Q = np.where(_distance == 0, 0.0, 1.0 / np.maximum(_distance, 1))
Q /= Q.sum(axis=1, keepdims=True)


def population() -> np.ndarray:
    """``E[P]``: the same in both scenarios (the clustered draws have these means)."""
    mean_accuracy = ACCURACY_BETA[0] / sum(ACCURACY_BETA)
    return BASE_MIX[:, None] * (mean_accuracy * np.eye(K) + (1 - mean_accuracy) * Q)


def simulate(
    rng: np.random.Generator, clustered: bool, images: int, pixels: int
) -> tuple[np.ndarray, np.ndarray]:
    """``(y_true, y_pred)`` of shape ``(images, pixels)``."""
    if clustered:
        mix = rng.dirichlet(MIX_CONCENTRATION * BASE_MIX, size=images)
        accuracy = rng.beta(*ACCURACY_BETA, size=images)
    else:
        mix = np.broadcast_to(BASE_MIX, (images, K))
        accuracy = np.full(images, ACCURACY_BETA[0] / sum(ACCURACY_BETA))
    p = mix[:, :, None] * (accuracy[:, None, None] * np.eye(K) + (1 - accuracy[:, None, None]) * Q)
    counts = rng.multinomial(pixels, p.reshape(images, K * K))
    cells = np.repeat(np.tile(np.arange(K * K), images), counts.reshape(-1))
    cells = cells.reshape(images, pixels)
    return cells // K, cells % K


def one_repetition(
    rep: int, clustered: bool, images: int, pixels: int, resamples: int, truth: dict[str, float]
) -> dict[str, dict[str, tuple[bool, float]]]:
    rng = np.random.default_rng([rep, int(clustered)])
    y_true, y_pred = simulate(rng, clustered, images, pixels)
    acc = BootstrapConfusionAccumulator(K, n_resamples=resamples, seed=rep)
    acc.update(y_true, y_pred, cluster_ids=np.arange(images))
    matrix = acc.matrix
    out: dict[str, dict[str, tuple[bool, float]]] = {}
    for name, (metric, kwargs, _) in METRICS.items():
        results = {
            "bootstrap percentile": bootstrap(
                matrix, metric, n_resamples=resamples, seed=rep, **kwargs
            ),
            "bootstrap BCa": bootstrap(
                matrix, metric, n_resamples=resamples, seed=rep, method="bca", **kwargs
            ),
            "delta": delta_method(matrix, metric, **kwargs),
            "clustered percentile": acc.interval(metric, **kwargs),
        }
        out[name] = {
            method: (bool(r.low <= truth[name] <= r.high), float(r.high - r.low))
            for method, r in results.items()
        }
    return out


def run(
    repetitions: int, resamples: int, images: int, pixels: int, scenarios: list[str]
) -> dict[str, Any]:
    p = population()
    truth = {name: float(fn(p)) for name, (_, _, fn) in METRICS.items()}
    report: dict[str, Any] = {
        "repetitions": repetitions,
        "resamples": resamples,
        "images": images,
        "pixels": pixels,
        "truth": truth,
        "coverage": {},
        "width": {},
    }
    for scenario in scenarios:
        clustered = scenario == "clustered"
        hits = {m: {method: 0 for method in METHODS} for m in METRICS}
        widths = {m: {method: 0.0 for method in METHODS} for m in METRICS}
        start = time.perf_counter()
        for rep in range(repetitions):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                result = one_repetition(rep, clustered, images, pixels, resamples, truth)
            for name, by_method in result.items():
                for method, (hit, width) in by_method.items():
                    hits[name][method] += hit
                    widths[name][method] += width / repetitions
        report["coverage"][scenario] = {
            m: {k: v / repetitions for k, v in row.items()} for m, row in hits.items()
        }
        report["width"][scenario] = widths
        report.setdefault("seconds", {})[scenario] = time.perf_counter() - start
    return report


def sweep(
    repetitions: int, sizes: list[int], images: int, pixels: int, scenarios: list[str]
) -> dict[str, Any]:
    """Coverage of the clustered accumulator's percentile intervals for each B in ``sizes``."""
    p = population()
    truth = {name: float(fn(p)) for name, (_, _, fn) in METRICS.items()}
    largest = max(sizes)
    report: dict[str, Any] = {
        "repetitions": repetitions,
        "sizes": sizes,
        "images": images,
        "pixels": pixels,
        "coverage": {},
        "seconds": {},
    }
    for scenario in scenarios:
        clustered = scenario == "clustered"
        hits = {m: dict.fromkeys(sizes, 0) for m in METRICS}
        start = time.perf_counter()
        for rep in range(repetitions):
            rng = np.random.default_rng([rep, int(clustered)])
            y_true, y_pred = simulate(rng, clustered, images, pixels)
            acc = BootstrapConfusionAccumulator(K, n_resamples=largest, seed=rep)
            acc.update(y_true, y_pred, cluster_ids=np.arange(images))
            matrix, replicates = acc.matrix, acc.replicates
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                for name, (metric, kwargs, _) in METRICS.items():
                    for b in sizes:
                        r = interval_from_replicates(matrix, replicates[:b], metric, **kwargs)
                        hits[name][b] += bool(r.low <= truth[name] <= r.high)
        report["coverage"][scenario] = {
            m: {b: v / repetitions for b, v in row.items()} for m, row in hits.items()
        }
        report["seconds"][scenario] = time.perf_counter() - start
    return report


def sweep_markdown(report: dict[str, Any]) -> str:
    sizes = report["sizes"]
    lines = [
        f"Clustered accumulator, nominal 95% percentile intervals; {report['repetitions']} "
        f"repetitions of {report['images']} images × {report['pixels']} pixels (K = {K}). "
        f"Coverage in % by B.",
        "",
        "| data | metric | " + " | ".join(f"B = {b}" for b in sizes) + " |",
        "|---|---" + "|---" * len(sizes) + "|",
    ]
    for scenario, rows in report["coverage"].items():
        for name, row in rows.items():
            cells = [f"{100 * row[b]:.1f}" for b in sizes]
            lines.append(f"| {scenario} | {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def markdown(report: dict[str, Any]) -> str:
    lines = [
        f"Nominal 95% intervals; {report['repetitions']} repetitions of a stream of "
        f"{report['images']} images × {report['pixels']} pixels (K = {K}); "
        f"B = {report['resamples']}. Coverage in % (mean interval width).",
        "",
        "| data | metric | truth | " + " | ".join(METHODS) + " |",
        "|---|---|---" + "|---" * len(METHODS) + "|",
    ]
    for scenario, rows in report["coverage"].items():
        for name, row in rows.items():
            cells = [
                f"{100 * row[m]:.1f} ({report['width'][scenario][name][m]:.4f})" for m in METHODS
            ]
            lines.append(
                f"| {scenario} | {name} | {report['truth'][name]:.4f} | " + " | ".join(cells) + " |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repetitions", type=int, default=1000)
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--images", type=int, default=200)
    parser.add_argument("--pixels", type=int, default=256)
    parser.add_argument(
        "--scenarios", nargs="+", default=["i.i.d.", "clustered"], choices=["i.i.d.", "clustered"]
    )
    parser.add_argument(
        "--sweep",
        nargs="+",
        type=int,
        metavar="B",
        help="measure only the clustered accumulator, at each of these B",
    )
    parser.add_argument("--json", help="also write the results as JSON to this file")
    args = parser.parse_args(argv)
    if args.sweep:
        report = sweep(args.repetitions, args.sweep, args.images, args.pixels, args.scenarios)
        print(sweep_markdown(report))
    else:
        report = run(args.repetitions, args.resamples, args.images, args.pixels, args.scenarios)
        print(markdown(report))
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    seconds = ", ".join(f"{k}: {v:.0f} s" for k, v in report["seconds"].items())
    print(f"\n({seconds}; load average {load:.1f})")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(report, handle, indent=2)


if __name__ == "__main__":
    main()
