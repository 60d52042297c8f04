"""Test-suite configuration: the `slow` marker's switch and the hypothesis profiles.

Slow tests (the full randomized grids, multi-process runs, the examples) run when the environment
has ``CI=true`` (CI sets it) or with ``pytest --run-slow``; otherwise they are deselected (the
report header says how to run them), so the default ``python -m pytest`` stays short.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

# Deadlines are off: the first example of a test may compile a kernel specialisation (about a
# second), which is not a property of the code under test.
# The slow profile (CI) draws more examples per property.
settings.register_profile("metricstream", deadline=None, max_examples=60)
settings.register_profile("metricstream-slow", deadline=None, max_examples=300)

RUN_SLOW_HELP = "run the tests marked slow (also on when the environment has CI=true)"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--run-slow", action="store_true", default=False, help=RUN_SLOW_HELP)


def run_slow(config: pytest.Config) -> bool:
    """Whether this session runs the slow tests: ``--run-slow``, or ``CI=true`` in the env."""
    return bool(config.getoption("--run-slow")) or os.environ.get("CI", "").lower() == "true"


def _load_profile(config: pytest.Config) -> None:
    if config.getoption("hypothesis_profile", default=None):  # --hypothesis-profile wins
        return
    settings.load_profile("metricstream-slow" if run_slow(config) else "metricstream")


def pytest_configure(config: pytest.Config) -> None:
    _load_profile(config)


def pytest_collection_finish(session: pytest.Session) -> None:
    # Again after the test modules were imported, in case one of them loaded a profile itself.
    _load_profile(session.config)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto`` (pyproject's addopts): one worker per usable core, at most 4.

    A cold run is mostly kernel compilation, which the workers share through the on-disk cache;
    past a few workers each would compile the same kernels at once, and each imports torch,
    dask and scikit-learn (about half a GB).
    """
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(4, cores or 1))


def pytest_report_header(config: pytest.Config) -> str:
    if run_slow(config):
        return "slow tests: run (--run-slow or CI=true); hypothesis profile metricstream-slow"
    return "slow tests: deselected (pass --run-slow or set CI=true to run them)"


# Test modules whose every test is slow (``pytestmark``) and that import a heavy host at import
# (Spark, Ray): the default run does not import them at all.
SLOW_MODULES = ("test_ray.py", "test_spark.py")


def pytest_ignore_collect(collection_path, config: pytest.Config) -> bool | None:
    if collection_path.name in SLOW_MODULES and not run_slow(config):
        return True
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Without --run-slow (or CI=true), the slow tests are deselected (the summary counts them):
    thousands of skipped items would each still pass through setup, teardown and the report."""
    if run_slow(config):
        return
    kept = [item for item in items if "slow" not in item.keywords]
    if len(kept) < len(items):
        config.hook.pytest_deselected(items=[item for item in items if "slow" in item.keywords])
        items[:] = kept


@pytest.fixture
def no_background_compiles():
    """No kernel compiles in another thread while the test runs.

    tracemalloc counts every thread's allocations, so a compile queued by an earlier test (or by
    this one's set-up) would be charged to the code whose memory a test bounds. Queued compiles
    finish first; during the test a first use compiles at the call, as with
    ``METRICSTREAM_BACKGROUND_COMPILE=0``.
    """
    from metricstream._core import warmup

    was = warmup.enabled()
    warmup.set_enabled(False)
    warmup.wait()
    try:
        yield
    finally:
        warmup.set_enabled(was)


@pytest.fixture
def slow_run(request: pytest.FixtureRequest) -> bool:
    """Whether this session runs the slow tests: a test samples its grid when it does not."""
    return run_slow(request.config)


@pytest.fixture
def background_compiles_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """Background compiles on, as by default outside the tests (the repository's conftest.py
    turns them off for the suite): for the first-use tests."""
    from metricstream._core import warmup

    monkeypatch.setattr(warmup, "_enabled", True)
