"""Collection rules for the whole repository (the tests' own fixtures live in tests/conftest.py)."""

# Modules kept only so that import paths from before the family packages still work: each
# replaces itself by the module it moved to, which is collected (with its doctests) there.
collect_ignore = [
    "metricstream/accumulator.py",
    "metricstream/clustered.py",
    "metricstream/score_plotting.py",
    "metricstream/score_report.py",
    # Not a test module: the Lightning side of tests/test_lightning.py, imported when one of its
    # tests runs (collecting it for doctests would import Lightning in every worker).
    "tests/lightning_app.py",
]

# The tests count with the kernels they test: no batch is handed to a family's numpy twin
# because its kernel happens to be compiling in the background (which would depend on the state
# of Numba's cache). The first-use tests turn background compiles on themselves. An explicit
# METRICSTREAM_BACKGROUND_COMPILE in the environment wins.
import os  # noqa: E402

os.environ.setdefault("METRICSTREAM_BACKGROUND_COMPILE", "0")

# Keras 3 defaults to TensorFlow, which the test extras do not install: its torch backend,
# unless the environment names another (the docstrings of metricstream.keras are collected too).
os.environ.setdefault("KERAS_BACKEND", "torch")

# The integrations whose host takes seconds to import (Keras, Lightning, transformers, Ray):
# collecting their doctests imports the host in every test worker, whether or not it runs a
# test that needs it. The default run leaves these modules' doctests to the full run (--run-slow
# or CI=true); their behaviour is tested by tests/test_{keras,lightning,huggingface,ray}.py,
# which import the host only when a test of theirs runs.
HEAVY_HOST_MODULES = ("keras.py", "lightning.py", "huggingface.py", "ray.py")


def pytest_ignore_collect(collection_path, config):
    if (
        collection_path.parent.name == "metricstream"
        and collection_path.name in HEAVY_HOST_MODULES
        and not config.getoption("--run-slow", default=False)
        and os.environ.get("CI", "").lower() != "true"
    ):
        return True
    return None
