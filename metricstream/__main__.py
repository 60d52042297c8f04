"""``python -m metricstream``: the same as the ``metricstream`` command."""

from .cli import main

if __name__ == "__main__":
    raise SystemExit(main())
