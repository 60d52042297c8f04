"""The Python examples of the README and of docs/*.md run as written.

Every ```python block runs in a fresh namespace (``>>>`` examples, in a ```pycon or a ```python
fence, are run by pytest's doctest collection, configured in pyproject.toml). A block that
imports an optional library which is not installed (torch, dask, ...) is skipped, saying which.
Relative links of the README and the docs must point at files, and docs/index.md must link every
page of docs/.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
FENCE = re.compile(r"^```python\n(.*?)^```", flags=re.S | re.M)


def python_blocks(path: Path) -> list[tuple[str, int, str]]:
    """(id, first line number, source) of each ```python block of a Markdown file."""
    text = path.read_text(encoding="utf-8")
    name = path.relative_to(ROOT).as_posix()
    blocks = []
    for match in FENCE.finditer(text):
        if match.group(1).lstrip().startswith(">>>"):
            continue  # a doctest in a python fence: pytest's doctest collection runs it
        line = text.count("\n", 0, match.start(1)) + 1
        blocks.append((f"{name}:{line}", line, match.group(1)))
    return blocks


BLOCKS = [(path, *block) for path in [README, *DOCS] for block in python_blocks(path)]
# Examples that start a host taking seconds to import (a Lightning Trainer, Keras, a Hugging Face
# Trainer, Ray, Spark) run in the full run, as the integrations' doctests do (the repository's
# conftest.py); tests/test_{lightning,keras,huggingface}.py test the same calls by default.
HEAVY_HOST = re.compile(r"^\s*(?:import|from) (?:lightning|keras|transformers|ray|pyspark)\b", re.M)


@pytest.mark.parametrize(
    ("path", "block_id", "line", "source"),
    [
        pytest.param(
            *block, id=block[1], marks=[pytest.mark.slow] if HEAVY_HOST.search(block[3]) else []
        )
        for block in BLOCKS
    ],
)
def test_python_block_runs(path, block_id, line, source, tmp_path, monkeypatch):
    # Line numbers in tracebacks are the file's: pad the source so that line 1 is `line`.
    code = compile("\n" * (line - 1) + source, str(path), "exec")
    # Run as from the repository root (examples/ is there), but write into a temporary directory.
    (tmp_path / "examples").symlink_to(ROOT / "examples", target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    try:
        exec(code, {"__name__": "docs_example"})
    except ModuleNotFoundError as error:
        if error.name and error.name.split(".")[0] == "metricstream":
            raise
        pytest.skip(f"{block_id} needs {error.name}, which is not installed")
    finally:
        if "matplotlib.pyplot" in sys.modules:
            sys.modules["matplotlib.pyplot"].close("all")


def test_readme_and_docs_have_python_examples():
    assert any(path == README for path, *_ in BLOCKS)
    assert (ROOT / "docs" / "index.md").exists()
    assert any(path.parent.name == "docs" for path, *_ in BLOCKS)


LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)\s]*)?\)")


@pytest.mark.parametrize("path", [README, *DOCS], ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_point_at_files(path):
    text = path.read_text(encoding="utf-8")
    targets = [t for t in LINK.findall(text) if "://" not in t and not t.startswith("mailto:")]
    missing = [t for t in targets if not (path.parent / t).exists()]
    assert not missing, f"{path.name} links to missing files: {missing}"


def test_every_docs_page_is_linked_from_the_index():
    index = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    linked = {t for t in LINK.findall(index)}
    unlinked = [p.name for p in DOCS if p.name != "index.md" and p.name not in linked]
    assert not unlinked, f"docs/index.md does not link {unlinked}"


def test_readme_command_line_output_is_real(capsys, monkeypatch):
    """The README's `metricstream report` transcript is what the command prints today."""
    cli = pytest.importorskip("metricstream.cli")
    text = README.read_text(encoding="utf-8")
    command = "$ metricstream report examples/data/digits_predictions.csv\n"
    shown = text.split(command, 1)[1].split("```", 1)[0]
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("COLUMNS", "100")
    assert cli.main(["report", "examples/data/digits_predictions.csv", "--no-progress"]) == 0
    assert capsys.readouterr().out.strip() == shown.strip()
