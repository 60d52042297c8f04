"""PyTorch Lightning: epoch metrics that are global, exact, and synced once per epoch.

Install with ``pip install "metricstream[lightning]"`` (Lightning 2.x, imported as ``lightning``
or, failing that, ``pytorch_lightning``).

:class:`MetricsCallback` feeds an accumulator or :class:`~metricstream.AccumulatorGroup` from
every validation and test batch (and, with ``train=True``, training batch), and at each epoch
end sums it across the ranks in one configuration check and at most two data collectives
(:func:`metricstream.distributed.all_reduce`; nothing is exchanged per step), logs every scalar
of :func:`metricstream.scalars.flat_scalars` once, already global (``sync_dist=False``), and
resets. Under DDP it leaves out the duplicates ``DistributedSampler`` pads the last batches with
(:class:`metricstream.exactly_once.PaddingGuard`), so the logged numbers are those of one process
over the whole evaluation set. Its state is saved in checkpoints, so a run resumed from a
mid-epoch checkpoint keeps what the epoch had counted.

:class:`TorchmetricsView` is a ``torchmetrics.Metric`` around an accumulator, for
``self.log("val/f1", metric)``; its synchronisation is metricstream's (torchmetrics needed).
"""

from __future__ import annotations

import importlib
import re
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from .base import Accumulator, AccumulatorGroup
from .exactly_once import PaddingGuard
from .scalars import flat_scalars

__all__ = ["MetricsCallback", "TorchmetricsView"]  # noqa: F822  (made on first use)

INSTALL_HINT = 'pip install "metricstream[lightning]"'


def _import_lightning() -> Any:
    for name in ("lightning.pytorch", "pytorch_lightning"):
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise ImportError(
        f"metricstream.lightning needs PyTorch Lightning 2.x (`lightning` or "
        f"`pytorch_lightning`), which is not installed; {INSTALL_HINT}."
    )


pl = _import_lightning()
torch = importlib.import_module("torch")

Metrics = Accumulator | AccumulatorGroup
Extract = Callable[[Any, Any], tuple[Any, ...]]

_TRUE_KEYS = ("y_true", "target", "targets", "labels", "y")
_PRED_KEYS = ("y_pred", "preds", "probs", "logits", "scores")
_WEIGHT_KEYS = ("weights", "sample_weight")


def default_extract(outputs: Any, batch: Any) -> tuple[Any, Any, Any]:
    """``(y_true, y_pred, weights)`` from what a ``*_step`` returned: a mapping with
    ``y_true`` (or ``target``, ``targets``, ``labels``, ``y``), ``y_pred`` (or ``preds``,
    ``probs``, ``logits``, ``scores``) and, optionally, ``weights`` (or ``sample_weight``)."""
    if not isinstance(outputs, Mapping):
        raise TypeError(
            f"the step returned a {type(outputs).__name__}; return a dict with 'y_true' and "
            f"'y_pred' (and optionally 'weights') from validation_step/test_step, or give "
            f"MetricsCallback an `extract(outputs, batch)` returning (y_true, y_pred[, weights])."
        )

    def first(keys: tuple[str, ...], required: bool) -> Any:
        for key in keys:
            if key in outputs:
                return outputs[key]
        if required:
            raise KeyError(
                f"the step's output has keys {sorted(map(str, outputs))}, none of {list(keys)}; "
                f"return them, or give MetricsCallback an `extract(outputs, batch)`."
            )
        return None

    return first(_TRUE_KEYS, True), first(_PRED_KEYS, True), first(_WEIGHT_KEYS, False)


def _to_host(value: Any) -> Any:
    """A CPU tensor numpy can read (DLPack): detached, off the GPU, bfloat16 widened."""
    if isinstance(value, torch.Tensor):
        value = value.detach()
        if value.device.type != "cpu":
            value = value.cpu()
        if value.dtype in (torch.bfloat16, torch.float16):
            value = value.float()
    return value


def _make(metrics: Metrics | Callable[[], Metrics]) -> Metrics:
    made = metrics() if callable(metrics) and not isinstance(metrics, Accumulator) else metrics
    if not isinstance(made, (Accumulator, AccumulatorGroup)):
        raise TypeError(
            f"`metrics` must be an accumulator, an AccumulatorGroup, or a function returning "
            f"one; got {type(made).__name__}."
        )
    return made.copy() if made is metrics else made


