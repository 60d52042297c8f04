"""metricstream benchmarks (not part of the installed package).

Run from the repository root::

    python -m benchmarks            # full run; rewrites the README's benchmark section
    python -m benchmarks --quick    # a short run (smaller inputs, fewer repeats); README untouched

Every compared result is checked equal before any time is reported. Optional competitors
(torchmetrics, boost-histogram) are measured when installed and skipped otherwise.
"""
