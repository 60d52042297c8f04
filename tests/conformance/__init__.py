"""The conformance kit's registry of accumulator kinds (see registry.py)."""