class MetricsCallback(pl.Callback):  # type: ignore[misc,name-defined]
    """Accumulate, sync once, log every scalar and reset, per stage and epoch.

    Args:
        metrics: an accumulator or group (copied for each stage and dataloader) or a function
            returning a new one.
        extract: ``extract(outputs, batch) -> (y_true, y_pred[, weights])`` from what the step
            returned and its batch; by default :func:`default_extract` (a dict with ``y_true``
            and ``y_pred``). The first axis of each must be the batch's samples.
        train: also accumulate training batches (logged at the training epoch end).
        prefix: the key prefix, formatted with ``stage`` (``"train"``, ``"val"``,
            ``"test"``): ``"val/labels/f1_macro"`` by default. With several evaluation
            dataloaders, ``dataloader_<i>/`` follows it.
        exactly_once: leave out the samples a ``DistributedSampler`` padded (see
            :mod:`metricstream.exactly_once`). Batches are trimmed along their first axis.
        scalars: keyword arguments of :func:`~metricstream.scalars.flat_scalars`
            (``zero_division``, ``ignore_absent``, ``per_class``, ``intervals``).
        log: ``False``: compute and keep the results (:attr:`results`, :attr:`synced`) without
            calling ``LightningModule.log``.

    After each epoch end, ``callback.results[stage]`` is the flat dict that was logged and
    ``callback.synced[stage]`` the global accumulator (a list, one per dataloader), for reports,
    plots and intervals.
    """

    def __init__(
        self,
        metrics: Metrics | Callable[[], Metrics],
        *,
        extract: Extract | None = None,
        train: bool = False,
        prefix: str = "{stage}/",
        exactly_once: bool = True,
        scalars: Mapping[str, Any] | None = None,
        log: bool = True,
    ) -> None:
        super().__init__()
        self._template = _make(metrics)
        self._factory = (
            metrics if callable(metrics) and not isinstance(metrics, Accumulator) else None
        )
        self.extract = extract or default_extract
        self.train = bool(train)
        self.prefix = prefix
        self.exactly_once = bool(exactly_once)
        self.scalar_options = dict(scalars or {})
        _quiet_scalars(self._template, self.scalar_options)  # bad options fail here, not later
        self.log = bool(log)
        self.states: dict[str, list[Metrics]] = {}
        self.results: dict[str, dict[str, float]] = {}
        self.synced: dict[str, list[Metrics]] = {}
        self._guards: dict[str, list[PaddingGuard | None]] = {}
        self._restored_train = False

    # ------------------------------------------------------------------ state per stage
    def _new(self) -> Metrics:
        return _make(self._factory) if self._factory is not None else self._template.copy()

    def _start(self, stage: str, loaders: Any, num_loaders: int) -> None:
        self.states[stage] = [self._new() for _ in range(num_loaders)]
        guards: list[PaddingGuard | None] = []
        flat = loaders if isinstance(loaders, (list, tuple)) else [loaders]
        for index in range(num_loaders):
            loader = flat[index] if index < len(flat) else None
            guards.append(self._guard(loader))
        self._guards[stage] = guards

    def _guard(self, loader: Any) -> PaddingGuard | None:
        if not self.exactly_once or loader is None:
            return None
        sampler = getattr(loader, "sampler", None)
        from torch.utils.data import DistributedSampler

        if not isinstance(sampler, DistributedSampler):
            return None
        return PaddingGuard(sampler)

    def _update(self, stage: str, outputs: Any, batch: Any, index: int) -> None:
        parts = tuple(self.extract(outputs, batch))
        if len(parts) not in (2, 3):
            raise ValueError(
                f"`extract` must return (y_true, y_pred) or (y_true, y_pred, weights), got "
                f"{len(parts)} values."
            )
        y_true, y_pred, weights = (*map(_to_host, parts), None)[:3]
        states = self.states[stage]
        if index >= len(states):  # a loader Lightning did not announce: count it all the same
            states.extend(self._new() for _ in range(index + 1 - len(states)))
            self._guards[stage].extend(None for _ in range(index + 1 - len(self._guards[stage])))
        guard = self._guards[stage][index]
        if guard is not None:
            y_true, y_pred, weights = guard.trim(y_true, y_pred, weights)
        if len(y_true) == 0:
            return
        states[index].update(y_true, y_pred, weights)

    def _finish(self, trainer: Any, pl_module: Any, stage: str, key: str) -> None:
        states = self.states.get(stage)
        if not states:
            return
        if trainer.sanity_checking:  # Lightning's few sanity batches are not an epoch
            for member in states:
                member.reset()
            return
        synced = _sync(states, trainer)
        scalars: dict[str, float] = {}
        base = self.prefix.format(stage=key)
        for index, member in enumerate(synced):
            where = base if len(synced) == 1 else f"{base}dataloader_{index}/"
            scalars.update(flat_scalars(member, where, **self.scalar_options))
        self.results[key] = scalars
        self.synced[key] = synced
        if self.log:
            # The values are global already: a sync_dist=True would only add collectives.
            pattern = r"It is recommended to use `self\.log\('" + re.escape(base)
            warnings.filterwarnings("ignore", message=pattern)
            pl_module.log_dict(
                {name: torch.tensor(value, dtype=torch.float64) for name, value in scalars.items()},
                sync_dist=False,
                on_step=False,
                on_epoch=True,
                add_dataloader_idx=False,
            )
        for member in states:
            member.reset()

    # ------------------------------------------------------------------ hooks
    def on_validation_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self._start("val", trainer.val_dataloaders, len(trainer.num_val_batches) or 1)

    def on_validation_batch_end(
        self,
        trainer: Any,
        pl_module: Any,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        self._update("val", outputs, batch, dataloader_idx)

    def on_validation_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        self._finish(trainer, pl_module, "val", "val")

    def on_test_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self._start("test", trainer.test_dataloaders, len(trainer.num_test_batches) or 1)

    def on_test_batch_end(
        self,
        trainer: Any,
        pl_module: Any,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        self._update("test", outputs, batch, dataloader_idx)

    def on_test_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        self._finish(trainer, pl_module, "test", "test")

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        if not self.train:
            return
        if self._restored_train and "train" in self.states:
            # Resumed from a checkpoint in the middle of this epoch: keep what it counted.
            self._restored_train = False
            return
        self.states["train"] = [self._new()]
        self._guards["train"] = [None]  # training samplers shuffle and pad every epoch

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self.train:
            self._update("train", outputs, batch, 0)

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        if self.train:
            self._finish(trainer, pl_module, "train", "train")

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """What the current epochs have counted, per stage and dataloader (plain data)."""
        return {
            "format": 1,
            "states": {
                stage: [member.state_dict() for member in members]
                for stage, members in self.states.items()
            },
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if not isinstance(state_dict, dict) or state_dict.get("format") != 1:
            raise ValueError("the checkpoint holds no MetricsCallback state of format 1.")
        restored: dict[str, list[Metrics]] = {}
        for stage, members in state_dict.get("states", {}).items():
            restored[stage] = [_restore(member) for member in members]
        self.states = restored
        self._guards = {stage: [None] * len(members) for stage, members in restored.items()}
        self._restored_train = "train" in restored


def _quiet_scalars(metrics: Metrics, options: dict[str, Any]) -> dict[str, float]:
    """The scalars of a (typically empty) accumulator, without its 0/0 warnings."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return flat_scalars(metrics, **options)


def _restore(state: dict[str, Any]) -> Metrics:
    if state.get("type") == "AccumulatorGroup":
        return AccumulatorGroup.from_state_dict(state)
    from .base import accumulator_type

    return accumulator_type(state.get("type")).from_state_dict(state)


def _sync(states: list[Metrics], trainer: Any) -> list[Metrics]:
    """Every dataloader's state summed over the ranks: one check, <= 2 collectives in all."""
    import torch.distributed as dist

    if trainer.world_size <= 1 or not (dist.is_available() and dist.is_initialized()):
        return [member.copy() for member in states]
    from .distributed import all_reduce

    if len(states) == 1:
        return [all_reduce(states[0], inplace=False)]
    members: dict[str, Accumulator] = {}
    for index, state in enumerate(states):
        inner = state.members() if isinstance(state, AccumulatorGroup) else {"m": state}
        for name, member in inner.items():
            members[f"{index}.{name}"] = member
    total = all_reduce(AccumulatorGroup(members), inplace=False)
    out: list[Metrics] = []
    for index, state in enumerate(states):
        if isinstance(state, AccumulatorGroup):
            out.append(AccumulatorGroup({name: total[f"{index}.{name}"] for name in state}))
        else:
            out.append(total[f"{index}.m"])
    return out


# ---------------------------------------------------------------------- torchmetrics view
def _make_view_class() -> type:
    try:
        torchmetrics = importlib.import_module("torchmetrics")
    except ImportError as error:
        raise ImportError(
            f"TorchmetricsView needs torchmetrics, which is not installed; {INSTALL_HINT} "
            f"(Lightning brings it) or pip install torchmetrics."
        ) from error

    class TorchmetricsView(torchmetrics.Metric):  # type: ignore[misc,name-defined]
        """A ``torchmetrics.Metric`` whose state is a metricstream accumulator.

        ``update(preds, target, weights=None)`` (torchmetrics' argument order) feeds the
        accumulator; ``compute()`` returns ``flat_scalars(acc)[key]`` as a 0-d float64 tensor,
        or, with ``key=None``, the whole dict of tensors; ``view(preds, target)`` counts the
        batch and returns the batch's own value. Synchronising replaces torchmetrics'
        gathers of every state with one :func:`metricstream.distributed.all_reduce` (one check,
        <= 2 collectives); the local state is restored after ``compute``, as torchmetrics does.
        The state is saved in the module's ``state_dict`` (as the accumulator's bytes).

        Example::

            self.val_f1 = TorchmetricsView(ConfusionAccumulator(10), "f1_macro")
            ...
            self.val_f1.update(logits, y)
            self.log("val/f1", self.val_f1)   # Lightning calls compute() and reset()
        """

        full_state_update = False
        higher_is_better = None
        is_differentiable = False

        def __init__(
            self,
            metrics: Metrics,
            key: str | None = None,
            *,
            scalars: Mapping[str, Any] | None = None,
            **kwargs: Any,
        ) -> None:
            super().__init__(**kwargs)
            self.acc: Metrics = _make(metrics)
            self.scalar_options = dict(scalars or {})
            available = _quiet_scalars(self.acc, self.scalar_options)
            if key is not None and key not in available:
                raise ValueError(f"`key` {key!r} is not one of the scalars: {sorted(available)}.")
            self.key = key
            self._local: Metrics | None = None

        def update(self, preds: Any, target: Any, weights: Any = None) -> None:
            self.acc.update(_to_host(target), _to_host(preds), _to_host(weights))

        def forward(self, preds: Any, target: Any, weights: Any = None) -> Any:
            # torchmetrics' own forward resets and restores its states around the batch; the
            # accumulator is not one of them, so: count the batch, and return its own value.
            self.update(preds, target, weights)
            batch = (
                self.acc.copy().reset().update(_to_host(target), _to_host(preds), _to_host(weights))
            )
            self._forward_cache = self._value(batch)
            return self._forward_cache

        def compute(self) -> Any:
            return self._value(self.acc)

        def _value(self, acc: Metrics) -> Any:
            scalars = flat_scalars(acc, **self.scalar_options)
            if self.key is not None:
                return torch.tensor(scalars[self.key], dtype=torch.float64)
            return {k: torch.tensor(v, dtype=torch.float64) for k, v in scalars.items()}

        def reset(self) -> None:
            super().reset()
            self.acc.reset()

        def sync(
            self,
            dist_sync_fn: Callable | None = None,
            process_group: Any = None,
            should_sync: bool = True,
            distributed_available: Callable | None = None,
        ) -> None:
            if self._is_synced and should_sync:  # type: ignore[has-type]
                raise torchmetrics.utilities.exceptions.TorchMetricsUserError(
                    "The Metric has already been synced."
                )
            available = distributed_available or self.distributed_available_fn
            if not should_sync or not (callable(available) and available()):
                return
            from .distributed import all_reduce

            self._local = self.acc
            self.acc = all_reduce(self.acc, process_group, inplace=False)
            self._cache: Any = {}
            self._is_synced = True

        def unsync(self, should_unsync: bool = True) -> None:
            if not should_unsync:
                return
            if not self._is_synced or self._local is None:
                raise torchmetrics.utilities.exceptions.TorchMetricsUserError(
                    "The Metric has already been un-synced."
                )
            self.acc, self._local = self._local, None
            self._cache = None  # type: ignore[assignment]
            self._is_synced = False

        def state_dict(  # type: ignore[override]
            self, destination: Any = None, prefix: str = "", keep_vars: bool = False
        ) -> Any:
            destination = super().state_dict(
                destination=destination, prefix=prefix, keep_vars=keep_vars
            )
            blob = np.frombuffer(self.acc.to_bytes(), dtype=np.uint8).copy()
            destination[prefix + "metricstream_state"] = torch.from_numpy(blob)
            return destination

        def _load_from_state_dict(
            self,
            state_dict: dict,
            prefix: str,
            local_metadata: dict,
            strict: bool,
            missing_keys: list[str],
            unexpected_keys: list[str],
            error_msgs: list[str],
        ) -> None:
            blob = state_dict.pop(prefix + "metricstream_state", None)
            if blob is not None:
                data = blob.cpu().numpy().tobytes()
                kind = type(self.acc)
                self.acc = kind.from_bytes(data, source=f"state {prefix}metricstream_state")
            super()._load_from_state_dict(
                state_dict,
                prefix,
                local_metadata,
                strict,
                missing_keys,
                unexpected_keys,
                error_msgs,
            )

    return TorchmetricsView


_VIEW: type | None = None


def __getattr__(name: str) -> Any:
    # torchmetrics is imported only when the view is asked for.
    global _VIEW
    if name == "TorchmetricsView":
        if _VIEW is None:
            _VIEW = _make_view_class()
        return _VIEW
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
