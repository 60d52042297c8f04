"""metricstream.huggingface: ComputeMetrics fed by hand, by a real Trainer, and under torchrun.

No downloads: the models are tiny BERTs built from a config with random weights.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the Trainer needs PyTorch")
from sklearn import metrics as skm  # noqa: E402

from metricstream import AccumulatorGroup, ConfusionAccumulator, ScoreAccumulator  # noqa: E402

# transformers takes a while to import, and every test worker collects every module: it is
# imported when a test of this module first runs (the child processes import it themselves).
EvalPrediction: Any = None
ComputeMetrics: Any = None
preprocess_logits: Any = None


@pytest.fixture(autouse=True, scope="module")
def _transformers() -> None:
    pytest.importorskip("transformers", reason="metricstream.huggingface needs transformers")
    _import_transformers()


def _import_transformers() -> None:
    global EvalPrediction, ComputeMetrics, preprocess_logits
    import transformers

    from metricstream import huggingface

    EvalPrediction = transformers.EvalPrediction
    ComputeMetrics, preprocess_logits = huggingface.ComputeMetrics, huggingface.preprocess_logits


K = 3


def test_token_task_by_hand_equals_sklearn():
    # (B, T, V) token logits, labels with -100 on padding; fed in uneven batches.
    rng = np.random.default_rng(0)
    logits = torch.tensor(rng.normal(size=(10, 7, K)), dtype=torch.float32)
    labels = torch.tensor(rng.integers(0, K, size=(10, 7)))
    labels[:, 5:] = -100
    labels[3, :] = -100  # a sequence with no labelled token at all
    shrink = preprocess_logits("argmax")
    compute = ComputeMetrics(ConfusionAccumulator(K), prefix="tokens/")
    for start, stop in ((0, 4), (4, 9), (9, 10)):
        ids = shrink(logits[start:stop], labels[start:stop])
        assert ids.shape == (stop - start, 7)
        out = compute(EvalPrediction(ids, labels[start:stop]), compute_result=stop == 10)
    keep = labels.numpy() != -100
    y, p = labels.numpy()[keep], logits.argmax(-1).numpy()[keep]
    assert out["tokens/num_samples"] == keep.sum()
    assert out["tokens/accuracy"] == skm.accuracy_score(y, p)
    assert out["tokens/f1_macro"] == pytest.approx(skm.f1_score(y, p, average="macro"), rel=1e-12)
    assert compute.acc.num_samples == 0 and compute.last.num_samples == keep.sum()  # reset


def test_scores_without_compute_result_and_class_axis_last():
    # Called as a plain compute_metrics (batch_eval_metrics=False): one call, whole set.
    rng = np.random.default_rng(1)
    probs = (rng.multinomial(29, np.ones(K) / K, size=(6, 5)) + 1) / 32.0  # (B, T, C)
    labels = rng.integers(0, K, size=(6, 5))
    group = AccumulatorGroup(
        labels=ConfusionAccumulator(K), scores=ScoreAccumulator("multiclass", K)
    )
    out = ComputeMetrics(group)((probs, labels))
    y, flat = labels.reshape(-1), probs.reshape(-1, K)
    assert out["labels/accuracy"] == skm.accuracy_score(y, flat.argmax(1))
    want = np.mean([skm.roc_auc_score(y == c, flat[:, c]) for c in range(K)])
    assert out["scores/auroc_macro"] == pytest.approx(want, rel=1e-12)


def test_bad_input_is_named():
    compute = ComputeMetrics(lambda: ConfusionAccumulator(K))
    with pytest.raises(ValueError, match=r"shape \(4,\), which does not start with the labels'"):
        compute(EvalPrediction(np.zeros(4), np.zeros((4, 2))), compute_result=False)
    with pytest.raises(ValueError, match="compute_metrics got no labels"):
        compute(EvalPrediction(np.zeros(4), None))
    with pytest.raises(TypeError, match="`metrics` must be an accumulator"):
        ComputeMetrics("f1")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="`output` must be 'argmax'"):
        preprocess_logits("max")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="`y_true` holds label 7"):
        compute(EvalPrediction(np.zeros(2, dtype=int), np.array([0, 7])), compute_result=False)
    assert compute.acc.num_samples == 0  # nothing counted from the refused batch


# ------------------------------------------------------------------ the real Trainer
def _tiny_model():
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=40,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=16,
        num_labels=K,
    )
    return BertForSequenceClassification(config)


class Rows(torch.utils.data.Dataset):
    def __init__(self, n: int) -> None:
        g = torch.Generator().manual_seed(n)
        self.ids = torch.randint(1, 40, (n, 8), generator=g)
        self.labels = torch.randint(0, K, (n,), generator=g)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.labels[i]}


def _evaluate(out_dir: str, n: int) -> tuple[dict[str, float], np.ndarray, np.ndarray]:
    from transformers import Trainer, TrainingArguments

    model = _tiny_model()
    data = Rows(n)
    args = TrainingArguments(
        output_dir=out_dir,
        per_device_eval_batch_size=4,
        batch_eval_metrics=True,
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
    )
    compute = ComputeMetrics(ConfusionAccumulator(K))
    trainer = Trainer(
        model=model,
        args=args,
        eval_dataset=data,
        compute_metrics=compute,
        preprocess_logits_for_metrics=preprocess_logits("argmax"),
    )
    metrics = trainer.evaluate()
    with torch.no_grad():  # the reference: one forward pass per sample, in this process
        model.eval()
        pred = np.array(
            [int(model(input_ids=data.ids[i : i + 1]).logits.argmax()) for i in range(n)]
        )
    return metrics, data.labels.numpy(), pred


def _check(metrics: dict[str, float], y: np.ndarray, pred: np.ndarray) -> None:
    assert metrics["eval_num_samples"] == len(y)
    assert metrics["eval_accuracy"] == skm.accuracy_score(y, pred)
    for average in ("macro", "weighted"):
        want = skm.f1_score(y, pred, average=average, zero_division=0)
        assert metrics[f"eval_f1_{average}"] == pytest.approx(want, rel=1e-12, abs=1e-15)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::metricstream.exceptions.UndefinedMetricWarning")
def test_trainer_one_process_equals_sklearn(tmp_path):
    metrics, y, pred = _evaluate(str(tmp_path), 11)
    _check(metrics, y, pred)


def _torchrun_main(out: str) -> None:
    import warnings

    warnings.simplefilter("ignore")
    _import_transformers()
    metrics, y, pred = _evaluate(os.path.join(out, "trainer"), 11)  # 11: uneven over 2 ranks
    rank = int(os.environ["RANK"])
    Path(out, f"rank{rank}.json").write_text(
        json.dumps({"metrics": metrics, "y": y.tolist(), "pred": pred.tolist()})
    )


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_torchrun_two_processes_uneven_eval_set_equals_sklearn(tmp_path):
    torchrun = shutil.which("torchrun") or str(Path(sys.executable).with_name("torchrun"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "OMP_NUM_THREADS": "1"}
    out = str(tmp_path)
    run = subprocess.run(
        [
            torchrun,
            "--nproc_per_node=2",
            f"--master_port={_free_port()}",
            __file__,
            "torchrun",
            out,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    y, pred = np.array(ranks[0]["y"]), np.array(ranks[0]["pred"])
    for record in ranks:
        _check(record["metrics"], y, pred)


if __name__ == "__main__" and len(sys.argv) > 2 and sys.argv[1] == "torchrun":
    _torchrun_main(sys.argv[2])
