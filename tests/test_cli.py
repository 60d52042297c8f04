"""The ``metricstream report`` command: outputs, exit codes, one-line errors with row numbers,
text labels, weights, written files, and when progress is drawn.

Most tests call :func:`metricstream.cli.main` in this process (the same code path, without a new
interpreter and kernel compilation per test); a few run ``python -m metricstream`` as a separate
process where that is the point (exit codes through the interpreter, a real terminal). The hostile
files, with time and memory bounds, are in ``test_cli_hostile.py``.
"""

from __future__ import annotations

import contextlib
import csv
import importlib.util
import io
import json
import os
import subprocess
import sys
from dataclasses import dataclass
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


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


def run(*args: str | os.PathLike) -> Result:
    """``metricstream ARGS`` in this process, with stdout and stderr captured (not terminals)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli_module.main([str(arg) for arg in args])
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 1
    return Result(code, out.getvalue(), err.getvalue())


def run_process(*args: str | os.PathLike, cwd: Path | None = None) -> Result:
    """``python -m metricstream ARGS`` as a separate process (pipes, not terminals)."""
    done = subprocess.run(
        [sys.executable, "-m", "metricstream", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    return Result(done.returncode, done.stdout, done.stderr)


def digits_columns() -> tuple[np.ndarray, np.ndarray]:
    table = np.loadtxt(DIGITS, delimiter=",", skiprows=1, usecols=(0, 1), dtype=np.int64)
    columns = table.T.copy()  # contiguous: strided labels would compile a kernel of their own
    return columns[0], columns[1]


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
    assert result.stderr.splitlines() == [
        f"metricstream: wrote {tmp_path / 'r.json'}",
        f"metricstream: wrote {tmp_path / 'r.md'}",
    ]


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
    # stdout is scikit-learn's report exactly (`diff` finds nothing); what was read is on stderr
    assert result.stdout == skm.classification_report(y_true, y_pred)
    assert result.stderr == f"{named}: 899 rows; truth 'y_true', prediction 'y_pred'\n"


def test_a_class_seen_only_in_predictions_gets_a_row(tmp_path):
    path = write_csv(
        tmp_path / "p.csv",
        ["y_true", "y_pred"],
        [["cat", "cat"], ["dog", "dog"], ["dog", "fox"], ["cat", "dog"]],
    )
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
    expected = skm.confusion_matrix(
        [r[0] for r in kept], [r[1] for r in kept], sample_weight=[r[2] for r in kept]
    )
    acc = ConfusionAccumulator.from_matrix(expected, class_names=["0", "1"], weighted=True)
    assert json.loads(result.stdout) == acc.summary("dict")
    text = run("report", path, "--weight", "w", "--ignore", "255")
    assert text.stdout.splitlines()[0].endswith("weights 'w'; ignoring true label 255 (1 row)")


def test_classes_fix_the_order(tmp_path):
    path = write_csv(tmp_path / "p.csv", ["t", "p"], [["b", "a"], ["a", "a"]])
    result = run(
        "report",
        path,
        "--true",
        "t",
        "--pred",
        "p",
        "--classes",
        "b,a,c",
        "--format",
        "json",
        "--zero-division",
        "0",
    )
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
def test_plots_are_written_as_png(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = run(
        "report", DIGITS, "--plot", "cm.png", "--plot-per-class", "bars.png", "--normalize", "true"
    )
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
    assert err == (
        "metricstream: error: writing plots needs matplotlib, which is not installed; "
        "install it with `pip install 'metricstream[plot]'`.\n"
    )


# ---------------------------------------------------------------------- exit codes and errors
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["report"], "the following arguments are required: PATH"),
        (["report", "x.csv", "--bogus"], "unrecognized arguments: --bogus"),
        ([], "the following arguments are required: COMMAND"),
    ],
    ids=["no-path", "unknown-option", "no-command"],
)
def test_bad_usage_exits_2(args, message):
    result = run(*args)
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1].startswith(f"metricstream: error: {message}")


@pytest.mark.slow
def test_exit_codes_through_the_interpreter(tmp_path):
    """A real process: `python -m metricstream` exits 0, 1 (bad data) and 2 (bad usage)."""
    assert run_process("report", DIGITS, "--format", "json").returncode == 0
    path = write_csv(tmp_path / "p.csv", ["y_true", "y_pred"], [[0, 0], [1, -7]])
    bad = run_process("report", path)
    assert bad.returncode == 1 and bad.stdout == ""
    assert bad.stderr.startswith(f"metricstream: error: {path}: column 'y_pred', row 2: label -7")
    usage = run_process("report", DIGITS, "--bogus")
    assert usage.returncode == 2
    assert usage.stderr.splitlines()[-1].startswith("metricstream: error: unrecognized arguments")


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
        f"columns are 'y_true', 'y_pred', 'confidence'.\n"
    )


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
        f"as class names.\n"
    )


@pytest.mark.parametrize("reader", ["pyarrow", "python"])
def test_labels_int_reports_the_first_text_label(tmp_path, reader):
    if reader == "pyarrow" and importlib.util.find_spec("pyarrow") is None:
        pytest.skip("pyarrow is not installed")
    path = write_csv(
        tmp_path / "p.csv", ["y_true", "y_pred", "w"], [[0, 0, 1], [1, 1, 1], [2, "two", 1]]
    )
    result = run("report", path, "--labels", "int", "--reader", reader)
    assert result.returncode == 1
    assert f"{path}: column 'y_pred', row 3: 'two' is not an integer" in result.stderr
    bad_weight = write_csv(
        tmp_path / "w.csv", ["y_true", "y_pred", "w"], [[0, 0, 1], [1, 1, "heavy"]]
    )
    result = run("report", bad_weight, "--weight", "w", "--reader", reader)
    assert result.returncode == 1
    assert result.stderr == (
        f"metricstream: error: {bad_weight}: column 'w', row 2: 'heavy' is "
        f"not a number; weights must be numbers.\n"
    )


def test_negative_weight_names_its_row(tmp_path):
    path = write_csv(tmp_path / "p.csv", ["y_true", "y_pred", "w"], [[0, 0, 1], [1, 1, -2]])
    result = run("report", path, "--weight", "w")
    assert result.returncode == 1
    assert result.stderr == (
        f"metricstream: error: {path}: column 'w', row 2: weight -2.0 is "
        f"not a finite non-negative number.\n"
    )


# ---------------------------------------------------------------------- progress
def test_no_progress_output_when_not_a_terminal():
    result = run("report", DIGITS)
    assert result.returncode == 0
    assert result.stderr == ""
    assert "\r" not in result.stdout and "reading" not in result.stdout


@pytest.mark.slow
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
    process = subprocess.Popen(
        [sys.executable, "-m", "metricstream", "report", str(DIGITS)],
        stdout=follower,
        stderr=follower,
        stdin=subprocess.DEVNULL,
    )
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
    assert matches[0].value == "metricstream.cli:run"


def test_readme_set_up_command_is_the_one_ci_runs():
    root = Path(__file__).parent.parent
    readme = (root / "README.md").read_text(encoding="utf-8")
    setup = readme.split("## Set up on a fresh machine", 1)[1].split("```bash\n", 1)[1]
    command = next(line for line in setup.splitlines() if line and not line.startswith("#"))
    assert command.startswith('pip install ".[cli]" && metricstream report ')
    ci_lines = (root / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert command in ci_lines


# ---------------------------------------------------------------------- scikit-learn, exactly
def test_sklearn_format_is_scikit_learns_report_for_numbers_and_no_true_positive(tmp_path):
    y_true, y_pred = digits_columns()
    result = run("report", DIGITS, "--format", "sklearn", "--digits", "4")
    assert result.stdout == skm.classification_report(y_true, y_pred, digits=4)
    path = write_csv(tmp_path / "p.csv", ["y_true", "y_pred"], [[0, 1], [0, 1], [1, 0]])
    result = run("report", path, "--format", "sklearn", "--zero-division", "0")
    assert result.stdout == skm.classification_report([0, 0, 1], [1, 1, 0], zero_division=0)
    assert "       3.0\n" in result.stdout  # scikit-learn's float supports
    assert result.stderr == f"{path}: 3 rows; truth 'y_true', prediction 'y_pred'\n"


def test_json_report_rebuilds_the_accumulator_and_has_the_averages(tmp_path):
    rows = [["cat", "dog", 0.5], ["dog", "dog", 1.25], ["hen", "cat", 2.0], ["cat", "cat", 1.0]]
    path = write_csv(tmp_path / "p.csv", ["y_true", "y_pred", "w"], rows)
    result = run("report", path, "--weight", "w", "--format", "json", "--zero-division", "0")
    data = json.loads(result.stdout)
    rebuilt = ConfusionAccumulator.from_matrix(
        np.array(data["confusion_matrix"]),
        class_names=data["class_names"],
        weighted=data["weighted"],
    )
    expected = skm.confusion_matrix(
        [r[0] for r in rows], [r[1] for r in rows], sample_weight=[r[2] for r in rows]
    )
    assert data["class_names"] == ["cat", "dog", "hen"]
    np.testing.assert_array_equal(rebuilt.matrix, expected)
    assert rebuilt.summary("dict", zero_division=0) == data
    y_true, y_pred, w = zip(*rows, strict=True)
    for average in ("macro", "weighted"):
        p, r, f, _ = skm.precision_recall_fscore_support(
            y_true, y_pred, sample_weight=w, average=average, zero_division=0
        )
        overall = data["overall"]
        assert (
            overall[f"{average}_precision"],
            overall[f"{average}_recall"],
            overall[f"{average}_f1"],
        ) == pytest.approx((p, r, f), rel=1e-15)


# ---------------------------------------------------------------------- labels and their messages
def test_class_names_member_is_named_and_the_void_label_suggested(tmp_path):
    masks = np.zeros((2, 4, 4), dtype=np.uint8)
    truth = masks.copy()
    truth[1, 2, 3] = 255
    np.savez(
        tmp_path / "m.npz",
        y_true=truth,
        y_pred=masks,
        class_names=np.array(["sky", "road", "car", "tree", "sign"]),
    )
    result = run("report", tmp_path / "m.npz")
    assert result.returncode == 1
    assert result.stderr == (
        f"metricstream: error: {tmp_path / 'm.npz'}: column 'y_true', element (1, 2, 3): label "
        f"255 is not an index into the 5 classes named by the file's `class_names` member; pass "
        f"`--ignore 255` if it marks void pixels or rows without a label.\n"
    )
    ignored = run("report", tmp_path / "m.npz", "--ignore", "255", "--zero-division", "0")
    assert ignored.returncode == 0, ignored.stderr
    assert "ignoring true label 255 (1 label)" in ignored.stdout.splitlines()[0]


def test_a_void_looking_label_is_pointed_out_once(tmp_path):
    rng = np.random.default_rng(3)
    truth = rng.integers(0, 5, (3, 8, 8)).astype(np.int64)
    pred = truth.copy()
    truth[0, :2] = 255
    np.savez(tmp_path / "m.npz", y_true=truth, y_pred=pred)
    result = run("report", tmp_path / "m.npz", "--zero-division", "0")
    assert result.returncode == 0
    notes = [line for line in result.stderr.splitlines() if "255" in line]
    assert notes == [
        "metricstream: warning: true label 255 is never predicted and lies far above "
        "the other labels (0–4); if it marks void pixels or rows without a label, "
        "pass `--ignore 255` to leave those rows out."
    ]
    quiet = run("report", tmp_path / "m.npz", "--ignore", "255", "--zero-division", "0")
    assert quiet.stderr == ""
    # an ordinary extra class is not a void label
    path = write_csv(tmp_path / "p.csv", ["y_true", "y_pred"], [[0, 0], [1, 1], [3, 0]])
    assert run("report", path, "--zero-division", "0").stderr == ""


@pytest.mark.parametrize(
    ("value", "hint"),
    [
        (
            "-1",
            "pass `--ignore -1` if it marks void pixels or rows without a label, or `--labels str`",
        ),
        (
            "65535",
            "pass `--ignore 65535` if it marks void pixels or rows without a label, "
            "`--max-classes 65536` if the file really has that many classes",
        ),
    ],
)
def test_void_like_labels_outside_the_classes_suggest_ignore(tmp_path, value, hint):
    path = write_csv(tmp_path / "p.csv", ["y_true", "y_pred"], [[0, 0], [value, 1]])
    result = run("report", path)
    assert result.returncode == 1
    assert result.stderr.startswith(
        f"metricstream: error: {path}: column 'y_true', row 2: label {value} "
    )
    assert hint in result.stderr and result.stderr.count("\n") == 1


@pytest.mark.parametrize("reader", ["pyarrow", "python"])
def test_text_truth_with_integer_predictions_and_classes(tmp_path, reader):
    rows = [["cat", 0], ["dog", 1], ["dog", 0], ["cat", 1], ["dog", 1]]
    path = write_csv(tmp_path / "p.csv", ["y_true", "y_pred"], rows)
    result = run("report", path, "--classes", "cat,dog", "--reader", reader, "--format", "json")
    assert result.returncode == 0, result.stderr
    names = ["cat", "dog"]
    expected = skm.confusion_matrix([r[0] for r in rows], [names[r[1]] for r in rows], labels=names)
    assert json.loads(result.stdout)["confusion_matrix"] == expected.tolist()
    beyond = write_csv(tmp_path / "b.csv", ["y_true", "y_pred"], [["cat", 0], ["dog", 2]])
    error = run("report", beyond, "--classes", "cat,dog", "--reader", reader)
    assert error.returncode == 1
    assert error.stderr == (
        f"metricstream: error: {beyond}: column 'y_pred', row 2: label 2 is "
        f"not an index into the 2 classes given by `--classes`.\n"
    )


def test_ignored_text_label_is_in_the_header(tmp_path):
    path = write_csv(
        tmp_path / "p.csv",
        ["y_true", "y_pred"],
        [["cat", "cat"], ["void", "dog"], ["dog", "dog"], ["void", "cat"]],
    )
    result = run("report", path, "--ignore", "void")
    assert result.returncode == 0
    assert result.stdout.splitlines()[0] == (
        f"{path}: 4 rows; truth 'y_true', prediction 'y_pred'; ignoring true label 'void' (2 rows)"
    )


def test_warnings_name_the_command_line_option(tmp_path):
    path = write_csv(tmp_path / "p.csv", ["y_true", "y_pred"], [["a", "a"], ["b", "a"]])
    result = run("report", path)
    assert "`zero_division` parameter" not in result.stderr
    assert (
        "Pass `--zero-division 0`, `1` or `nan` to choose the value and silence this warning."
    ) in result.stderr
    assert run("report", path, "--zero-division", "0").stderr == ""


def test_fractional_weights_print_a_formatted_sample_count(tmp_path):
    path = write_csv(
        tmp_path / "p.csv",
        ["y_true", "y_pred", "w"],
        [[0, 0, 20.1], [0, 1, 0.089], [1, 0, 4.1], [1, 1, 30.0]],
    )
    result = run("report", path, "--weight", "w")
    assert "samples: 54.2890, classes: 2" in result.stdout
    assert "54.288999" not in result.stdout


# ---------------------------------------------------------------------- limits and bad options
def test_max_classes_caps_names_and_indices_and_is_named(tmp_path):
    names = [[f"name{i}", f"name{i}"] for i in range(20)]
    path = write_csv(tmp_path / "p.csv", ["y_true", "y_pred"], names)
    result = run("report", path, "--max-classes", "10")
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith(
        f"metricstream: error: {path}: column 'y_true', row 11: "
        f"'name10' is distinct label number 11, over the limit of 10 "
        f"classes"
    )
    assert "pass `--max-classes 20` to raise the limit" in result.stderr
    assert run("report", path, "--max-classes", "20", "--format", "json").returncode == 0
    numbers = write_csv(tmp_path / "n.csv", ["y_true", "y_pred"], [[0, 0], [1, 15]])
    error = run("report", numbers, "--max-classes", "10")
    assert (
        "column 'y_pred', row 2: label 15 is too large to be a class index (at most 9); pass "
        "`--max-classes 16`" in error.stderr
    )
    assert run("report", numbers, "--max-classes", "0").returncode == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--classes", "a,b,a"],
            "`--classes` lists 'a' more than once; class names must be unique.",
        ),
        (
            ["--ignore", str(2**64)],
            f"`--ignore` is {2**64}, outside the range of 64-bit integer labels",
        ),
        (["--ignore", "cat"], "`--ignore` is 'cat', but the labels are integers"),
    ],
    ids=["classes-twice", "ignore-beyond-int64", "ignore-text-for-numbers"],
)
def test_bad_label_options_are_one_line_usage_errors(args, message):
    result = run("report", DIGITS, *args)
    assert result.returncode == 2
    assert result.stderr.startswith(f"metricstream: error: {message}")
    assert result.stderr.count("\n") == 1 and result.stdout == ""


@needs_matplotlib
def test_plot_into_a_directory_or_without_suffix(tmp_path):
    result = run(
        "report",
        DIGITS,
        "--plot",
        tmp_path,
        "--plot-per-class",
        tmp_path / "bars",
        "--format",
        "json",
    )
    assert result.returncode == 0, result.stderr
    plot, bars = tmp_path / "confusion_matrix.png", tmp_path / "bars.png"
    assert result.stderr.splitlines() == [
        f"metricstream: wrote {plot}",
        f"metricstream: wrote {bars}",
    ]
    assert (tmp_path / "confusion_matrix.png").read_bytes().startswith(b"\x89PNG")
    assert (tmp_path / "bars.png").read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize(
    ("option", "target", "message"),
    [
        ("--plot", "cm.foo", "unknown image format '.foo'"),
        ("--json", ".", "is a directory; give a file name"),
        ("--markdown", "missing/r.md", "the directory missing does not exist"),
    ],
    ids=["plot-format", "json-directory", "markdown-missing-directory"],
)
def test_outputs_are_checked_before_reading(tmp_path, monkeypatch, option, target, message):
    monkeypatch.chdir(tmp_path)
    result = run("report", DIGITS, option, target)
    assert result.returncode == 2 and result.stdout == ""
    assert message in result.stderr and result.stderr.count("\n") == 1


@pytest.mark.skipif(
    hasattr(os, "geteuid") and os.geteuid() == 0, reason="root reads files without read permission"
)
def test_an_unreadable_file_is_one_line(tmp_path):
    path = write_csv(tmp_path / "p.csv", ["y_true", "y_pred"], [[0, 0]])
    path.chmod(0)
    result = run("report", path)
    assert result.returncode == 1
    assert result.stderr == f"metricstream: error: {path}: cannot read (Permission denied).\n"


def test_a_damaged_parquet_file_is_one_line(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    pa = pytest.importorskip("pyarrow")
    table = pa.table({"y_true": np.arange(5000) % 7, "y_pred": np.arange(5000) % 5})
    pq.write_table(table, tmp_path / "p.parquet", row_group_size=1000, compression="none")
    raw = bytearray((tmp_path / "p.parquet").read_bytes())
    raw[len(raw) // 2 : len(raw) // 2 + 2000] = b"\xff" * 2000
    (tmp_path / "p.parquet").write_bytes(bytes(raw))
    result = run("report", tmp_path / "p.parquet")
    assert result.returncode in (1, 2)
    assert result.stderr.startswith("metricstream: error: ") and result.stderr.count("\n") == 1


# ---------------------------------------------------------------------------- --intervals
def test_intervals_section_in_text_and_json(tmp_path):
    csv_path = DIGITS
    text = run("report", csv_path, "--intervals", "--resamples", "300", "--seed", "1")
    assert text.returncode == 0
    assert "95% percentile bootstrap intervals, B=300" in text.stdout
    data = json.loads(
        run(
            "report",
            csv_path,
            "--intervals",
            "--resamples",
            "300",
            "--seed",
            "1",
            "--format",
            "json",
        ).stdout
    )
    intervals = data["intervals"]["metrics"]
    assert set(intervals) >= {"accuracy", "macro_f1", "miou", "mcc", "kappa"}
    acc = ConfusionAccumulator.from_matrix(np.array(data["confusion_matrix"]))
    expected = acc.interval("accuracy", n_resamples=300, seed=1)
    assert intervals["accuracy"]["low"] == pytest.approx(expected.low)
    assert intervals["accuracy"]["high"] == pytest.approx(expected.high)
    accuracy = intervals["accuracy"]
    assert accuracy["low"] < data["overall"]["accuracy"] < accuracy["high"]


def test_intervals_refuse_fractional_weights_in_one_line(tmp_path):
    path = write_csv(
        tmp_path / "w.csv", ["y_true", "y_pred", "w"], [[0, 0, 0.5], [1, 1, 1.5], [1, 0, 2.0]]
    )
    result = run("report", path, "--weight", "w", "--intervals")
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1
    assert "--intervals: the matrix holds the fractional count 0.5" in result.stderr


def test_intervals_options_are_checked():
    result = run("report", DIGITS, "--intervals", "--confidence", "1.5")
    assert result.returncode == 2
    assert "expected a number in (0, 1)" in result.stderr


# ---------------------------------------------------------------------------- --scores
SCORES = EXAMPLES / "digits_scores.csv"


def _digits_scores() -> tuple[np.ndarray, np.ndarray]:
    table = np.loadtxt(SCORES, delimiter=",", skiprows=1)
    return table[:, 0].astype(np.int64), table[:, 1:].astype(np.float32)


def test_scores_section_equals_scikit_learn(tmp_path):
    y_true, probabilities = _digits_scores()
    result = run("report", SCORES, "--scores", "p_*", "--format", "json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    expected = skm.roc_auc_score(y_true, probabilities.astype(np.float64), multi_class="ovr")
    assert data["scores"]["auroc_macro"] == pytest.approx(expected, abs=1e-5)
    # without --pred, the summary is the confusion matrix of the scores' argmax
    argmax = probabilities.argmax(axis=1)
    np.testing.assert_array_equal(
        data["confusion_matrix"], skm.confusion_matrix(y_true, argmax, labels=range(10))
    )
    text = run("report", SCORES, "--scores", "p_*")
    assert "AUROC (macro, one-vs-rest)" in text.stdout
    assert "prediction \"argmax of 'p_*'\"" in text.stdout or "argmax of 'p_*'" in text.stdout


def test_score_plots_are_written(tmp_path):
    pytest.importorskip("matplotlib")
    roc, calibration = tmp_path / "roc.png", tmp_path / "calibration.png"
    result = run(
        "report", SCORES, "--scores", "p_*", "--plot-roc", roc, "--plot-calibration", calibration
    )
    assert result.returncode == 0, result.stderr
    assert roc.stat().st_size > 0 and calibration.stat().st_size > 0


def test_score_plot_without_scores_is_a_usage_error():
    result = run("report", DIGITS, "--plot-roc", "roc.png")
    assert result.returncode == 2
    assert "needs `--scores`" in result.stderr


# ---------------------------------------------------------------------------- --multilabel
def _multilabel_data(seed: int = 0, n: int = 200, labels: int = 5):
    rng = np.random.default_rng(seed)
    y_true = (rng.random((n, labels)) < 0.3).astype(int)
    y_pred = np.where(rng.random((n, labels)) < 0.8, y_true, 1 - y_true)
    return y_true, y_pred


def _label_cells(rows: np.ndarray) -> list[str]:
    return ["|".join(str(j) for j in np.flatnonzero(row)) for row in rows]


def test_multilabel_csv_report_equals_scikit_learn(tmp_path):
    y_true, y_pred = _multilabel_data()
    path = write_csv(
        tmp_path / "tags.csv",
        ["y_true", "y_pred"],
        zip(_label_cells(y_true), _label_cells(y_pred), strict=True),
    )
    result = run("report", path, "--multilabel", "--format", "sklearn", "--zero-division", "0")
    assert result.returncode == 0, result.stderr
    assert result.stdout == skm.classification_report(y_true, y_pred, zero_division=0)
    data = json.loads(
        run("report", path, "--multilabel", "--format", "json", "--zero-division", "0").stdout
    )
    assert data["subset_accuracy"] == skm.accuracy_score(y_true, y_pred)
    assert data["hamming_loss"] == pytest.approx(skm.hamming_loss(y_true, y_pred), abs=1e-15)
    assert data["report"]["samples avg"]["f1-score"] == pytest.approx(
        skm.f1_score(y_true, y_pred, average="samples", zero_division=0), abs=1e-12
    )


def test_multilabel_npz_scores_with_threshold(tmp_path):
    y_true, _ = _multilabel_data(1)
    scores = np.random.default_rng(2).random(y_true.shape).astype(np.float32)
    path = tmp_path / "tags.npz"
    np.savez(path, y_true=y_true, y_pred=scores, label_names=np.array(list("abcde")))
    result = run(
        "report",
        path,
        "--multilabel",
        "--threshold",
        "0.7",
        "--format",
        "sklearn",
        "--zero-division",
        "0",
    )
    assert result.returncode == 0, result.stderr
    expected = skm.classification_report(
        y_true, (scores >= 0.7).astype(int), target_names=list("abcde"), zero_division=0
    )
    assert result.stdout == expected


def test_multilabel_errors_are_one_line(tmp_path):
    path = write_csv(tmp_path / "bad.csv", ["truth", "guess"], [["0", "1"]])
    result = run("report", path, "--multilabel")
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and "bad.csv" in result.stderr
    result = run("report", path, "--multilabel", "--intervals")
    assert result.returncode == 2 and "does not combine with --intervals" in result.stderr
