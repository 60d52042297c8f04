"""Score binning: how a :class:`~metricstream.ScoreAccumulator` turns a score into a bin, and
what each bin stands for.

A :class:`ScoreBinning` is either a *key layout* (the low bits dropped from a score's float32
key per range of magnitudes, ``key_shifts``, within a budget of ``bins``; see
:mod:`metricstream.scores._kernels`) or *explicit thresholds* ``t_1 < ... < t_m`` (bin ``j``
holds ``t_j <= score < t_{j+1}``). It answers the questions the accumulator, its kernels'
callers, the reports and the plots ask of the bins: how many there are (:attr:`num_bins`), the
kernels' layout code (:attr:`shift`), the bin of a threshold (:meth:`index`), the value each bin
stands for (:meth:`values`), the lowest score of each bin (:meth:`edges`), the threshold a
curve reports for a bin (:meth:`reported_thresholds`) and which bins may hold several values
(:meth:`spread`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._core import flags as _flags
from . import _firstuse  # (the layouts in Python: the kernels' are not cached)
from . import _kernels as _k

__all__ = ["ScoreBinning"]

DEFAULT_BINS = 65536
# At many classes the default bins shrink so that the histograms stay near 64 MB.
DEFAULT_MAX_CELLS = 1 << 22
MIN_BINS = 16
MAX_BINS = 1 << 24


@dataclass(frozen=True, eq=False)
class ScoreBinning:
    """The bins of a score accumulator: a key layout or explicit thresholds.

    Made by :meth:`create` (which checks the arguments as ``ScoreAccumulator`` takes them);
    immutable. ``logit_keys``: scores are keyed over the whole float range (binary and
    multilabel logits) rather than as probabilities in ``[0, 1]`` (probabilities, and
    multiclass logits through their softmax).

    Example:
        >>> binning = ScoreBinning.create(num_classes=1, logit_keys=False)
        >>> binning.num_bins, binning.key_shifts
        (41347, (16, 13, 14))
        >>> edges = ScoreBinning.create(num_classes=1, thresholds=[0.25, 0.5, 0.75])
        >>> edges.num_bins, edges.index(0.5), edges.values().tolist()
        (4, 2, [-inf, 0.25, 0.5, 0.75])
    """

    logit_keys: bool
    #: the budget of key bins (a power of two), None with explicit thresholds
    bins: int | None
    #: the key layout (see ``ScoreAccumulator``'s ``key_shifts``), None with thresholds
    key_shifts: tuple[int, ...] | None
    #: the explicit thresholds (float64, increasing), or None
    thresholds: np.ndarray | None
    #: bins per class
    num_bins: int
    #: the kernels' layout code of ``key_shifts`` (0 with thresholds)
    shift: int
    _cache: dict[str, np.ndarray] = field(default_factory=dict, repr=False)

    @classmethod
    def create(
        cls,
        *,
        num_classes: int,
        logit_keys: bool = False,
        bins: int | None = None,
        thresholds: Any = None,
        key_shifts: Any = None,
    ) -> ScoreBinning:
        """Check and complete the binning arguments of a ``ScoreAccumulator`` of
        ``num_classes`` curves: ``bins`` defaults to 65,536 (fewer at many classes, keeping
        ``num_classes * bins <= 2**22``) and ``key_shifts`` to the finest layout that fits.

        Raises:
            ValueError: ``bins`` not a power of two in [16, 2**24], ``thresholds`` not finite
                and strictly increasing (or outside [0, 1] for probabilities), both given,
                ``key_shifts`` malformed or making more bins than ``bins``.
        """
        array = _check_thresholds(thresholds, bins, logit_keys)
        if array is not None:
            if key_shifts is not None:
                raise ValueError("`key_shifts` does not apply to explicit `thresholds`.")
            array.setflags(write=False)
            return cls(logit_keys, None, None, array, array.shape[0] + 1, 0)
        budget = _check_bins(bins, num_classes)
        shifts = _check_key_shifts(key_shifts, budget, logit_keys)
        code = (_logit_code if logit_keys else _probability_code)(shifts)
        return cls(logit_keys, budget, shifts, None, _key_bins(shifts, logit_keys), code)

    def index(self, threshold: float) -> int:
        """The bin of ``threshold``: the samples in bins ``>= index(threshold)`` are those
        with ``score >= threshold`` when ``threshold`` is a bin value (:meth:`values`) or a
        threshold a curve reported (:meth:`reported_thresholds`)."""
        value = float(threshold)
        if math.isnan(value):
            raise ValueError("`threshold` is NaN.")
        if self.thresholds is None and not self.logit_keys:
            if value <= 0.0:
                return 0
            if value > 1.0:
                return self.num_bins
        if _flags.PLAIN_KERNELS:
            return int(_k.plain().bin_index(value, self.shift, self.thresholds, self.logit_keys))
        return _firstuse.bin_index(value, self.shift, self.thresholds, self.logit_keys)

    def values(self) -> np.ndarray:
        """The value each bin stands for, ascending (a copy): the scores of the bin's kept bits,
        rounded toward zero for logits and toward 0 or 1 (whichever is nearer) for
        probabilities; NaN for bins no score can reach; ``[-inf, t_1, ..., t_m]`` with explicit
        thresholds."""
        if "values" not in self._cache:
            self._cache["values"] = _bin_values(self.shift, self.thresholds, self.logit_keys)
        return self._cache["values"].copy()

    def edges(self) -> np.ndarray:
        """Each key bin's lower edge (a copy): the lowest float64 score that falls in it, so
        that ``score >= edges[b]`` holds exactly for the scores of bins ``>= b``; NaN for bins
        no score can reach. With explicit thresholds, :meth:`values`."""
        if self.thresholds is not None:
            return self.values()
        if "edges" not in self._cache:
            self._cache["edges"] = _bin_edges(self.shift, self.logit_keys)
        return self._cache["edges"].copy()

    def reported_thresholds(self, exact: bool) -> np.ndarray:
        """The threshold each bin reports: its value for a class whose every score was its
        bin's value (``exact``: as scikit-learn reports the score), else the bin's lower
        edge; either way ``score >= threshold`` on the raw scores selects exactly the samples
        of that bin and those above it."""
        return self.values() if exact else self.edges()

    def spread(self) -> np.ndarray:
        """Bins that may hold several values: all but the bins of p = 0 and p = 1."""
        spread = np.ones(self.num_bins, dtype=bool)
        if self.thresholds is None and not self.logit_keys:
            spread[0] = spread[-1] = False
        return spread

    def config(self) -> dict[str, Any]:
        """The binning entries of an accumulator's configuration."""
        return {
            "bins": self.bins,
            "thresholds": None if self.thresholds is None else self.thresholds.tolist(),
            "key_shifts": None if self.key_shifts is None else list(self.key_shifts),
        }


