"""Collection rules for the whole repository (the tests' own fixtures live in tests/conftest.py)."""

# Modules kept only so that import paths from before the family packages still work: each
# replaces itself by the module it moved to, which is collected (with its doctests) there.
collect_ignore = [
    "metricstream/accumulator.py",
    "metricstream/clustered.py",
    "metricstream/score_plotting.py",
    "metricstream/score_report.py",
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
