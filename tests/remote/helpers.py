"""What the remote tests share: the bundle key, a model run in a fresh process, the CLI."""

from __future__ import annotations

import json
import pathlib
from typing import Any

from click.testing import CliRunner

from gtcache_cli.main import cli
from tests.helpers import run_python, without_gt4py_build_cache

KEY = "remote-test-key"

MODEL_RUN = """
import json, sys, warnings
import numpy as np
import gtcache
from gtcache import examples
hook = gtcache.install()
results = []
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for name in sys.argv[1:]:
        example = examples.EXAMPLES[name]
        program = example.program.with_backend(examples.backend_by_name("roundtrip"))
        args, out = example.make_args(16, 3)
        program(*args, offset_provider=example.offset_provider(16))
        results.append(bool(np.allclose(out.asnumpy(), example.reference(args))))
print(json.dumps({
    "correct": results,
    "outcomes": [{"status": o.status, "key": o.key, "via": o.via, "detail": o.detail} for o in hook.outcomes],
    "warnings": [str(w.message) for w in caught if "gtcache" in str(w.message)],
}))
"""


def model_run(store: pathlib.Path, remote: str | None, tmp_path: pathlib.Path, *examples: str,
              key: str | None = KEY, **env: str) -> dict[str, Any]:
    """Run ``examples`` (default axpy) in a fresh process through ``store`` and ``remote``."""
    environment = {"GTCACHE_DIR": str(store), **without_gt4py_build_cache(tmp_path / f"gt4py-{store.name}"), **env}
    if remote is not None:
        environment["GTCACHE_REMOTE"] = remote
    if key is not None:
        environment["GTCACHE_BUNDLE_KEY"] = key
    result: dict[str, Any] = json.loads(run_python(MODEL_RUN, *(examples or ("axpy",)), env=environment).splitlines()[-1])
    return result


def gtcache_cli(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), env={"GTCACHE_BUNDLE_KEY": KEY, **(env or {})},
                                catch_exceptions=False)
    return result.exit_code, result.output
