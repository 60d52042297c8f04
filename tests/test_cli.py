"""The ``metricstream report`` command, run as a separate process: outputs, exit codes, one-line
errors with row numbers, text labels, weights, written files, and when progress is drawn."""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import sklearn.metrics as skm

from metricstream import ConfusionAccumulator
from metricstream import cli as cli_module

EXAMPLES = Path(__file__).parent.parent / "examples" / "data"
DIGITS = EXAMPLES / "digits_predictions.csv"
HAVE_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None
HAVE_TQDM = importlib.util.find_spec("tqdm") is not None
needs_matplotlib = pytest.mark.skipif(not HAVE_MATPLOTLIB, reason="matplotlib is not installed")


def run(*args: str | os.PathLike, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """``python -m metricstream ARGS`` with pipes for stdout and stderr (not a terminal)."""
    return subprocess.run([sys.executable, "-m", "metricstream", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)


def digits_columns() -> tuple[np.ndarray, np.ndarray]:
    table = np.loadtxt(DIGITS, delimiter=",", skiprows=1, usecols=(0, 1), dtype=np.int64)
    return table[:, 0], table[:, 1]


def write_csv(path: Path, header: list[str], rows) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as file:
        writer = csv.writer(file)
        writer.writerow(header)
        writer.writerows(rows)
    return path


# ---------------------------------------------------------------------- outputs
def test_report_prints_the_library_summary_and_writes_json_and_markdown(tmp_path):
    y_true, y_pred = digits_columns()
    acc = ConfusionAccumulator(10, class_names=[str(i) for i in range(10)]).update(y_true, y_pred)
    result = run("report", DIGITS, "--json", tmp_path / "r.json", "--markdown", tmp_path / "r.md")
    assert result.returncode == 0, result.stderr
    header, _, body = result.stdout.partition("\n\n")
    assert header == f"{DIGITS}: 899 rows; truth 'y_true', prediction 'y_pred'"
    assert body.rstrip("\n") == acc.summary("text")
    assert json.loads((tmp_path / "r.json").read_text()) == acc.summary("dict")
    assert (tmp_path / "r.md").read_text() == acc.summary("markdown") + "\n"
    assert result.stderr.splitlines() == [f"metricstream: wrote {tmp_path / 'r.json'}",
                                          f"metricstream: wrote {tmp_path / 'r.md'}"]


def test_json_to_stdout_matches_the_library_report():
    y_true, y_pred = digits_columns()
    acc = ConfusionAccumulator(10, class_names=[str(i) for i in range(10)]).update(y_true, y_pred)
    result = run("report", DIGITS, "--format", "json")
    assert result.returncode == 0
    assert json.loads(result.stdout) == acc.summary("dict")
    assert result.stderr == ""


def test_text_labels_equal_sklearn_classification_report():
    named = EXAMPLES / "digits_named.csv"
    with open(named, encoding="utf-8") as file:
        rows = list(csv.DictReader(file))
    y_true = [row["y_true"] for row in rows]
    y_pred = [row["y_pred"] for row in rows]
    result = run("report", named, "--format", "sklearn")
    assert result.returncode == 0
    _, _, report = result.stdout.partition("\n\n")
    assert report == skm.classification_report(y_true, y_pred).rstrip() + "\n"


def test_a_class_seen_only_in_predictions_gets_a_row(tmp_path):
    path = write_csv(tmp_path / "p.csv", ["y_true", "y_pred"],
                     [["cat", "cat"], ["dog", "dog"], ["dog", "fox"], ["cat", "dog"]])
    result = run("report", path, "--format", "json", "--zero-division", "nan")
    data = json.loads(result.stdout)
    assert [c["name"] for c in data["per_class"]] == ["cat", "dog", "fox"]
    fox = data["per_class"][2]
    assert (fox["support"], fox["predicted"], fox["precision"], fox["recall"]) == (0, 1, 0.0, None)


def test_weights_column_and_ignore(tmp_path):
    rows = [[0, 0, 2.5], [1, 0, 1.0], [1, 1, 0.5], [255, 1, 9.0], [0, 1, 1.0]]
    path = write_csv(tmp_path / "p.csv", ["y_true", "y_pred", "w"], rows)
    result = run("report", path, "--weight", "w", "--ignore", "255", "--format", "json")
    assert result.returncode == 0, result.stderr
    kept = [r for r in rows if r[0] != 255]
    expected = skm.confusion_matrix([r[0] for r in kept], [r[1] for r in kept],
                                    sample_weight=[r[2] for r in kept])
    acc = ConfusionAccumulator.from_matrix(expected, class_names=["0", "1"], weighted=True)
    assert json.loads(result.stdout) == acc.summary("dict")
    text = run("report", path, "--weight", "w", "--ignore", "255")
    assert text.stdout.splitlines()[0].endswith("weights 'w'; ignoring true label 255")


def test_classes_fix_the_order(tmp_path):
    path = write_csv(tmp_path / "p.csv", ["t", "p"], [["b", "a"], ["a", "a"]])
    result = run("report", path, "--true", "t", "--pred", "p", "--classes", "b,a,c",
                 "--format", "json", "--zero-division", "0")
    assert [c["name"] for c in json.loads(result.stdout)["per_class"]] == ["b", "a", "c"]


def test_segmentation_example_reads_masks_and_class_names():
    result = run("report", EXAMPLES / "digits_segmentation.npz", "--ignore", "255")
    assert result.returncode == 0, result.stderr
    assert "57,344 rows" not in result.stdout
    assert "(224, 16, 16)" in result.stdout.splitlines()[0]
    assert "background" in result.stdout


def test_undefined_metrics_warn_once_on_one_line(tmp_path):
    path = write_csv(tmp_path / "p.csv", ["y_true", "y_pred"], [["a", "a"], ["b", "a"]])
    result = run("report", path)
    assert result.returncode == 0
    warnings = [line for line in result.stderr.splitlines() if "warning" in line]
    assert warnings and all(line.startswith("metricstream: warning: ") for line in warnings)
    assert len(warnings) == len(set(warnings))


# ---------------------------------------------------------------------- plots
@needs_matplotlib
def test_plots_are_written_as_png(tmp_path):
    result = run("report", DIGITS, "--plot", "cm.png", "--plot-per-class", "bars.png",
                 "--normalize", "true", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    for name in ("cm.png", "bars.png"):
        data = (tmp_path / name).read_bytes()
        assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 20_000


def test_plot_without_matplotlib_is_a_usage_error(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # what an absent package looks like
    with pytest.raises(SystemExit) as caught:
        cli_module.main(["report", str(DIGITS), "--plot", "x.png"])
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert err == ("metricstream: error: writing plots needs matplotlib, which is not installed; "
                   "install it with `pip install 'metricstream[plot]'`.\n")


# ---------------------------------------------------------------------- exit codes and errors
@pytest.mark.parametrize(
    ("args", "message"),
    [(["report"], "the following arguments are required: PATH"),
     (["report", "x.csv", "--bogus"], "unrecognized arguments: --bogus"),
     ([], "the following arguments are required: COMMAND")],
    ids=["no-path", "unknown-option", "no-command"])
def test_bad_usage_exits_2(args, message):
    result = run(*args)
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1].startswith(f"metricstream: error: {message}")


def test_missing_file_is_one_line_and_exit_2(tmp_path):
    result = run("report", tmp_path / "missing.csv")
    assert result.returncode == 2
    assert result.stderr == f"metricstream: error: {tmp_path / 'missing.csv'}: no such file.\n"
    assert result.stdout == ""


def test_unknown_column_is_one_line_and_exit_2():
    result = run("report", DIGITS, "--pred", "prediction")
    assert result.returncode == 2
    assert result.stderr == (
        f"metricstream: error: {DIGITS}: no column 'prediction' (given by `--pred`); the file's "
        f"columns are 'y_true', 'y_pred', 'confidence'.\n")


@pytest.mark.parametrize("reader", ["pyarrow", "python"])
def test_unparsable_row_names_file_column_and_row(tmp_path, reader):
    if reader == "pyarrow" and importlib.util.find_spec("pyarrow") is None:
        pytest.skip("pyarrow is not installed")
    # Past the first megabyte (from which pyarrow infers the column types) and the first 1000
    # rows (from which the standard library does): the column was read as integers.
    lines = ["y_true,y_pred"] + [f"{i % 4},{i % 3}" for i in range(300_000)]
    lines[290_001] = "2,two"  # row 290001, line 290002
    (tmp_path / "p.csv").write_text("\n".join(lines) + "\n")
    result = run("report", tmp_path / "p.csv", "--reader", reader)
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr == (
        f"metricstream: error: {tmp_path / 'p.csv'}: column 'y_pred', row 290001: 'two' is not an "
        f"integer, and the column's labels are read as numbers; pass `--labels str` to read them "
        f"as class names.\n")


@pytest.mark.parametrize("reader", ["pyarrow", "python"])
def test_labels_int_reports_the_first_text_label(tmp_path, reader):
    if reader == "pyarrow" and importlib.util.find_spec("pyarrow") is None:
        pytest.skip("pyarrow is not installed")
    path = write_csv(tmp_path / "p.csv", ["y_true", "y_pred", "w"],
                     [[0, 0, 1], [1, 1, 1], [2, "two", 1]])
    result = run("report", path, "--labels", "int", "--reader", reader)
    assert result.returncode == 1
    assert f"{path}: column 'y_pred', row 3: 'two' is not an integer" in result.stderr
    bad_weight = write_csv(tmp_path / "w.csv", ["y_true", "y_pred", "w"],
                           [[0, 0, 1], [1, 1, "heavy"]])
    result = run("report", bad_weight, "--weight", "w", "--reader", reader)
    assert result.returncode == 1
    assert result.stderr == (f"metricstream: error: {bad_weight}: column 'w', row 2: 'heavy' is "
                             f"not a number; weights must be numbers.\n")


def test_negative_weight_names_its_row(tmp_path):
    path = write_csv(tmp_path / "p.csv", ["y_true", "y_pred", "w"], [[0, 0, 1], [1, 1, -2]])
    result = run("report", path, "--weight", "w")
    assert result.returncode == 1
    assert result.stderr == (f"metricstream: error: {path}: column 'w', row 2: weight -2.0 is "
                             f"not a finite non-negative number.\n")


# ---------------------------------------------------------------------- progress
def test_no_progress_output_when_not_a_terminal():
    result = run("report", DIGITS)
    assert result.returncode == 0
    assert result.stderr == ""
    assert "\r" not in result.stdout and "reading" not in result.stdout


@pytest.mark.skipif(not HAVE_TQDM, reason="tqdm is not installed")
def test_progress_can_be_forced_and_is_drawn_on_a_terminal():
    forced = run("report", DIGITS, "--progress")
    assert forced.returncode == 0 and "reading" in forced.stderr
    assert "reading" not in forced.stdout

    pty = pytest.importorskip("pty")
    leader, follower = pty.openpty()
    # A new pseudo-terminal is 0 columns wide; give it the size of a usual terminal window.
    import fcntl
    import struct
    import termios

    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    process = subprocess.Popen([sys.executable, "-m", "metricstream", "report", str(DIGITS)],
                               stdout=follower, stderr=follower, stdin=subprocess.DEVNULL)
    os.close(follower)
    output = b""
    while True:
        try:
            data = os.read(leader, 65536)
        except OSError:  # EIO: the process closed the terminal
            break
        if not data:
            break
        output += data
    os.close(leader)
    assert process.wait(timeout=300) == 0
    text = output.decode("utf-8", "replace")
    assert "reading" in text and "accuracy" in text


def test_console_script_is_declared():
    import importlib.metadata

    scripts = importlib.metadata.entry_points(group="console_scripts")
    matches = [entry for entry in scripts if entry.name == "metricstream"]
    if not matches:
        pytest.skip("metricstream is not pip-installed with its entry points here")
    assert matches[0].value == "metricstream.cli:main"


def test_readme_set_up_command_is_the_one_ci_runs():
    root = Path(__file__).parent.parent
    readme = (root / "README.md").read_text(encoding="utf-8")
    setup = readme.split("## Set up on a fresh machine", 1)[1].split("```bash\n", 1)[1]
    command = next(line for line in setup.splitlines() if line and not line.startswith("#"))
    assert command.startswith('pip install ".[cli]" && metricstream report ')
    ci_lines = (root / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert command in ci_lines