# ---------------------------------------------------------------------- checks and layouts
def _check_bins(bins: int | None, num_classes: int) -> int:
    if bins is None:
        bins = DEFAULT_BINS
        while bins > MIN_BINS and num_classes * bins > DEFAULT_MAX_CELLS:
            bins //= 2
        return bins
    if (
        isinstance(bins, bool)
        or not isinstance(bins, (int, np.integer))
        or not MIN_BINS <= bins <= MAX_BINS
        or bins & (bins - 1)
    ):
        raise ValueError(
            f"`bins` must be a power of two from {MIN_BINS} to 2**24 (65536 keeps every "
            f"bfloat16 value apart), got {bins!r}."
        )
    return int(bins)


def _key_bins(key_shifts: tuple[int, ...], logits: bool) -> int:
    """Bins of a key layout."""
    if logits:
        return 2 * int(_firstuse.logit_layout(_logit_code(key_shifts))[3])
    return int(_firstuse.probability_key_layout(_probability_code(key_shifts))[1]) + 1


def _probability_code(key_shifts: tuple[int, ...]) -> int:
    coarse, fine, complement = key_shifts
    if coarse == fine == complement:
        return fine
    return fine + 32 * coarse + 1024 * complement


def _logit_code(key_shifts: tuple[int, ...]) -> int:
    outer, middle, fine = key_shifts
    if outer == middle == fine:
        return fine
    return fine + 32 * middle + 1024 * outer


