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


def test_fractional_weight_column_makes_a_weighted_accumulator(tmp_path):
    rng = np.random.default_rng(3)
    y = rng.integers(0, 3, 200)
    p = rng.dirichlet(np.ones(3), 200).astype(np.float32)
    w = np.round(rng.uniform(0, 3, 200), 2)
    path = tmp_path / "weighted.csv"
    lines = ["y_true,p_0,p_1,p_2,w"] + [
        f"{t},{a!r},{b!r},{c!r},{v!r}"
        for t, (a, b, c), v in zip(y, p.tolist(), w.tolist(), strict=True)
    ]
    path.write_text("\n".join(lines) + "\n")
    report = score_summary(path, "p_*", weight="w")
    acc = report.accumulator
    assert acc.config()["weighted"] is True
    direct = ScoreAccumulator("multiclass", 3, weighted=True).update(y, p, w)
    assert_same_state(acc, direct)
    assert acc.num_samples == pytest.approx(w.sum())  # counted as given, not truncated
    exact = skm.roc_auc_score(y, p.astype(np.float64), multi_class="ovr", sample_weight=w)
    bound = acc.auroc(with_bound=True)  # float32 probabilities share bins: bounded
    assert bound.lower - 1e-12 <= exact <= bound.upper + 1e-12
    assert report.confusion is not None and report.confusion.config()["weighted"] is True
    np.testing.assert_allclose(
        report.confusion.confusion_matrix(),
        skm.confusion_matrix(y, p.argmax(axis=1), sample_weight=w),
    )
    # The .npz reader too.
    archive = tmp_path / "weighted.npz"
    np.savez(archive, y_true=y, scores=p, w=w)
    assert_same_state(score_summary(archive, "scores", weight="w").accumulator, direct)


def test_many_score_columns_are_refused(tmp_path):
    # 100,000 matching columns: refused by count (a list lookup per column once took minutes;
    # the lookup is a set now, and the time is benchmarks' to measure, not this test's)
    path = tmp_path / "wide.csv"
    names = [f"p_{i}" for i in range(100_000)]
    path.write_text("y_true," + ",".join(names) + "\n0," + ",".join(["0"] * len(names)) + "\n")
    with pytest.raises(InputError, match=r"matches 100,000 columns, more classes than 4,096"):
        score_summary(path, "p_*")


def _npz_with_header(path: Path, members: dict[str, tuple[tuple[int, ...], str, bytes]]) -> None:
    """An .npz whose members' headers announce ``shape`` whatever data follows them."""
    import io
    import zipfile

    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, (shape, dtype, data) in members.items():
            buffer = io.BytesIO()
            header = {"descr": np.dtype(dtype).str, "fortran_order": False, "shape": shape}
            np.lib.format.write_array_header_1_0(buffer, header)
            archive.writestr(name + ".npy", buffer.getvalue() + data)


def test_npz_members_are_read_by_their_declared_size_within_the_readers_caps(tmp_path):
    # A few bytes announcing 2**40 x 2 scores: refused from the headers (rows differ), no read.
    path = tmp_path / "bomb.npz"
    _npz_with_header(
        path,
        {"y_true": ((4,), "<i8", bytes(32)), "scores": ((2**40, 2), "<f4", bytes(64))},
    )
    with pytest.raises(InputError, match=r"shape \(1099511627776, 2\), which does not fit"):
        score_summary(path, "scores")
    # More classes than the CSV reader's cap: refused before any array is read.
    _npz_with_header(
        path, {"y_true": ((2,), "<i8", bytes(16)), "scores": ((2, 5000), "<f4", bytes(8))}
    )
    with pytest.raises(InputError, match="5,000 classes, more than 4,096"):
        score_summary(path, "scores")
    # A sample beyond the record cap (4 MiB): refused from the header.
    _npz_with_header(
        path,
        {"y_true": ((2, 1024, 1024), "<i8", b""), "scores": ((2, 2, 1024, 1024), "<f4", b"")},
    )
    with pytest.raises(InputError, match="more than a record may"):
        score_summary(path, "scores")
    # Fewer elements than announced: the file is truncated, said so (after what was read).
    _npz_with_header(
        path,
        {
            "y_true": ((3,), "<i8", np.array([0, 1, 0]).tobytes()),
            "scores": ((3,), "<f8", np.array([0.2, 0.7]).tobytes()),
        },
    )
    with pytest.raises(InputError, match="ends after 2 elements"):
        score_summary(path, "scores")


def test_npz_scores_stream_in_bounded_memory(tmp_path, no_background_compiles):
    import tracemalloc

    rows = 1 << 21
    rng = np.random.default_rng(4)
    y = rng.integers(0, 2, rows)
    scores = np.zeros((rows, 2), np.float32)
    scores[np.arange(rows), y] = 1.0  # compresses to a few hundred kB; 16 MiB when loaded
    path = tmp_path / "big.npz"
    np.savez_compressed(path, y_true=y, scores=scores)
    small = tmp_path / "small.npz"  # the same dtypes first: compiles are not the reader's
    np.savez_compressed(small, y_true=y[:1000], scores=scores[:1000])
    score_summary(small, "scores")
    tracemalloc.start()
    try:
        report = score_summary(path, "scores")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert report.rows == rows
    assert report.accumulator.auroc() == 1.0
    # The state (two classes) and a block of rows with its temporaries; loading the two
    # members whole, as the reader once did, takes 32 MiB on top of the state.
    state = sum(a.nbytes for a in report.accumulator.state_arrays().values())
    assert peak < state + (20 << 20), peak
