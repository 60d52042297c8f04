"""A first-use script in a new interpreter, for the first-use tests of every family."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from metricstream._core import warmup


def run_first_use(
    code: str, cache: str | None, *args: str, background: bool = True, quiet: bool = True
) -> dict:
    """Run ``code`` (its last line of output is JSON) in a new interpreter with Numba's cache in
    ``cache`` (None: this environment's) and background compiles on or off; its result. The
    process must exit 0 (and, if ``quiet``, write nothing on stderr)."""
    env = dict(os.environ) if cache is None else {**os.environ, "NUMBA_CACHE_DIR": cache}
    env.pop("NUMBA_DISABLE_JIT", None)
    env[warmup.ENV] = "1" if background else "0"
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=1200,
    )
    assert done.returncode == 0, done.stderr
    assert not quiet or done.stderr == "", done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])