def _default_key_shifts(bins: int, logits: bool) -> tuple[int, ...]:
    """The finest key that fits a budget of ``bins`` (a power of two).

    Probabilities ``(coarse, fine, complement)`` start from ``(16, 13, 14)``: 41,347 bins of
    65,536, every float16 and bfloat16 probability in a bin of its own. Logits ``(outer,
    middle, fine)`` start from ``(19, 16, 13)``: 11 significant bits for ``2**-6 <= |x| <
    2**7``, 8 (bfloat16) out to ``2**-64`` and ``2**64``, 5 beyond, in 60,160 bins. Each halving
    of the budget drops one more bit everywhere; below the smallest budget that fits, the same
    bits everywhere."""
    step = 16 - int(bins).bit_length() + 1
    start = (19, 16, 13) if logits else (16, 13, 14)
    shifts = tuple(shift + step for shift in start)
    if max(shifts) <= 23 and min(shifts) >= 1 and _key_bins(shifts, logits) <= bins:
        return shifts
    if logits:
        shift = 32 - int(bins).bit_length() + 1
        return shift, shift, shift
    shift = 1
    while _key_bins((shift, shift, shift), False) > bins:
        shift += 1
    return shift, shift, shift


def _check_key_shifts(key_shifts: Any, bins: int, logits: bool) -> tuple[int, ...]:
    if key_shifts is None:
        return _default_key_shifts(bins, logits)
    names = "(outer, middle, fine)" if logits else "(coarse, fine, complement)"
    triple = tuple(key_shifts) if isinstance(key_shifts, (list, tuple)) else ()
    if len(triple) != 3 or not all(
        isinstance(v, (int, np.integer)) and not isinstance(v, bool) and 1 <= v <= 31
        for v in triple
    ):
        raise ValueError(
            f"`key_shifts` must be None or 3 integers {names} in [1, 31], got {key_shifts!r}."
        )
    shifts = tuple(int(v) for v in triple)
    if len(set(shifts)) > 1:
        outer_first = shifts if logits else shifts[:2]
        if any(a < b for a, b in zip(outer_first[:-1], outer_first[1:], strict=True)):
            raise ValueError(
                f"`key_shifts` {names} must not keep more bits in an outer range than in an "
                f"inner one, got {key_shifts!r}."
            )
        if max(shifts) > 23:
            raise ValueError(
                f"`key_shifts` must be at most 23 (the ranges' edges are whole binades) "
                f"unless all equal, got {key_shifts!r}."
            )
    if _key_bins(shifts, logits) > bins:
        raise ValueError(
            f"`key_shifts` {key_shifts!r} make {_key_bins(shifts, logits)} bins, more "
            f"than `bins` = {bins}."
        )
    return shifts


def _check_thresholds(thresholds: Any, bins: Any, logit_keys: bool) -> np.ndarray | None:
    if thresholds is None:
        return None
    if bins is not None:
        raise ValueError("give `bins` or `thresholds`, not both.")
    array = np.asarray(thresholds, dtype=np.float64).reshape(-1)
    if array.size == 0 or not np.all(np.isfinite(array)) or np.any(np.diff(array) <= 0):
        raise ValueError(
            f"`thresholds` must be finite and strictly increasing, got {thresholds!r}."
        )
    if not logit_keys and (array[0] < 0.0 or array[-1] > 1.0):
        raise ValueError(
            f"`thresholds` apply to probabilities (multiclass logits: to their softmax) and "
            f"must lie in [0, 1], got {float(array[0] if array[0] < 0 else array[-1])!r}; for "
            f"thresholds on binary or multilabel logits create the accumulator with "
            f"`logits=True`."
        )
    return array


