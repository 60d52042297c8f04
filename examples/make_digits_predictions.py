"""Regenerate ``examples/data/digits_predictions.csv``: real predictions on scikit-learn's digits.

A logistic-regression classifier is trained on half of the 8×8 handwritten digits bundled with
scikit-learn and predicts the other half. The CSV ships with the project so that the README's main
command needs no scikit-learn; run this script (``pip install scikit-learn``) to rebuild it.

It also writes ``examples/data/digits_named.csv``: the same predictions with the digits spelled
out (``zero`` … ``nine``), for reports over text labels.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from sklearn.datasets import load_digits
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

OUT = Path(__file__).parent / "data" / "digits_predictions.csv"
OUT_NAMED = Path(__file__).parent / "data" / "digits_named.csv"
NAMES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]


def main() -> None:
    digits = load_digits()
    x_train, x_test, y_train, y_test = train_test_split(
        digits.data, digits.target, test_size=0.5, random_state=0, stratify=digits.target
    )
    # A deliberately small model (few iterations, strong regularisation) so that the report shows
    # real confusions rather than a near-perfect diagonal.
    model = make_pipeline(StandardScaler(), LogisticRegression(C=0.002, max_iter=200))
    model.fit(x_train, y_train)
    predicted = model.predict(x_test)
    confidence = model.predict_proba(x_test).max(axis=1)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    rows = np.column_stack([y_test, predicted, np.round(confidence, 4)])
    np.savetxt(
        OUT,
        rows,
        delimiter=",",
        header="y_true,y_pred,confidence",
        comments="",
        fmt=["%d", "%d", "%.4f"],
    )
    print(f"wrote {OUT} ({len(y_test)} rows, accuracy {np.mean(predicted == y_test):.4f})")
    with open(OUT_NAMED, "w", encoding="utf-8") as file:
        file.write("y_true,y_pred,confidence\n")
        for true, pred, conf in zip(y_test, predicted, confidence, strict=True):
            file.write(f"{NAMES[true]},{NAMES[pred]},{conf:.4f}\n")
    print(f"wrote {OUT_NAMED} (the same predictions, digits spelled out)")


if __name__ == "__main__":
    main()
