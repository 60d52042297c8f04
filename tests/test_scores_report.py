"""score_summary on the shipped digits probabilities, other file layouts, and the plots."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from sklearn import metrics as skm

from metricstream.io.readers import InputError
from metricstream.score_report import score_summary, summary_rows
from metricstream.scores import ScoreAccumulator

DATA = Path(__file__).resolve().parents[1] / "examples" / "data" / "digits_scores.csv"


def assert_same_state(a: ScoreAccumulator, b: ScoreAccumulator) -> None:
    """Counts equal; float sums equal up to the order of additions (chunks)."""
    assert a.config() == b.config()
    left, right = a.state_arrays(), b.state_arrays()
    for name in left:
        if name in ("confidence", "losses"):
            np.testing.assert_allclose(left[name], right[name], rtol=1e-12)
        else:
            np.testing.assert_array_equal(left[name], right[name], err_msg=name)


@pytest.fixture(scope="module")
def digits() -> tuple[np.ndarray, np.ndarray]:
    table = np.loadtxt(DATA, delimiter=",", skiprows=1, dtype=np.float64)
    return table[:, 0].astype(np.int64), table[:, 1:].astype(np.float32)


@pytest.mark.filterwarnings("ignore:The y_prob values do not sum to one")
@pytest.mark.parametrize("prefer_pyarrow", [True, False], ids=["pyarrow", "stdlib"])
def test_digits_summary_equals_direct_accumulation_and_sklearn(digits, prefer_pyarrow):
    y, scores = digits
    report = score_summary(DATA, "p_*", prefer_pyarrow=prefer_pyarrow)
    assert report.rows == len(y) == 899
    assert report.class_names == [str(d) for d in range(10)]
    direct = ScoreAccumulator("multiclass", 10).update(y, scores)
    assert_same_state(report.accumulator, direct)
    rows = summary_rows(report.accumulator)
    exact = skm.roc_auc_score(y, scores.astype(np.float64), multi_class="ovr")
    assert abs(rows["auroc_macro"] - exact) <= rows["auroc_error_bound"] + 1e-12
    assert rows["top_1_accuracy"] == pytest.approx(skm.top_k_accuracy_score(y, scores, k=1))
    assert rows["top_5_accuracy"] == pytest.approx(skm.top_k_accuracy_score(y, scores, k=5))
    assert rows["log_loss"] == pytest.approx(skm.log_loss(y, scores.astype(np.float64)), rel=1e-6)
    assert report.confusion is not None
    np.testing.assert_array_equal(
        report.confusion.confusion_matrix(), skm.confusion_matrix(y, scores.argmax(axis=1))
    )
    text = report.text()
    assert "AUROC (macro, one-vs-rest)" in text and "top-5 accuracy" in text
    assert report.markdown().startswith("| score metric | value |")
    data = report.data()
    json.dumps(data, allow_nan=False)
    assert set(data["per_class"]) == {str(d) for d in range(10)}


def test_text_labels_map_through_column_suffixes(tmp_path):
    path = tmp_path / "named.csv"
    path.write_text(
        "label,p_cat,p_dog,weight\ncat,0.9,0.1,1\ndog,0.3,0.7,2\nvoid,0.5,0.5,1\ncat,0.4,0.6,1\n"
    )
    report = score_summary(path, "p_*", truth="label", weight="weight", ignore="void")
    assert report.class_names == ["cat", "dog"]
    acc = report.accumulator
    assert acc.num_samples == 4  # weights 1 + 2 + 1, the void row skipped
    expected = ScoreAccumulator("multiclass", 2).update(
        [0, 1, 0], [[0.9, 0.1], [0.3, 0.7], [0.4, 0.6]], [1, 2, 1]
    )
    np.testing.assert_array_equal(acc.state_arrays()["curves"], expected.state_arrays()["curves"])
    with pytest.raises(InputError, match="'bird' at row 2"):
        bad = tmp_path / "bad.csv"
        bad.write_text("y_true,p_cat,p_dog\ncat,0.9,0.1\nbird,0.3,0.7\n")
        score_summary(bad, "p_*")


def test_single_score_column_is_binary_and_errors_name_the_file(tmp_path):
    path = tmp_path / "binary.csv"
    path.write_text("y_true,score\n0,0.1\n1,0.8\n1,0.35\n0,0.4\n")
    report = score_summary(path, "score")
    assert report.accumulator.task == "binary"
    assert summary_rows(report.accumulator)["auroc"] == 0.75
    assert report.confusion is not None
    np.testing.assert_array_equal(report.confusion.confusion_matrix(), [[2, 0], [1, 1]])
    with pytest.raises(InputError, match="no column matches"):
        score_summary(path, "p_*")
    bad = tmp_path / "bad.csv"
    bad.write_text("y_true,score\n0,0.1\n1,1.8\n")
    with pytest.raises(InputError, match=r"bad.csv: row 2: .*holds 1.8 at.*\[0, 1\]"):
        score_summary(bad, "score")


def test_npz_segmentation_scores(tmp_path):
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(3, 4, 6, 5)).astype(np.float32)
    labels = rng.integers(0, 4, size=(3, 6, 5))
    path = tmp_path / "seg.npz"
    np.savez(path, y_true=labels, logits=logits)
    report = score_summary(path, "logits", logits=True)
    direct = ScoreAccumulator("multiclass", 4, logits=True).update(labels, logits)
    assert_same_state(report.accumulator, direct)
    assert report.rows == 3


def test_plots_draw_every_class(tmp_path, digits):
    pytest.importorskip("matplotlib")
    y, scores = digits
    acc = ScoreAccumulator("multiclass", 10).update(y, scores)
    ax = acc.plot_roc()
    assert len(ax.lines) == 10 + 1 + 1  # classes, micro-average, diagonal
    ax = acc.plot_precision_recall(labels=[0, 3])
    assert len(ax.lines) == 2 + 1
    ax = acc.plot_calibration(10)
    assert "ECE" in ax.get_title()
    report = score_summary(DATA)
    for name in ("roc", "pr", "calibration"):
        path = tmp_path / f"{name}.png"
        {
            "roc": report.plot_roc,
            "pr": report.plot_precision_recall,
            "calibration": report.plot_calibration,
        }[name](path)
        assert path.stat().st_size > 1000
    binary = ScoreAccumulator("binary").update([0, 1, 1, 0], [0.2, 0.7, 0.4, 0.1])
    assert len(binary.plot_roc().lines) == 2
    with pytest.raises(ValueError, match="labels"):
        acc.plot_roc(labels=[12])


def test_command_line_options(tmp_path):
    import argparse

    from metricstream.score_report import add_score_arguments, report_from_args, write_score_plots

    parser = argparse.ArgumentParser()
    parser.add_argument("path")
    add_score_arguments(parser)
    args = parser.parse_args(
        [
            str(DATA),
            "--scores",
            "p_*",
            "--calibration-bins",
            "10",
            "--plot-calibration",
            str(tmp_path / "cal.png"),
        ]
    )
    report = report_from_args(args)
    assert report is not None and report.n_bins == 10
    if __import__("importlib").util.find_spec("matplotlib") is not None:
        assert write_score_plots(report, args) == [tmp_path / "cal.png"]
    assert report_from_args(parser.parse_args([str(DATA)])) is None
    with pytest.raises(InputError, match="needs `--scores`"):
        report_from_args(parser.parse_args([str(DATA), "--plot-roc", "x.png"]))
