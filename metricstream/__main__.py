"""``python -m metricstream``: the same as the ``metricstream`` command."""

from .cli import run

if __name__ == "__main__":
    run()