def _logit_bin_values(shift: int) -> np.ndarray:
    """Each logit bin's value: its magnitude rounded toward zero, with the bin's sign."""
    fine, middle, outer, half = (int(v) for v in _firstuse.logit_layout(shift))
    edges = np.array([0, 0x1F800000, 0x3C800000, 0x43000000, 0x5F800000], dtype=np.int64)
    shifts = np.array([outer, middle, fine, middle, outer], dtype=np.int64)
    if fine == outer:
        edges, shifts = edges[:1], shifts[:1]  # one region: edges may fall inside bins
    # the first bin of each region, then each bin's smallest magnitude
    firsts = np.r_[0, np.cumsum(np.diff(np.r_[edges, 1 << 31]) >> shifts)[:-1]]
    bins = np.arange(half, dtype=np.int64)
    region = np.searchsorted(firsts, bins, side="right") - 1
    magnitude = (edges[region] + ((bins - firsts[region]) << shifts[region])).astype(np.uint32)
    with np.errstate(invalid="ignore"):  # bins past infinity hold NaN patterns
        values = magnitude.view(np.float32).astype(np.float64)
    return np.r_[-values[::-1], values]


def _bin_values(shift: int, thresholds: np.ndarray | None, logits: bool) -> np.ndarray:
    """Each bin's value (see ``ScoreAccumulator.bin_values`` and ``_score_kernels``)."""
    if thresholds is not None:
        return np.r_[-np.inf, thresholds]
    if logits:
        return _logit_bin_values(shift)
    layout = [int(v) for v in _firstuse.key_layout(shift)]
    fine, tiny, coarse, offset, base, last, complement = (layout[i] for i in (0, 2, 3, 5, 6, 7, 8))
    # Bins 1 .. middle hold 0 < p < 1/2: the smallest bits ``t`` of each ``g(t)``.
    middle = last - 2 - ((0x3F000000 >> complement) - base)
    keys = np.arange(middle, dtype=np.int64)
    below = keys << np.int64(coarse)
    above = np.int64(tiny) + ((keys - offset) << np.int64(fine))
    lower = np.where(keys < offset, below, above).astype(np.uint32)
    # Bins middle + 1 .. last - 1 hold 1 - p from 1/2 down to 2**-24.
    complement_keys = last - 1 - np.arange(middle + 1, last, dtype=np.int64) + base
    upper = (complement_keys << np.int64(complement)).astype(np.uint32)
    values = np.r_[
        0.0,
        lower.view(np.float32).astype(np.float64),
        1.0 - upper.view(np.float32).astype(np.float64),
        1.0,
    ]
    # Bin 1 holds the smallest positive floats (0 has bin 0): its smallest is its value.
    values[1] = float(np.nextafter(np.float32(0), np.float32(1)))
    return values


def _lowest_rounding_to(f: np.ndarray) -> np.ndarray:
    """Per float32 ``f`` (not NaN), the smallest float64 whose float32 rounding (to nearest,
    ties to even) is ``f`` or above, ``-0.0`` counting as ``+0.0``: the midpoint between ``f``
    and the float32 below it when the tie rounds to ``f`` (its last significand bit is 0),
    else the float64 just above that midpoint."""
    f = np.asarray(f, dtype=np.float32)
    with np.errstate(over="ignore"):  # the float32 below -FLT_MAX is -inf
        below = np.nextafter(f, np.float32(-np.inf)).astype(np.float64)
    below[f == 0] = -(2.0**-149)  # the float32 below both zeros
    below[np.isneginf(below) & ~np.isneginf(f)] = -(2.0**128)  # past -FLT_MAX: -inf's edge
    wide = f.astype(np.float64)
    with np.errstate(invalid="ignore"):
        middle = (below + wide) / 2.0
    even = (f.view(np.uint32) & 1) == 0
    lowest = np.where(even, middle, np.nextafter(middle, np.inf))
    lowest[np.isneginf(f)] = -np.inf
    return lowest


