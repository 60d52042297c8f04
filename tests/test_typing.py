"""A user's type checker sees every view: mypy on a user's snippet must pass.

The views of the families are declared in their class bodies (``metricstream._core.views``), so
mypy knows ``acc.accuracy()`` and ``acc.f1(average="macro")`` with their real signatures, and
rejects a misspelt keyword as it would on any typed library.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("mypy")

REPO = pathlib.Path(__file__).resolve().parents[1]

SNIPPET = """
    import numpy as np

    from metricstream import (
        AccumulatorGroup,
        BootstrapConfusionAccumulator,
        ConfusionAccumulator,
        MultilabelAccumulator,
        ScoreAccumulator,
    )

    acc = ConfusionAccumulator(3).update([0, 1, 2], [0, 2, 2])
    accuracy: float = acc.accuracy()
    macro = acc.f1(average="macro")
    kappa = acc.cohen_kappa()
    matrix: np.ndarray = acc.confusion_matrix()
    interval = acc.accuracy_interval()
    scores = ScoreAccumulator("binary").update([0, 1], [0.2, 0.8])
    auroc = scores.auroc()
    labels = MultilabelAccumulator(3).update(np.eye(3, dtype=int), np.eye(3, dtype=int))
    micro = labels.f1(average="micro")
    boot = BootstrapConfusionAccumulator(3, n_resamples=10, seed=0)
    group = AccumulatorGroup(labels=ConfusionAccumulator(3))
    reveal_type(acc.f1)
    reveal_type(acc.accuracy())
"""


def run_mypy(tmp_path: pathlib.Path, source: str) -> subprocess.CompletedProcess[str]:
    snippet = tmp_path / "user_snippet.py"
    snippet.write_text(textwrap.dedent(source))
    # MYPYPATH finds the package in this source tree whether it is installed editable or not;
    # errors inside the library itself are the project's own mypy run's business, not a user's.
    env = {**os.environ, "MYPYPATH": str(REPO)}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--follow-imports=silent",
            "--cache-dir",
            str(tmp_path / "cache"),
            str(snippet),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=600,
    )


@pytest.mark.slow
def test_users_mypy_accepts_the_views(tmp_path: pathlib.Path) -> None:
    result = run_mypy(tmp_path, SNIPPET)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert 'Revealed type is "def (*, average: ' in output  # f1's real signature, less the matrix
    assert 'Revealed type is "builtins.float"' in output or 'Revealed type is "float"' in output


@pytest.mark.slow
def test_users_mypy_rejects_a_misspelt_keyword(tmp_path: pathlib.Path) -> None:
    result = run_mypy(
        tmp_path,
        """
        from metricstream import ConfusionAccumulator

        ConfusionAccumulator(3).f1(averag="macro")
        """,
    )
    assert result.returncode == 1
    assert 'Unexpected keyword argument "averag"' in result.stdout
