"""A test of the kind `pytest --gtcache-require-warm` guards (run by scripts/record-docs)."""

import numpy as np

from gtcache import examples


def test_edge_diff() -> None:
    example = examples.EXAMPLES["edge_diff"]
    program = example.program.with_backend(examples.backend_by_name("gtfn_cpu"))
    args, out = example.make_args(64, 1)
    program(*args, offset_provider=example.offset_provider(64))
    assert np.allclose(out.asnumpy(), example.reference(args))
