"""Collection rules for the whole repository (the tests' own fixtures live in tests/conftest.py)."""

# Modules kept only so that import paths from before the family packages still work: each
# replaces itself by the module it moved to, which is collected (with its doctests) there.
collect_ignore = [
    "metricstream/accumulator.py",
    "metricstream/clustered.py",
    "metricstream/score_plotting.py",
    "metricstream/score_report.py",
]
