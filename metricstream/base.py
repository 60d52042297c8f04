"""The accumulator protocol: one base class for every streaming accumulator, and groups of them.

An accumulator is three things:

* a **configuration** (:meth:`Accumulator.config`): immutable, JSON-able, compared on merge,
  equality and across ranks;
* one or more named **state arrays** (int64 counts or float64 weighted sums): the only things
  that are summed by ``merge`` and by distributed syncs, stored by serialization and compared by
  ``==``;
* **views** computed from one consistent, read-only snapshot of the state.

Everything else — the lock, the version counter and view cache, strict and overflow-checked
merging, ``+``/``+=``/``sum``, ``copy``, ``==``, ``repr``, pickle, ``state_dict``, ``to_bytes``,
``save``/``load`` and the integrations (:mod:`metricstream.distributed`, :mod:`metricstream.mpi`,
:mod:`metricstream.dask`) — is written here once. A concrete accumulator writes its
``__init__`` (validating its configuration and declaring its arrays), :meth:`~Accumulator.config`,
``_prepare`` (convert and check inputs), ``_count`` (add a batch into the arrays, atomically) and
its views; ``docs/developer.md`` walks through :class:`~metricstream.ConfusionAccumulator` as the
worked example.

:class:`AccumulatorGroup` holds several named accumulators that are updated with the same batch
(inputs converted once), atomically across members, and synced across processes in one
collective per state dtype.
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib
import inspect
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any, ClassVar, TypeVar

import numpy as np

from . import exceptions as _exceptions
from . import serialization as _codec
from ._core import devices as _devices
from ._inputs import as_array

__all__ = ["Accumulator", "AccumulatorGroup", "accumulator_type"]

A = TypeVar("A", bound="Accumulator")
G = TypeVar("G", bound="AccumulatorGroup")

# Every concrete accumulator class by its serialized type name (its class name), so that a blob or
# a group's state can name the types it holds. Filled by ``Accumulator.__init_subclass__``.
_TYPES: dict[str, type[Accumulator]] = {}
# metricstream's own types and the module of each: a state naming one loads even when its family
# was not imported yet (families load on first use), and no other class may take the name.
BUILTIN_TYPES = {
    "ConfusionAccumulator": "metricstream.confusion.accumulator",
    "ScoreAccumulator": "metricstream.scores.accumulator",
    "MultilabelAccumulator": "metricstream.multilabel.accumulator",
    "BootstrapConfusionAccumulator": "metricstream.bootstrap.accumulator",
    "RegressionAccumulator": "metricstream.regression.accumulator",
    "SegmentationAccumulator": "metricstream.segmentation.accumulator",
}
# Views cached per state version: beyond this many distinct calls the cache starts again, so a
# loop of calls with ever new arguments cannot grow it without bound between two updates.
_MAX_CACHED_VIEWS = 256
# int64 state arrays up to this many cells are checked for a wrapped count after every count
# through the base (cheap at that size); larger ones are bounded by their family's kernels.
_CHECKED_INT_CELLS = 1 << 16

# While a state from outside (bytes, a state dict, another rank) is restored, the number of state
# bytes it carries: a configuration that asks for more is refused before anything is allocated,
# so a tiny blob cannot make us allocate gigabytes.
_allocation_budget: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "metricstream_allocation_budget", default=None
)

_INT64_MAX = np.iinfo(np.int64).max
_STATE_DTYPES = (np.dtype(np.int64), np.dtype(np.float64))
#: The ways a state array can combine (see ``Accumulator.state_reductions``).
STATE_REDUCTIONS = ("sum", "max")
ArraySpec = tuple[tuple[int, ...], Any]


def accumulator_type(name: object) -> type[Accumulator]:
    """The accumulator class serialized under ``name`` (its class name).

    Raises:
        ValueError: no such accumulator type is known (it may live in a module not imported yet).
    """
    if isinstance(name, str) and name not in _TYPES and name in BUILTIN_TYPES:
        importlib.import_module(BUILTIN_TYPES[name])
    try:
        return _TYPES[name]  # type: ignore[index]  # anything hashable may be asked
    except (KeyError, TypeError):
        known = ", ".join(sorted(set(_TYPES) | set(BUILTIN_TYPES)))
        raise ValueError(
            f"unknown accumulator type {name!r}; known types: {known}. Import the module that "
            f"defines it first."
        ) from None


class Accumulator:
    """Base class of every streaming accumulator (see the module docstring).

    Invariants every subclass inherits (each is tested on every accumulator type):

    * any split of a stream into batches gives the same state as one ``update``;
    * ``merge`` is exact, associative and commutative; merging an empty accumulator changes
      nothing;
    * a failed ``update`` or ``merge`` raises and leaves the state bit-identical;
    * ``update``, ``merge`` and ``reset`` return ``self``; ``a + b`` returns a new accumulator;
    * concurrent ``update`` calls from several threads lose no count;
    * every view is computed from one consistent snapshot of the state, and arrays it returns
      belong to the caller;
    * integer counts never wrap: an update or merge that would pass 2**63 - 1 raises.
    """

    #: Layout version of this type's state (configuration keys and arrays). Bump it when they
    #: change, and register in ``state_upgrades`` a function from the previous layout.
    state_format: ClassVar[int] = 1
    #: ``{n: f}``: ``f`` turns a state dict of format ``n`` into format ``n + 1``.
    state_upgrades: ClassVar[dict[int, Callable[[dict[str, Any]], dict[str, Any]]]] = {}

    _arrays: dict[str, np.ndarray]

    #: How :class:`AccumulatorGroup` and the Dask reduction may split a batch: ``"elementwise"``
    #: (each element of ``y_true`` is a sample, with any leading shape: ``(B, H, W)`` masks) or
    #: ``"rows"`` (samples are the rows of the first axis, e.g. ``(N, C)`` scores).
    input_layout: ClassVar[str] = "rows"

    #: How each state array combines when states are added (``merge``, a group's merge, a
    #: distributed sync): ``{array name: "sum" | "max"}``; arrays not named are summed. ``"max"``
    #: keeps the larger value of each cell (a maximum error, say).
    state_reductions: ClassVar[Mapping[str, str]] = {}

    #: True when the family's :meth:`_count` itself refuses, leaving the arrays as they were,
    #: every batch that would leave a state ``load`` refuses (a count past 2**63 - 1 in any
    #: int64 array's total, a float sum that is not finite): the base then skips its own check
    #: of the arrays after counting, and the copy it would take to undo one.
    _counts_safely: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        name = cls.__name__
        module = BUILTIN_TYPES.get(name)
        if module is not None and cls.__module__ != module:
            # Serialized states name their type by class name: a second class of this name
            # would make saved states load as the wrong type, or fail to load with a misleading
            # message. Refuse it now, where the fix is obvious.
            raise TypeError(
                f"{cls.__module__}.{cls.__qualname__}: the name {name!r} belongs to "
                f"metricstream's own {module}.{name}, and states are saved under their class "
                f"name; give your accumulator another name."
            )
        bad = {k: v for k, v in cls.state_reductions.items() if v not in STATE_REDUCTIONS}
        if bad:
            raise TypeError(
                f"{cls.__qualname__}.state_reductions: {bad!r}; each array's reduction must be "
                f"one of {list(STATE_REDUCTIONS)}."
            )
        _TYPES[name] = cls

    def __init__(self, arrays: Mapping[str, ArraySpec | np.ndarray]) -> None:
        """Declare the state arrays: ``{name: (shape, dtype)}`` (zero-filled here) or arrays.

        Subclasses call this last in their ``__init__``, after validating their configuration.
        Declaring shapes rather than passing arrays lets the base refuse a configuration whose
        state would not fit (a ``ValueError`` naming the bytes needed, instead of a
        ``MemoryError``) and bound what restoring an untrusted state may allocate.
        """
        specs: dict[str, tuple[tuple[int, ...], np.dtype]] = {}
        for name, spec in arrays.items():
            if isinstance(spec, np.ndarray):
                specs[name] = (spec.shape, spec.dtype)
            else:
                shape, dtype = spec
                specs[name] = (tuple(int(n) for n in shape), np.dtype(dtype))
        for name, (_, dtype) in specs.items():
            if dtype not in _STATE_DTYPES:
                raise TypeError(f"state array {name!r} has dtype {dtype}; use int64 or float64.")
        unknown = sorted(set(type(self).state_reductions) - set(specs))
        if unknown:
            raise TypeError(
                f"{type(self).__name__}.state_reductions names {unknown}, which are not state "
                f"arrays (the arrays: {sorted(specs)})."
            )
        needed = sum(
            int(np.prod(shape, dtype=object)) * dtype.itemsize for shape, dtype in specs.values()
        )
        budget = _allocation_budget.get()
        if budget is not None and needed > budget:
            raise ValueError(
                f"the configuration needs {needed:,} bytes of state, but the state given carries "
                f"{budget:,}; it does not describe this accumulator."
            )
        state: dict[str, np.ndarray] = {}
        for name, spec in arrays.items():
            if isinstance(spec, np.ndarray):
                state[name] = spec
                continue
            shape, dtype = specs[name]
            try:
                state[name] = np.zeros(shape, dtype=dtype)
            except (MemoryError, ValueError) as error:
                raise ValueError(
                    f"{type(self).__name__} with this configuration needs {needed:,} bytes of "
                    f"state ({name!r} alone has shape {shape}), which cannot be allocated here."
                ) from error
        self._arrays = state
        self._init_runtime()

    def _init_runtime(self) -> None:
        self._lock = threading.Lock()
        self._version = 0
        self._frozen: tuple[int, dict[str, np.ndarray]] | None = None
        self._views: dict[Any, Any] = {}
        self._derived_values: dict[Any, tuple[int, Any]] = {}
        # Counts kept on a device (torch tensors on a GPU) until a reader needs them on the host:
        # see metricstream.device. None until the first device update.
        self._device: Any = None
        self._handle = _devices.register(self)  # how a compiled step names this accumulator

    # ------------------------------------------------------------------ what subclasses write
    def config(self) -> dict[str, Any]:
        """The configuration as a JSON-able dict; ``type(self)(**config)`` is an empty twin."""
        raise NotImplementedError

    def _prepare(self, *args: Any, **kwargs: Any) -> Any:
        """Convert and check one ``update`` call's inputs (outside the lock); return a batch."""
        raise NotImplementedError

    def _count(self, arrays: dict[str, np.ndarray], batch: Any) -> None:
        """Add ``batch`` into the live ``arrays`` (lock held); on error leave them unchanged."""
        raise NotImplementedError

    def _uncount(self, arrays: dict[str, np.ndarray], batch: Any) -> None:
        """Exactly undo a successful :meth:`_count`. Optional: see :meth:`_count_undoable`."""
        raise NotImplementedError

    # ------------------------------------------------------------------ the protocol
    def update(self: A, *args: Any, **kwargs: Any) -> A:
        """Count a batch and return ``self``; on error nothing is counted."""
        if args and _devices.on_device(args[0]):
            return self._update_on_device(*args, **kwargs)
        batch = self._prepare(*args, **kwargs)
        with self._lock:
            self._count_finite(batch)
            self._changed()
        return self

    def _update_on_device(self: A, *args: Any, **kwargs: Any) -> A:
        """Count a batch of device tensors on their device (see :mod:`metricstream.device`)."""
        from .device import update_on_device  # imports torch: only for device tensors

        update_on_device(self, *args, **kwargs)
        return self

    def _flush_device(self) -> None:
        """Add what was counted on a device into the host arrays (lock held); see
        :mod:`metricstream.device`. Every reader of the state calls it first."""
        if self._device is not None:
            self._device.flush_into(self, self._arrays)

    def merge(self: A, other: A) -> A:
        """Add ``other``'s state into this accumulator in place and return ``self``.

        Exact, associative and commutative; merging an empty accumulator changes nothing. Both
        must be of the same type with an equal configuration; otherwise a ``ValueError`` names
        the field and both values, and nothing changes. Integer counts whose sum would pass
        2**63 - 1 raise ``ValueError`` instead of wrapping.
        """
        if type(other) is not type(self):
            raise TypeError(
                f"can only merge a {type(self).__name__} into a {type(self).__name__}, got "
                f"{type(other).__name__}."
            )
        self._check_compatible(other)
        incoming = other.state_arrays() if other is not self else None
        with self._lock:
            self._flush_device()
            if incoming is None:
                incoming = {name: array.copy() for name, array in self._arrays.items()}
            sums = _checked_sums(self._arrays, incoming, type(self).__name__, self.state_reductions)
            for name, total in sums.items():
                self._arrays[name][...] = total
            self._changed()
        return self

    def reset(self: A) -> A:
        """Set the state to zero and return ``self`` (the configuration is kept)."""
        with self._lock:
            if self._device is not None:
                self._device.reset()
            for array in self._arrays.values():
                array[...] = 0
            self._changed()
        return self

    def copy(self: A) -> A:
        """An independent accumulator with the same configuration and state."""
        new = type(self)(**self.config())
        arrays = self.state_arrays()
        for name, array in arrays.items():
            new._arrays[name][...] = array
        return new

    __copy__ = copy

    def __deepcopy__(self: A, memo: dict) -> A:
        return self.copy()

    def __add__(self: A, other: A) -> A:
        if type(other) is not type(self):
            return NotImplemented
        return self.copy().merge(other)

    def __radd__(self: A, other: Any) -> A:
        # ``sum(accumulators)`` starts from 0.
        if isinstance(other, int) and not isinstance(other, bool) and other == 0:
            return self.copy()
        return NotImplemented

    def __iadd__(self: A, other: A) -> A:
        if type(other) is not type(self):
            return NotImplemented
        return self.merge(other)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, Accumulator)
        if self.config() != other.config():
            return False
        mine, theirs = self._snapshot(), other._snapshot()
        return all(np.array_equal(mine[name], theirs[name]) for name in mine)

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        shown = ", ".join(f"{key}={value!r}" for key, value in self.config().items())
        return f"{type(self).__name__}({shown})"

    # ------------------------------------------------------------------ state
    def scalars(self, prefix: str = "", **options: Any) -> dict[str, float]:
        """The accumulator's metrics as one flat dict of floats (what every logger takes); see
        :func:`metricstream.scalars.flat_scalars` for the keys and options."""
        from .scalars import flat_scalars

        return flat_scalars(self, prefix, **options)

    def state_arrays(self) -> dict[str, np.ndarray]:
        """Copies of the state arrays, taken together under the lock (the caller owns them)."""
        with self._lock:
            self._flush_device()
            return {name: array.copy() for name, array in self._arrays.items()}

    @contextlib.contextmanager
    def exclusive_state(self) -> Iterator[dict[str, np.ndarray]]:
        """Hold the lock and yield the live state arrays, to be summed in place.

        For engines (distributed syncs) that overwrite the state with the sum over processes:
        updates from other threads wait until the block ends, and views are invalidated then.
        Write only sums of states of equally configured accumulators into them.
        """
        with self._lock:
            try:
                self._flush_device()
                yield self._arrays
            finally:
                self._changed()

    def state_dict(self) -> dict[str, Any]:
        """The state as plain data: type, format, configuration and arrays (as bytes).

        It holds only dicts, lists, strings, numbers, None and bytes, so it pickles, goes into a
        JSON-less checkpoint such as ``torch.save`` and loads back with ``torch.load``'s default
        ``weights_only=True``, and compares with ``==``. See :mod:`metricstream.serialization`.
        """
        return _codec.make_state_dict(
            type(self).__name__, self.state_format, self.config(), self.state_arrays()
        )

    @classmethod
    def from_state_dict(cls: type[A], state: Any) -> A:
        """A new accumulator from :meth:`state_dict` output of this or any earlier format.

        Safe for untrusted input: the type, format, configuration and every array are checked
        before the state is trusted, and nothing larger than the given arrays is allocated.

        Raises:
            TypeError: ``state`` is not a dict.
            ValueError: another accumulator type, a newer format, a bad configuration, or arrays
                whose shape, dtype or values (negative, non-finite, fractional counts) do not fit.
        """
        type_name, config, arrays = _codec.read_state_dict(
            state, cls.__name__, cls.state_format, cls.state_upgrades
        )
        if type_name != cls.__name__:
            raise ValueError(
                f"`state` holds {_a(type_name)}, not a {cls.__name__}; load it with "
                f"{type_name}.from_state_dict."
            )
        return cls._restore(config, arrays)

    def to_bytes(self) -> bytes:
        """The state as a versioned, checksummed binary blob (no pickle inside).

        See :func:`metricstream.serialization.encode` for the layout.
        """
        return _codec.encode(
            type(self).__name__, self.state_format, self.config(), self.state_arrays()
        )

    @classmethod
    def from_bytes(cls: type[A], data: Any, *, source: str = "`data`") -> A:
        """A new accumulator from :meth:`to_bytes` output (any earlier format included).

        Safe for untrusted input: the checksum is verified before anything is parsed, and
        memory is bounded by the size of ``data``. Only ``ValueError`` (``TypeError`` when
        ``data`` is not bytes-like) is raised.
        """
        type_name, state_format, config, arrays = _codec.decode(data, source=source)
        if type_name != cls.__name__:
            raise ValueError(
                f"{source} holds {_a(type_name)}, not a {cls.__name__}; load it with "
                f"{type_name}.from_bytes."
            )
        try:
            return cls.from_state_dict(
                {"type": type_name, "format": state_format, "config": config, "arrays": arrays}
            )
        except (TypeError, ValueError) as error:
            raise ValueError(f"{source} holds an invalid state: {error}") from error

    def save(self, path: Any) -> Any:
        """Write :meth:`to_bytes` to ``path`` atomically; returns the path."""
        return _codec.save_bytes(self.to_bytes(), path)

    @classmethod
    def load(cls: type[A], path: Any) -> A:
        """Read an accumulator written by :meth:`save` (bounded reads; see ``serialization``)."""
        data, source = _codec.read_file(path)
        return cls.from_bytes(data, source=source)

    def __getstate__(self) -> dict[str, Any]:
        return self.state_dict()

    def __setstate__(self, state: dict[str, Any]) -> None:
        # Validates, and upgrades states pickled by earlier format versions.
        restored = type(self).from_state_dict(state)
        self.__dict__.update(restored.__dict__)
        self._handle = _devices.register(self)

    @classmethod
    def _restore(cls: type[A], config: dict[str, Any], arrays: dict[str, np.ndarray]) -> A:
        """An accumulator with ``config`` holding ``arrays``, both from outside: check all."""
        budget = sum(array.nbytes for array in arrays.values())
        token = _allocation_budget.set(budget)
        try:
            new = cls(**config)
        except TypeError as error:
            raise ValueError(
                f"the configuration {config!r} does not fit {cls.__name__}: {error}"
            ) from error
        finally:
            _allocation_budget.reset(token)
        missing = sorted(set(new.config()) - set(config))
        if missing:
            raise ValueError(
                f"the configuration lacks the setting(s) {missing}; it was not made "
                f"by `state_dict()` or is damaged."
            )
        _codec.check_arrays(arrays, new._arrays)
        for name, array in arrays.items():
            if array.dtype.kind in "iu" and exact_total(array) > _INT64_MAX:
                # Each cell fits, but the total (N of a matrix) would not: the next update or
                # merge could only wrap it. The same rule as merge's.
                raise ValueError(
                    f"the counts of state array {name!r} add up to 2**63 or more, beyond int64; "
                    f"no {cls.__name__} can hold them."
                )
            new._arrays[name][...] = array
        return new

    # ------------------------------------------------------------------ for subclasses
    def _changed(self) -> None:
        # Caches first, then the version: a reader that sees the new version can no longer find
        # a snapshot of the old one.
        self._frozen = None
        if self._views:
            self._views.clear()
        self._version += 1

    def _snapshot(self) -> dict[str, np.ndarray]:
        """Read-only copies of the state at one version, cached until the next change."""
        return self._versioned_snapshot()[1]

    def _versioned_snapshot(self) -> tuple[int, dict[str, np.ndarray]]:
        """``(version, snapshot)``: the snapshot and the version it was taken at, together."""
        frozen = self._frozen
        if frozen is not None and (self._device is None or not self._device.replayable):
            return frozen
        with self._lock:
            self._flush_device()
            frozen = self._frozen
            if frozen is None:
                copies = {}
                for name, array in self._arrays.items():
                    copy = array.copy()
                    copy.flags.writeable = False
                    copies[name] = copy
                frozen = (self._version, copies)
                self._frozen = frozen
        return frozen

    def _view_source(self) -> Any:
        """What view functions receive; by default the snapshot mapping of arrays."""
        return self._snapshot()

    def _view(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``function(self._view_source(), *args, **kwargs)``, cached until the state changes.

        Results that may warn (``zero_division="warn"``) are recomputed each call so that the
        warning repeats, as scikit-learn repeats it. Arrays are returned as fresh copies.
        """
        device = self._device
        if device is not None and device.replayable:  # a CUDA graph may have counted since
            with self._lock:
                self._flush_device()
        cacheable = kwargs.get("zero_division", None) != "warn"
        key = (_function_key(function, self), args, tuple(kwargs.items()))
        if cacheable:
            try:
                hit = self._views.get(key)
            except TypeError:  # an unhashable argument, e.g. a weight matrix
                cacheable = False
            else:
                # Each entry carries the version it was computed at: one stored by a view that
                # an update overtook is never returned for the newer state.
                if hit is not None and hit[0] == self._version:
                    return _fresh(hit[1])
        version = self._version
        warned = _exceptions.undefined_warnings_issued()
        value = function(self._view_source(), *args, **kwargs)
        # A concurrent update may have landed meanwhile: never cache a value of an older state.
        # Nor one that warned: returned from the cache, it would not warn again.
        if (
            cacheable
            and version == self._version
            and warned == _exceptions.undefined_warnings_issued()
        ):
            views = self._views
            if len(views) >= _MAX_CACHED_VIEWS:
                views.clear()
            views[key] = (version, value)
            return _fresh(value)
        return value

    def _derived(self, key: Any, build: Callable[[Mapping[str, np.ndarray]], Any]) -> Any:
        """``build(snapshot)``, cached with the version of the snapshot it was built from.

        For what views share (per-class counts, a confusion accumulator of one state array): the
        value is tied to the version of the very snapshot it came from, so an update landing
        meanwhile can only make it recomputed, never stale. The value is shared, not copied:
        ``build`` must return something its users do not modify.
        """
        version, snapshot = self._versioned_snapshot()
        hit = self._derived_values.get(key)
        if hit is not None and hit[0] == version:
            return hit[1]
        value = build(snapshot)
        self._derived_values[key] = (version, value)
        return value

    def _check_compatible(self, other: Accumulator) -> None:
        mine, theirs = self.config(), other.config()
        for key in mine:
            if mine[key] != theirs.get(key):
                raise ValueError(
                    f"cannot merge {type(self).__name__}s with different `{key}`: "
                    f"{mine[key]!r} here, {theirs.get(key)!r} in the other; merged shards must "
                    f"be configured alike."
                )

    def _count_finite(self, batch: Any, backup: dict[str, np.ndarray] | None = None) -> None:
        """:meth:`_count` (lock held), refused and undone if it leaves a state ``load`` refuses.

        A state holding infinity, NaN or a wrapped (negative) count could not be loaded back,
        so the base never lets one come to be, whatever the family's own checks: after counting,
        every float64 array is checked for non-finite values and every int64 array of at most
        ``_CHECKED_INT_CELLS`` cells for a wrapped count (a larger one is its family's kernel's
        to bound, before it writes); a count that broke one is undone exactly (by
        :meth:`_uncount` and a backup of the checked arrays, or by a backup of the whole state
        when there is no ``_uncount``) before a ``ValueError`` names the array.
        """
        arrays = self._arrays
        if self._counts_safely:
            self._count(arrays, batch)
            return
        checked = [
            name
            for name, array in arrays.items()
            if array.dtype.kind == "f" or array.size <= _CHECKED_INT_CELLS
        ]
        if not checked:
            self._count(arrays, batch)
            return
        undoable = type(self)._uncount is not Accumulator._uncount
        if backup is None:  # (a caller that already holds a copy of the whole state passes it)
            backup = {
                name: array.copy()
                for name, array in arrays.items()
                if not undoable or (name in checked and array.dtype.kind == "f")
            }
        self._count(arrays, batch)
        for name in checked:
            array = arrays[name]
            broken = (
                not np.isfinite(array).all() if array.dtype.kind == "f" else bool((array < 0).any())
            )
            if broken:
                break
        else:
            return
        if undoable:
            self._uncount(arrays, batch)  # exact for int64 even past a wrap (modular arithmetic)
        for key, array in backup.items():
            arrays[key][...] = array
        if arrays[name].dtype.kind == "f":
            raise ValueError(
                f"this batch would take the float64 sums of {type(self).__name__} state "
                f"{name!r} to infinity or NaN (weights or values too large), a state that could "
                f"not be saved and loaded back; nothing was counted."
            )
        raise ValueError(
            f"this batch would take an int64 count of {type(self).__name__} state {name!r} "
            f"past 2**63 - 1; nothing was counted."
        )

    def _count_undoable(self, batch: Any) -> Callable[[], None]:
        """Count ``batch`` (lock held) and return a function that undoes it exactly.

        Used by groups: when a later member fails, the members already counted are undone.
        Uses :meth:`_uncount` when the subclass has one, else restores a snapshot.
        """
        if type(self)._uncount is not Accumulator._uncount:
            self._count_finite(batch)
            return lambda: self._uncount(self._arrays, batch)
        backup = {name: array.copy() for name, array in self._arrays.items()}
        self._count_finite(batch, backup)

        def restore() -> None:
            for name, array in backup.items():
                self._arrays[name][...] = array

        return restore


def _a(name: str) -> str:
    """``"a ConfusionAccumulator"``, ``"an AccumulatorGroup"``."""
    return f"{'an' if name[:1].upper() in 'AEIOU' else 'a'} {name}"


def exact_total(array: np.ndarray) -> int:
    """The exact sum of a non-negative int64 array, as a Python int (no float rounding, no wrap).

    Summed as high and low 32-bit halves, neither of which can overflow int64 for fewer than
    2**31 elements: the same bound for updates, merges, restored states and syncs, so that none
    of them creates a state another refuses.
    """
    flat = np.ascontiguousarray(array).reshape(-1).view(np.int64)
    if flat.size == 0:
        return 0
    high = int((flat >> 32).sum(dtype=np.int64))
    low = int((flat & 0xFFFFFFFF).sum(dtype=np.int64))
    return high * 2**32 + low


def _function_key(function: Callable[..., Any], owner: object) -> Any:
    """What identifies a view function in the cache.

    A function defined once (a module's, a method) is its own key. A lambda or closure written
    inside a view method is a new object at every call: it is keyed by its code and the values
    it captured, so ``self._view(lambda state: ...)`` hits the cache like a named function (an
    unhashable captured value makes the call uncached, as an unhashable argument does).
    ``owner`` is the accumulator whose cache this is.
    """
    code = getattr(function, "__code__", None)
    if code is None:
        return function
    closure = function.__closure__  # type: ignore[attr-defined]
    defaults = function.__defaults__  # type: ignore[attr-defined]
    if closure is None and defaults is None and code.co_name != "<lambda>":
        return function
    # The accumulator itself (a lambda using ``self``) is unhashable, and the cache is its own.
    captured = (
        ()
        if closure is None
        else tuple(None if cell.cell_contents is owner else cell.cell_contents for cell in closure)
    )
    return code, captured, defaults


def _fresh(value: Any) -> Any:
    """Copy cached arrays so that callers cannot modify the cache."""
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, tuple):
        return tuple(_fresh(v) for v in value)
    if isinstance(value, dict):
        return {k: _fresh(v) for k, v in value.items()}
    return value


def _checked_sums(
    current: Mapping[str, np.ndarray],
    incoming: Mapping[str, np.ndarray],
    what: str,
    reductions: Mapping[str, str] | None = None,
) -> dict[str, np.ndarray]:
    """``current + incoming`` per array (the larger value for the arrays ``reductions`` marks
    ``"max"``), refusing int64 wrap-around and float overflow."""
    sums = {}
    for name, array in current.items():
        other = incoming[name]
        if reductions and reductions.get(name) == "max":
            sums[name] = np.maximum(array, other)
            continue
        if array.dtype.kind == "i":
            # Counts are non-negative, so a sum wraps exactly when it comes out below an operand.
            with np.errstate(over="ignore"):
                total = array + other
            wrapped = total < array
            # The array's own total must stay an int64 too (N of a confusion matrix).
            if not wrapped.any() and exact_total(total) > _INT64_MAX:
                raise ValueError(
                    f"merging would take the total of {what} state {name!r} to 2**63 or more, "
                    f"beyond int64; nothing was merged."
                )
            if wrapped.any():
                where = tuple(int(i) for i in np.argwhere(wrapped)[0])
                raise ValueError(
                    f"merging would overflow the int64 count of {what} state {name!r} at "
                    f"{where}: {int(array[where])} + {int(other[where])} > 2**63 - 1; nothing "
                    f"was merged."
                )
        else:
            with np.errstate(over="ignore"):
                total = array + other
            if not np.isfinite(total).all():
                raise ValueError(
                    f"merging would overflow the float64 sums of {what} state {name!r} to "
                    f"infinity; nothing was merged."
                )
        sums[name] = total
    return sums


class AccumulatorGroup(Mapping[str, Accumulator]):
    """Several named accumulators that update, merge, reset, serialize and sync together.

    ``group.update(y_true, y_pred, weights)`` converts the inputs once (torch tensors, lists)
    and feeds every member the same batch. It is atomic across the group: if any member rejects
    the batch, every member is left exactly as it was. Syncing a group across processes costs
    one configuration check and one SUM collective per state dtype, whatever the number of
    members (see :mod:`metricstream.distributed`).

    Example:
        >>> from metricstream import AccumulatorGroup, ConfusionAccumulator
        >>> group = AccumulatorGroup(train=ConfusionAccumulator(3), seen=ConfusionAccumulator(3))
        >>> group.update([0, 1, 2], [0, 2, 2])["train"].accuracy()
        0.6666666666666666
        >>> sorted(group)
        ['seen', 'train']
    """

    def __init__(
        self, members: Mapping[str, Accumulator] | None = None, **named: Accumulator
    ) -> None:
        combined: dict[str, Accumulator] = {}
        for source in (members or {}, named):
            for name, member in source.items():
                if not isinstance(name, str) or not name or "/" in name:
                    raise ValueError(
                        f"member names must be non-empty strings without '/', got {name!r}."
                    )
                if not isinstance(member, Accumulator):
                    raise TypeError(
                        f"member {name!r} must be an accumulator, got {type(member).__name__}."
                    )
                if name in combined:
                    raise ValueError(f"member name {name!r} is given twice.")
                combined[name] = member
        if len({id(m) for m in combined.values()}) != len(combined):
            raise ValueError("the same accumulator object is a member twice; give each its own.")
        self._members = combined
        self._index()

    def _index(self) -> None:
        """What every update reads: the members in order, and their locks in the global order."""
        self._member_list = list(self._members.values())
        self._lock_order = [member._lock for member in sorted(self._member_list, key=id)]
        # The order members count a batch in: smallest state first, so that the largest, which
        # no later member can make undo its count, needs no undo (a score histogram's undo log
        # or copy is the costliest).
        sizes = [sum(a.nbytes for a in m._arrays.values()) for m in self._member_list]
        self._count_order = sorted(range(len(sizes)), key=sizes.__getitem__)

    # ------------------------------------------------------------------ mapping
    def __getitem__(self, name: str) -> Accumulator:
        try:
            return self._members[name]
        except KeyError:
            raise KeyError(f"no member {name!r}; members: {list(self._members)}") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._members)

    def __len__(self) -> int:
        return len(self._members)

    def __repr__(self) -> str:
        inner = ", ".join(f"{name}={member!r}" for name, member in self._members.items())
        return f"AccumulatorGroup({inner})"

    # ------------------------------------------------------------------ protocol
    def update(self: G, y_true: Any, y_pred: Any, weights: Any = None, **member_kwargs: Any) -> G:
        """Feed every member the same batch; atomic across the group. Returns ``self``.

        Other keyword arguments (``cluster_ids=`` of a bootstrap member, say) go to every member
        whose ``update`` takes them; one that no member takes is refused by name.
        """
        if _devices.on_device(y_true):
            # Tensors on a device: each member counts them there (metricstream.device); bad
            # values are recorded on the device and reported by the next read, not raised here.
            for member in self._members.values():
                member.update(y_true, y_pred, weights, **member_kwargs)
            return self
        # Convert once: a torch tensor is read through DLPack here, not once per member.
        y_true = _once(y_true, "y_true")
        y_pred = _once(y_pred, "y_pred")
        weights = None if weights is None else _once(weights, "weights")
        members = self._member_list
        if member_kwargs:
            taken = [_keywords(type(member)._prepare) for member in members]
            unused = sorted(set(member_kwargs) - set().union(*taken))
            if unused:
                raise TypeError(
                    f"AccumulatorGroup.update() got the keyword argument(s) {unused}, which no "
                    f"member takes (members: "
                    f"{', '.join(f'{n}: {type(m).__name__}' for n, m in self._members.items())})."
                )
            batches = [
                member._prepare(
                    y_true,
                    y_pred,
                    weights,
                    **{key: value for key, value in member_kwargs.items() if key in keys},
                )
                for member, keys in zip(members, taken, strict=True)
            ]
        else:
            batches = [member._prepare(y_true, y_pred, weights) for member in members]
        # The members' locks in one global order (by id), taken and released by hand: an
        # ExitStack costs more than a small member's whole update.
        locks = self._lock_order
        for lock in locks:
            lock.acquire()
        try:
            order = self._count_order
            last = order[-1]
            undo: list[Callable[[], None]] = []
            try:
                for index in order:
                    if index == last:  # its own refusal leaves it as it was: no undo needed
                        members[index]._count_finite(batches[index])
                    else:
                        undo.append(members[index]._count_undoable(batches[index]))
            except BaseException:
                for restore in reversed(undo):
                    restore()
                raise
            finally:
                for index in order[: len(undo) + 1]:
                    members[index]._changed()
        finally:
            for lock in reversed(locks):
                lock.release()
        return self

    def merge(self: G, other: G) -> G:
        """Merge ``other``'s members into this group's members (same names, types, configs)."""
        if not isinstance(other, AccumulatorGroup):
            raise TypeError(f"can only merge an AccumulatorGroup, got {type(other).__name__}.")
        if list(other._members) != list(self._members):
            raise ValueError(
                f"cannot merge groups with different members: {list(self._members)} here, "
                f"{list(other._members)} in the other."
            )
        incoming = other._state_arrays() if other is not self else None
        for name, member in self._members.items():
            theirs = other._members[name]
            if type(theirs) is not type(member):
                raise ValueError(
                    f"cannot merge groups: member {name!r} is a {type(member).__name__} here and "
                    f"a {type(theirs).__name__} in the other."
                )
            try:
                member._check_compatible(theirs)
            except ValueError as error:
                raise ValueError(f"member {name!r}: {error}") from None
        with self._locked():
            for member in self._members.values():
                member._flush_device()
            if incoming is None:  # the group merged into itself: doubled, under the locks
                incoming = {
                    name: {key: array.copy() for key, array in member._arrays.items()}
                    for name, member in self._members.items()
                }
            sums = {
                name: _checked_sums(
                    member._arrays,
                    incoming[name],
                    f"{type(member).__name__} {name!r}",
                    member.state_reductions,
                )
                for name, member in self._members.items()
            }
            for name, member in self._members.items():
                for array_name, total in sums[name].items():
                    member._arrays[array_name][...] = total
                member._changed()
        return self

    def reset(self: G) -> G:
        """Reset every member; returns ``self``."""
        for member in self._members.values():
            member.reset()
        return self

    def copy(self: G) -> G:
        """An independent group of copies of the members (one consistent group state)."""
        arrays = self._state_arrays()
        copies = {}
        for name, member in self._members.items():
            twin = type(member)(**member.config())
            for key, array in arrays[name].items():
                twin._arrays[key][...] = array
            copies[name] = twin
        return type(self)(copies)

    __copy__ = copy

    def __deepcopy__(self: G, memo: dict) -> G:
        return self.copy()

    def __add__(self: G, other: G) -> G:
        if not isinstance(other, AccumulatorGroup):
            return NotImplemented
        return self.copy().merge(other)

    def __radd__(self: G, other: Any) -> G:
        if isinstance(other, int) and not isinstance(other, bool) and other == 0:
            return self.copy()
        return NotImplemented

    def __iadd__(self: G, other: G) -> G:
        if not isinstance(other, AccumulatorGroup):
            return NotImplemented
        return self.merge(other)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, AccumulatorGroup):
            return NotImplemented
        return list(self._members) == list(other._members) and all(
            self._members[name] == other._members[name] for name in self._members
        )

    __hash__ = None  # type: ignore[assignment]

    def summary(self, **kwargs: Any) -> dict[str, Any]:
        """``{name: member.summary(**kwargs)}``; a member without a ``summary`` gives its flat
        scalars (:func:`metricstream.scalars.flat_scalars`), so no member is left out."""
        from .scalars import flat_scalars

        return {
            name: (
                member.summary(**kwargs)  # type: ignore[attr-defined]
                if hasattr(member, "summary")
                else flat_scalars(member)
            )
            for name, member in self._members.items()
        }

    def scalars(self, prefix: str = "", **options: Any) -> dict[str, float]:
        """Every member's scalars in one flat dict, keyed ``"member/metric"`` (what loggers take);
        see :func:`metricstream.scalars.flat_scalars` for the options."""
        from .scalars import flat_scalars

        return flat_scalars(self, prefix, **options)

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """``{"type": "AccumulatorGroup", "format": 1, "members": {name: member state dict}}``.

        One state: every member's arrays are copied together, under all the members' locks, so
        a group updated from other threads meanwhile is saved as it was between two updates.
        """
        arrays = self._state_arrays()
        return {
            "type": "AccumulatorGroup",
            "format": 1,
            "members": {
                name: _codec.make_state_dict(
                    type(member).__name__, member.state_format, member.config(), arrays[name]
                )
                for name, member in self._members.items()
            },
        }

    def _state_arrays(self) -> dict[str, dict[str, np.ndarray]]:
        """Copies of every member's arrays, taken together (one consistent group state)."""
        with self._locked():
            for member in self._members.values():
                member._flush_device()
            return {
                name: {key: array.copy() for key, array in member._arrays.items()}
                for name, member in self._members.items()
            }

    @classmethod
    def from_state_dict(cls: type[G], state: Any) -> G:
        """A group from :meth:`state_dict` output (each member checked as its type checks it)."""
        if not isinstance(state, dict):
            raise TypeError(f"`state` must be a dict, got {type(state).__name__}.")
        if state.get("type") != "AccumulatorGroup" or state.get("format") != 1:
            raise ValueError(
                f"`state` is not an AccumulatorGroup state of format 1 (type "
                f"{state.get('type')!r}, format {state.get('format')!r})."
            )
        members = state.get("members")
        if not isinstance(members, dict):
            raise ValueError("`state` has no 'members' dict.")
        restored = {}
        for name, member_state in members.items():
            if not isinstance(member_state, dict):
                raise ValueError(f"member {name!r} of `state` is not a dict.")
            member_type = accumulator_type(member_state.get("type"))
            try:
                restored[name] = member_type.from_state_dict(member_state)
            except (TypeError, ValueError) as error:
                raise ValueError(f"member {name!r}: {error}") from error
        return cls(restored)

    def to_bytes(self) -> bytes:
        """All members in one checksummed blob (the codec of :mod:`metricstream.serialization`)."""
        config = {
            "members": [
                [name, type(member).__name__, member.state_format, member.config()]
                for name, member in self._members.items()
            ]
        }
        arrays = {
            f"{name}/{array_name}": array
            for name, member_arrays in self._state_arrays().items()
            for array_name, array in member_arrays.items()
        }
        return _codec.encode("AccumulatorGroup", 1, config, arrays)

    @classmethod
    def from_bytes(cls: type[G], data: Any, *, source: str = "`data`") -> G:
        """A group from :meth:`to_bytes` output; bounded and checked like a single accumulator."""
        type_name, state_format, config, arrays = _codec.decode(data, source=source)
        if type_name != "AccumulatorGroup" or state_format != 1:
            raise ValueError(
                f"{source} holds {_a(type_name)} (format {state_format}), not an "
                f"AccumulatorGroup; load it with {type_name}.from_bytes."
            )
        try:
            entries = config.get("members")
            if not isinstance(entries, list):
                raise ValueError("its configuration has no 'members' list")
            members = {}
            claimed: set[str] = set()
            for entry in entries:
                if not (
                    isinstance(entry, list)
                    and len(entry) == 4
                    and isinstance(entry[0], str)
                    and isinstance(entry[3], dict)
                ):
                    raise ValueError(
                        f"the member entry {str(entry)[:80]!r} is not "
                        f"[name, type, format, configuration]"
                    )
                name, member_type_name, member_format, member_config = entry
                if name in members:
                    raise ValueError(f"member {name!r} is listed twice")
                prefix = f"{name}/"
                member_arrays = {
                    key[len(prefix) :]: value
                    for key, value in arrays.items()
                    if key.startswith(prefix)
                }
                claimed.update(prefix + key for key in member_arrays)
                member_type = accumulator_type(member_type_name)
                members[name] = member_type.from_state_dict(
                    {
                        "type": member_type_name,
                        "format": member_format,
                        "config": member_config,
                        "arrays": member_arrays,
                    }
                )
            orphans = sorted(set(arrays) - claimed)
            if orphans:
                raise ValueError(f"the arrays {orphans[:5]} belong to no member")
            return cls(members)
        except (TypeError, ValueError) as error:
            raise ValueError(f"{source} holds an invalid group state: {error}") from error

    def save(self, path: Any) -> Any:
        """Write :meth:`to_bytes` to ``path`` atomically; returns the path."""
        return _codec.save_bytes(self.to_bytes(), path)

    @classmethod
    def load(cls: type[G], path: Any) -> G:
        """Read a group written by :meth:`save`."""
        data, source = _codec.read_file(path)
        return cls.from_bytes(data, source=source)

    def __getstate__(self) -> dict[str, Any]:
        return self.state_dict()

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._members = type(self).from_state_dict(state)._members
        self._index()

    # ------------------------------------------------------------------ for the sync engines
    def members(self) -> dict[str, Accumulator]:
        """The members by name (the same objects, not copies)."""
        return dict(self._members)

    @contextlib.contextmanager
    def exclusive_state(self) -> Iterator[dict[str, np.ndarray]]:
        """Hold every member's lock and yield ``{"name/array": live array}`` to sum in place."""
        with contextlib.ExitStack() as stack:
            arrays = {}
            # A global lock order (by id) so that two groups sharing nothing cannot deadlock
            # with single-member syncs running at the same time.
            for name, member in sorted(self._members.items(), key=lambda item: id(item[1])):
                live = stack.enter_context(member.exclusive_state())
                for array_name, array in live.items():
                    arrays[f"{name}/{array_name}"] = array
            yield {key: arrays[key] for key in sorted(arrays, key=self._order_key)}

    def _order_key(self, key: str) -> tuple[int, str]:
        name = key.split("/", 1)[0]
        return list(self._members).index(name), key

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with contextlib.ExitStack() as stack:
            for member in sorted(self._members.values(), key=id):
                stack.enter_context(member._lock)
            yield


def _keywords(prepare: Callable[..., Any]) -> frozenset[str]:
    """The keyword arguments a member's ``_prepare`` takes beyond the batch itself."""
    cached = _KEYWORDS.get(prepare)
    if cached is None:
        parameters = inspect.signature(prepare).parameters
        cached = frozenset(
            name
            for name, parameter in parameters.items()
            if name not in ("self", "y_true", "y_pred", "weights")
            and parameter.kind in (parameter.KEYWORD_ONLY, parameter.POSITIONAL_OR_KEYWORD)
        )
        _KEYWORDS[prepare] = cached
    return cached


_KEYWORDS: dict[Callable[..., Any], frozenset[str]] = {}


def _once(value: Any, name: str) -> Any:
    """Inputs converted once for every member (numpy arrays pass through untouched).

    What is not array-like (per-sample label sets, say) is passed to every member as it is:
    each member's own ``update`` reads it or says why it cannot.
    """
    if type(value) is np.ndarray:
        return value
    if not (
        isinstance(value, (list, tuple, int, float, complex, np.generic))
        or hasattr(value, "__array__")
        or hasattr(value, "__dlpack__")
        or hasattr(value, "__array_interface__")
    ):
        return value
    return as_array(value, name)
