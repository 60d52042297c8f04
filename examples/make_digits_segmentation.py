"""Regenerate ``examples/data/digits_segmentation.npz``: a small real segmentation task.

Scenes are 2×2 mosaics of scikit-learn's 8×8 handwritten digits (16×16 pixels). Every pixel is
labelled: ``0`` background (no ink), ``d + 1`` for a stroke pixel of digit ``d`` (ink >= 4 of 16),
and ``255`` (void) for the faint pixels in between, whose class is ambiguous, the way VOC marks
object borders void.

The segmenter is a per-pixel multinomial logistic regression on the 7×7 neighbourhood of each
pixel and its position within its tile (a one-layer "fully convolutional" model with a 7×7
receptive field). It is trained on mosaics of the training half of the digits and predicts the
test half, so it sees strokes but never a whole digit: it finds the ink well and confuses digits
whose strokes look alike, which is what the report and the plot show.

Arrays written: ``y_true`` and ``y_pred`` (uint8, shape ``(scenes, 16, 16)``) and
``class_names`` (``background``, ``0`` … ``9``). Run ``pip install scikit-learn`` and this script
to rebuild the file.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from sklearn.datasets import load_digits
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

OUT = Path(__file__).parent / "data" / "digits_segmentation.npz"
VOID = 255
INK = 4  # ink (0..16) from which a pixel is a stroke; 1..INK-1 is void, 0 background
RADIUS = 3  # 7×7 neighbourhood
CLASS_NAMES = ["background"] + [str(d) for d in range(10)]


def mosaics(images: np.ndarray, targets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Tile consecutive groups of four 8×8 digits into 16×16 scenes, with per-pixel labels."""
    count = len(images) // 4
    images, targets = images[: 4 * count], targets[: 4 * count]
    labels = np.where(images >= INK, targets[:, None, None] + 1, 0)
    labels = np.where((images > 0) & (images < INK), VOID, labels)

    def tile(tiles: np.ndarray) -> np.ndarray:
        grid = tiles.reshape(count, 2, 2, 8, 8)
        return grid.transpose(0, 1, 3, 2, 4).reshape(count, 16, 16)

    return tile(images), tile(labels).astype(np.uint8)


def features(scenes: np.ndarray) -> np.ndarray:
    """Per pixel: its 7×7 neighbourhood (zero padded) and its row and column within its tile."""
    count, height, width = scenes.shape
    padded = np.pad(scenes, ((0, 0), (RADIUS, RADIUS), (RADIUS, RADIUS)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (2 * RADIUS + 1,) * 2, axis=(1, 2))
    patches = windows.reshape(count * height * width, -1)
    rows, cols = np.meshgrid(np.arange(height) % 8, np.arange(width) % 8, indexing="ij")
    position = np.broadcast_to(np.stack([rows, cols], axis=-1), (count, height, width, 2))
    return np.hstack([patches, position.reshape(-1, 2)]).astype(np.float64)


def main() -> None:
    digits = load_digits()
    # The split of make_digits_predictions.py: the test scenes are made of its test digits.
    train_images, test_images, train_targets, test_targets = train_test_split(
        digits.images, digits.target, test_size=0.5, random_state=0, stratify=digits.target
    )
    train_scenes, train_labels = mosaics(train_images, train_targets)
    test_scenes, test_labels = mosaics(test_images, test_targets)

    x_train, y_train = features(train_scenes), train_labels.reshape(-1)
    keep = y_train != VOID  # void pixels carry no label to learn from
    model = make_pipeline(StandardScaler(), LogisticRegression(C=0.05, max_iter=300))
    model.fit(x_train[keep], y_train[keep])
    predicted = model.predict(features(test_scenes)).reshape(test_labels.shape).astype(np.uint8)

    OUT.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(
        OUT, y_true=test_labels, y_pred=predicted, class_names=np.array(CLASS_NAMES)
    )
    valid = test_labels != VOID
    accuracy = np.mean(predicted[valid] == test_labels[valid])
    print(
        f"wrote {OUT} ({test_labels.shape[0]} scenes of 16×16, {valid.sum()} labelled pixels, "
        f"{(~valid).sum()} void; pixel accuracy {accuracy:.4f})"
    )


if __name__ == "__main__":
    main()
