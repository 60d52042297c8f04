"""Regenerate ``examples/data/digits_scores.csv``: real predicted probabilities on scikit-learn's
digits, for the score metrics (ROC/PR curves, AUROC, average precision, calibration, top-k).

The same classifier and split as ``make_digits_predictions.py`` (a small logistic regression
trained on half of the 8x8 digits, predicting the other half): column ``y_true`` holds the true
digit and ``p_0`` ... ``p_9`` the predicted probabilities, written as float32 values with 9
significant digits (they read back bit-exactly). Run it with scikit-learn installed::

    python examples/make_digits_scores.py
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from sklearn.datasets import load_digits
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

OUT = Path(__file__).parent / "data" / "digits_scores.csv"


def main() -> None:
    digits = load_digits()
    x_train, x_test, y_train, y_test = train_test_split(
        digits.data, digits.target, test_size=0.5, random_state=0, stratify=digits.target
    )
    model = make_pipeline(StandardScaler(), LogisticRegression(C=0.002, max_iter=200))
    model.fit(x_train, y_train)
    probabilities = model.predict_proba(x_test).astype(np.float32)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    header = "y_true," + ",".join(f"p_{digit}" for digit in range(10))
    with open(OUT, "w", encoding="utf-8") as file:
        file.write(header + "\n")
        for label, row in zip(y_test, probabilities, strict=True):
            file.write(f"{label}," + ",".join(f"{value:.9g}" for value in row.tolist()) + "\n")
    back = np.loadtxt(OUT, delimiter=",", skiprows=1, usecols=range(1, 11), dtype=np.float32)
    assert np.array_equal(back, probabilities), "float32 values must read back exactly"
    print(f"wrote {OUT} ({len(y_test)} rows, {OUT.stat().st_size / 1024:.0f} KiB)")


if __name__ == "__main__":
    main()