def _bin_edges(shift: int, logit_keys: bool) -> np.ndarray:
    """Each key bin's lower edge: the lowest float64 score that falls in it (scores are
    rounded to float32 first), so that ``score >= edge[b]`` holds exactly for the scores of
    bins ``>= b``; NaN for bins no score can reach. Probabilities start at 0.0."""
    if logit_keys:
        fine, middle, outer, half = (int(v) for v in _firstuse.logit_layout(shift))
        # the smallest magnitude bits of each magnitude bin, as _logit_bin_values
        edges = np.array([0, 0x1F800000, 0x3C800000, 0x43000000, 0x5F800000], dtype=np.int64)
        shifts = np.array([outer, middle, fine, middle, outer], dtype=np.int64)
        if fine == outer:
            edges, shifts = edges[:1], shifts[:1]
        firsts = np.r_[0, np.cumsum(np.diff(np.r_[edges, 1 << 31]) >> shifts)[:-1]]
        bins = np.arange(half, dtype=np.int64)
        region = np.searchsorted(firsts, bins, side="right") - 1
        lowest = edges[region] + ((bins - firsts[region]) << shifts[region])
        infinity = 0x7F800000
        # Positive bin g: its smallest magnitude; negative bin g: minus its largest (the next
        # bin's smallest less one bit; infinity at most, and -0.0 belongs to +0.0).
        largest = np.minimum(np.r_[lowest[1:], 1 << 32] - 1, infinity)
        positive = np.full(half, np.nan)
        reach = lowest <= infinity
        positive[reach] = _lowest_rounding_to(lowest[reach].astype(np.uint32).view(np.float32))
        negative = np.full(half, np.nan)
        reach = (lowest <= infinity) & (largest >= np.maximum(lowest, 1))
        negative[reach] = _lowest_rounding_to(-(largest[reach].astype(np.uint32).view(np.float32)))
        return np.r_[negative[::-1], positive]
    values = _bin_values(shift, None, False)
    layout = [int(v) for v in _firstuse.key_layout(shift)]
    base, last, complement = layout[6], layout[7], layout[8]
    middle = last - 2 - ((0x3F000000 >> complement) - base)
    edges = np.full(values.shape, np.nan)
    edges[0] = 0.0
    # 0 < p < 1/2: the bin's value is its smallest float32.
    edges[1 : middle + 1] = _lowest_rounding_to(values[1 : middle + 1].astype(np.float32))
    # p >= 1/2: bins of 1 - p (bits y << complement .. (y + 1) << complement); their lowest p
    # is 1 minus the largest 1 - p in the bin that a float32 p has (a multiple of 2**-24, at
    # most 1/2).
    keys = last - 1 - np.arange(middle + 1, last, dtype=np.int64) + base
    low = (keys << complement).astype(np.uint32).view(np.float32).astype(np.float64)
    high = ((keys + 1) << complement).astype(np.uint32).view(np.float32).astype(np.float64)
    largest = np.minimum((np.ceil(high * 2.0**24) - 1) * 2.0**-24, 0.5)
    reach = largest >= low
    complement_edges = np.full(keys.shape, np.nan)
    complement_edges[reach] = _lowest_rounding_to((1.0 - largest[reach]).astype(np.float32))
    edges[middle + 1 : last] = complement_edges
    edges[last] = _lowest_rounding_to(np.array([1.0], dtype=np.float32))[0]
    # Shifts beyond 23 drop bits across 1/2: the first bin of 1 - p then also holds the p
    # below 1/2 of the next lower key, which are its lowest scores.
    fine, tiny, coarse, offset = layout[0], layout[2], layout[3], layout[5]
    shared = (middle << coarse) if middle < offset else tiny + ((middle - offset) << fine)
    if shared < 0x3F000000:
        lowest = max(shared, 1)  # (0 has a bin of its own)
        edges[middle + 1] = _lowest_rounding_to(np.array([lowest], np.uint32).view(np.float32))[0]
    return edges
