"""The command line says what it read and refuses what it cannot read sensibly: the truth
column of ``--scores``, scores mistaken for labels, files whose state or expansion the file
cannot justify, option values out of range, and header-only files (no abort at exit)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from metricstream.cli import main

from .test_cli_hostile import assert_bounded, measure, one_line_error


def _run(capsys, *args: str | Path) -> tuple[int, str, str]:
    try:
        code = main([str(a) for a in args])
    except SystemExit as stop:
        code = int(stop.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


_PRED_LABEL_PROBS = (
    "pred,label,prob_a,prob_b,prob_c\n"
    "0,0,0.7,0.2,0.1\n1,2,0.1,0.6,0.3\n2,2,0.1,0.2,0.7\n1,1,0.2,0.5,0.3\n"
)
_SCORES = "y_true,p_0,p_1,p_2\n0,0.7,0.2,0.1\n2,0.1,0.6,0.3\n2,0.1,0.2,0.7\n1,0.2,0.5,0.3\n"


# ---------------------------------------------------------------------------- truth column
def test_scores_without_y_true_do_not_guess_the_truth_column(tmp_path, capsys):
    path = _write(tmp_path / "p.csv", _PRED_LABEL_PROBS)
    code, out, err = _run(capsys, "report", path, "--scores", "prob_*")
    assert code == 2 and out == ""
    assert "which column holds the true labels" in err and "'pred', 'label'" in err
    assert err.count("\n") == 1


def test_scores_print_the_truth_column_they_read(tmp_path, capsys):
    path = _write(tmp_path / "p.csv", _PRED_LABEL_PROBS)
    code, out, _ = _run(capsys, "report", path, "--scores", "prob_*", "--true", "label")
    assert code == 0
    assert "truth 'label'" in out and "y_true" not in out
    # argmax of the scores against `label`: rows 1 and 2 disagree (classes 1 vs 2, 2 vs 2...)
    assert "accuracy  0.7500" in out
    # the one column besides the scores and --pred is the truth
    code, out, _ = _run(capsys, "report", path, "--scores", "prob_*", "--pred", "pred")
    assert code == 0 and "truth 'label'" in out


def test_scores_with_y_true_still_default_to_it(tmp_path, capsys):
    path = _write(tmp_path / "p.csv", _SCORES)
    code, out, _ = _run(capsys, "report", path, "--scores", "p_*")
    assert code == 0 and "truth 'y_true'" in out


def test_scores_in_an_npz_without_y_true_need_true(tmp_path, capsys):
    path = tmp_path / "p.npz"
    np.savez(path, pred=[0, 1], label=[0, 1], scores=[[0.9, 0.1], [0.2, 0.8]])
    code, _, err = _run(capsys, "report", path, "--scores", "scores")
    assert code == 2 and "which column holds the true labels" in err
    code, out, _ = _run(capsys, "report", path, "--scores", "scores", "--true", "label")
    assert code == 0 and "truth 'label'" in out


# ---------------------------------------------------------------------------- forgotten --scores
def test_a_forgotten_scores_option_suggests_scores_not_labels_str(tmp_path, capsys):
    path = _write(tmp_path / "p.csv", _SCORES)
    code, _, err = _run(capsys, "report", path)
    assert code == 1
    assert "--scores 'p_*'" in err
    assert "pass `--labels str`" not in err


def test_labels_str_refuses_fractional_numbers_instead_of_counting_them(tmp_path, capsys):
    path = _write(tmp_path / "p.csv", _SCORES)
    for reader in ("auto", "python"):
        code, out, err = _run(capsys, "report", path, "--labels", "str", "--reader", reader)
        assert code == 2 and out == ""
        assert "fractional number, not a class name" in err and "--scores 'p_*'" in err
    # whole numbers still read as names
    path = _write(tmp_path / "q.csv", "y_true,y_pred\n1.0,2.0\n2.0,2.0\n")
    code, out, _ = _run(capsys, "report", path, "--labels", "str")
    assert code == 0 and "samples: 2" in out


# ---------------------------------------------------------------------------- bounds
def test_multilabel_csv_with_a_huge_label_index_is_refused_by_max_classes(tmp_path, capsys):
    path = _write(tmp_path / "m.csv", "y_true,y_pred\n30000000,1\n")
    code, _, err = _run(capsys, "report", path, "--multilabel")
    assert code == 1 and "limit of 4,096" in err and "--max-classes" in err
    # the option now applies to this mode
    code, _, err = _run(capsys, "report", path, "--multilabel", "--max-classes", "10")
    assert code == 1 and "limit of 10 " in err
    names = _write(tmp_path / "n.csv", "y_true,y_pred\na|b|c,a\n")
    code, _, err = _run(capsys, "report", names, "--multilabel", "--max-classes", "2")
    assert code == 1 and "3 distinct label names" in err


@pytest.mark.slow
def test_multilabel_npz_is_streamed_not_loaded_whole(tmp_path, no_background_compiles):
    import tracemalloc

    from metricstream.multilabel import read_multilabel_npz

    path = tmp_path / "bomb.npz"
    rows, labels = 80_000, 1000
    np.savez_compressed(
        path, y_true=np.zeros((rows, labels), np.uint8), y_pred=np.zeros((rows, labels), np.uint8)
    )
    assert path.stat().st_size < 1 << 20  # 160 MB of entries in a few hundred kB
    read_multilabel_npz(path)  # compile first
    tracemalloc.start()
    try:
        acc = read_multilabel_npz(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert acc.num_samples == rows
    assert peak < 48 << 20, f"{peak:,} bytes traced for {rows * labels * 2:,} bytes of members"


def test_multilabel_npz_refuses_too_many_labels(tmp_path):
    from metricstream.multilabel import read_multilabel_npz

    path = tmp_path / "wide.npz"
    np.savez(path, y_true=np.zeros((1, 50), np.uint8), y_pred=np.zeros((1, 50), np.uint8))
    with pytest.raises(ValueError, match="50 labels.*limit of 10"):
        read_multilabel_npz(path, max_labels=10)


def test_multilabel_npz_still_reads_names_weights_and_scores(tmp_path):
    from metricstream import MultilabelAccumulator
    from metricstream.multilabel import read_multilabel_npz

    path = tmp_path / "ok.npz"
    y_true = np.random.default_rng(0).integers(0, 2, (300, 4))
    y_pred = np.random.default_rng(1).random((300, 4))
    weights = np.arange(300) % 3 + 0.5
    np.savez(path, y_true=y_true, y_pred=y_pred, weights=weights, label_names=list("abcd"))
    acc = read_multilabel_npz(path, threshold=0.3)
    expected = MultilabelAccumulator(4, list("abcd"), threshold=0.3, weighted=True).update(
        y_true, y_pred, weights
    )
    assert acc == expected


def test_a_score_npz_that_expands_a_thousandfold_is_refused(tmp_path, capsys):
    path = tmp_path / "s.npz"
    np.savez_compressed(path, y_true=np.zeros(80_000_000, np.int8), scores=np.zeros(4, np.float32))
    code, _, err = _run(capsys, "report", path, "--scores", "scores")
    assert code == 1 and "expand to 80,000,2" in err and err.count("\n") == 1


def test_thousands_of_score_columns_in_a_tiny_file_are_refused(tmp_path, capsys):
    header = ",".join(f"p_{i}" for i in range(5000))
    path = _write(tmp_path / "w.csv", f"y_true,{header}\n0,{','.join(['0.0002'] * 5000)}\n")
    code, _, err = _run(capsys, "report", path, "--scores", "p_*")
    assert code == 2 and "5,000 columns" in err and "--max-classes" in err
    path = _write(tmp_path / "v.csv", f"y_true,{header[: header.index(',p_3000')]}\n")
    with open(path, "a", encoding="utf-8") as file:
        file.write("0," + ",".join(["0.0003"] * 3000) + "\n")
    code, _, err = _run(capsys, "report", path, "--scores", "p_*")
    assert code == 2 and "MiB of state" in err and "--max-classes 3000" in err


@pytest.mark.parametrize("bins", ["0", "-3", "100000000"])
def test_calibration_bins_out_of_range_are_one_line_usage_errors(tmp_path, capsys, bins):
    path = _write(tmp_path / "p.csv", _SCORES)
    code, _, err = _run(capsys, "report", path, "--scores", "p_*", "--calibration-bins", bins)
    assert code == 2 and "`--calibration-bins` must be between 1 and" in err
    assert err.count("\n") == 1


def test_score_plots_are_checked_before_reading(tmp_path, capsys):
    path = _write(tmp_path / "p.csv", _SCORES)
    missing = tmp_path / "nowhere" / "roc.png"
    code, _, err = _run(capsys, "report", path, "--scores", "p_*", "--plot-roc", missing)
    assert code == 2 and "does not exist" in err


def test_an_empty_scores_pattern_is_a_usage_error(tmp_path, capsys):
    path = _write(tmp_path / "p.csv", _SCORES)
    code, _, err = _run(capsys, "report", path, "--scores", "")
    assert code == 2 and "needs a pattern" in err


# ---------------------------------------------------------------------------- header-only files
@pytest.mark.parametrize("text", ["y_true,y_pred\n", "y_true,y_pred", "y_true,y_pred\n\n\n", ""])
def test_a_file_without_rows_is_one_line(tmp_path, capsys, text):
    path = _write(tmp_path / "h.csv", text)
    for reader in ("auto", "python"):
        code, _, err = _run(capsys, "report", path, "--reader", reader)
        assert code == 1 and err.count("\n") == 1
        assert "no data rows" in err or "the file is empty" in err


def test_a_header_only_file_never_touches_pyarrow(tmp_path, monkeypatch):
    pacsv = pytest.importorskip("pyarrow.csv")
    from metricstream.io.readers import open_source

    def refuse(*args, **kwargs):
        raise AssertionError("pyarrow's streaming reader was opened for a file without rows")

    monkeypatch.setattr(pacsv, "open_csv", refuse)
    path = _write(tmp_path / "h.csv", "y_true,y_pred\n")
    source = open_source(path)
    assert source.columns == ["y_true", "y_pred"]
    assert list(source.read(["y_true", "y_pred"], {"y_true": "int", "y_pred": "int"})) == []


@pytest.mark.slow  # ~16 runs of a fresh interpreter
def test_a_header_only_file_never_aborts_the_interpreter(tmp_path):
    pytest.importorskip("pyarrow")
    path = _write(tmp_path / "h.csv", "y_true,y_pred\n")
    for _ in range(16):  # it aborted about one run in four: 0.75**16 < 1 %
        run = measure(tmp_path, "report", path, timeout=60)
        assert "no data rows" in one_line_error(run)
        assert_bounded(run, 60)


@pytest.mark.slow
def test_the_module_runs_as_a_command(tmp_path):
    path = _write(tmp_path / "p.csv", _SCORES)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "metricstream",
            "report",
            path,
            "--scores",
            "p_*",
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert '"scores"' in done.stdout
