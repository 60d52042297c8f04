"""Semantic segmentation: dataset-level and per-image IoU, Dice and accuracy in one pass.

>>> import numpy as np
>>> from metricstream.segmentation import SegmentationAccumulator
>>> acc = SegmentationAccumulator(num_classes=3, ignore_index=255)
>>> truth = np.array([[[0, 1], [2, 255]], [[0, 0], [0, 1]]], dtype=np.uint8)
>>> pred = np.array([[[0, 1], [1, 0]], [[0, 0], [0, 1]]], dtype=np.uint8)
>>> round(acc.update(truth, pred).iou("dataset"), 4), round(acc.iou("image"), 4)
(0.5556, 0.75)
"""

from .absent import ANCHORS, RULES, AbsentRule, reproduce
from .accumulator import SegmentationAccumulator

__all__ = ["ANCHORS", "RULES", "AbsentRule", "SegmentationAccumulator", "reproduce"]
