"""Evaluate a CSV of predictions in streaming batches (the README's main job).

Usage: python examples/evaluate_predictions.py [examples/data/digits_predictions.csv]

The file needs ``y_true`` and ``y_pred`` integer columns. Rows are read in batches and fed to one
accumulator, as a training or evaluation loop would.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from metricstream import ConfusionAccumulator

DEFAULT = Path(__file__).parent / "data" / "digits_predictions.csv"


def main(path: Path, batch_size: int = 256) -> None:
    table = np.loadtxt(path, delimiter=",", skiprows=1, usecols=(0, 1), dtype=np.int64)
    num_classes = int(table.max()) + 1
    acc = ConfusionAccumulator(num_classes=num_classes)
    for start in range(0, len(table), batch_size):
        batch = table[start : start + batch_size]
        running = acc.update(batch[:, 0], batch[:, 1]).accuracy()
        print(f"after {acc.num_samples:5d} samples: running accuracy {running:.4f}")
    print()
    print(f"samples            {acc.num_samples}")
    print(f"accuracy (OA)      {acc.accuracy():.4f}")
    print(f"balanced acc. (AA) {acc.balanced_accuracy():.4f}")
    print(f"macro F1           {acc.f1(average='macro'):.4f}")
    print(f"weighted F1        {acc.f1(average='weighted'):.4f}")
    print(f"mIoU               {acc.miou():.4f}")
    print(f"Cohen's kappa      {acc.cohen_kappa():.4f}")
    print(f"MCC                {acc.matthews_corrcoef():.4f}")
    print()
    print("class  precision  recall  f1      IoU     support")
    for label, (p, r, f, j, s) in enumerate(
        zip(acc.precision(), acc.recall(), acc.f1(), acc.jaccard(), acc.support())
    ):
        print(f"{label:5d}  {p:9.4f}  {r:6.4f}  {f:6.4f}  {j:6.4f}  {s:7d}")
    print()
    print("confusion matrix (rows true, columns predicted):")
    print(acc.matrix)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT)
