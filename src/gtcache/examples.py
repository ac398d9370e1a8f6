"""Built-in example programs for the demo, the tests and the benchmark.

A cartesian program and an unstructured one reading through a connectivity,
each with inputs and a NumPy reference, so that a loaded program can be
checked for the right numbers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import gt4py.next as gtx
import numpy as np
from gt4py.next import Dims, Field, float64

__all__ = ["EXAMPLES", "Example", "backend_by_name", "ring_offset_provider", "scale_by"]

IDim = gtx.Dimension("IDim")
JDim = gtx.Dimension("JDim")
Vertex = gtx.Dimension("Vertex")
Edge = gtx.Dimension("Edge")
E2VDim = gtx.Dimension("E2V", kind=gtx.DimensionKind.LOCAL)
E2V = gtx.FieldOffset("E2V", source=Vertex, target=(Edge, E2VDim))


@gtx.field_operator
def _axpy(a: Field[Dims[IDim, JDim], float64], b: Field[Dims[IDim, JDim], float64], alpha: float64) -> Field[Dims[IDim, JDim], float64]:
    return alpha * a + b


@gtx.program
def axpy(
    a: Field[Dims[IDim, JDim], float64],
    b: Field[Dims[IDim, JDim], float64],
    alpha: float64,
    out: Field[Dims[IDim, JDim], float64],
) -> None:
    _axpy(a, b, alpha, out=out)


@gtx.field_operator
def _edge_diff(v: Field[Dims[Vertex], float64]) -> Field[Dims[Edge], float64]:
    return v(E2V[1]) - v(E2V[0])


@gtx.program
def edge_diff(v: Field[Dims[Vertex], float64], out: Field[Dims[Edge], float64]) -> None:
    _edge_diff(v, out=out)


@gtx.field_operator
def _scale_by(a: Field[Dims[IDim], float64], factor: float64) -> Field[Dims[IDim], float64]:
    return factor * a


@gtx.program
def scale_by(a: Field[Dims[IDim], float64], factor: float64, out: Field[Dims[IDim], float64]) -> None:
    """Compiled per value of ``factor`` when it is static: many variants of one program."""
    _scale_by(a, factor, out=out)


def ring_offset_provider(n: int = 32) -> dict[str, Any]:
    """A ring of ``n`` vertices and ``n`` edges; edge i joins vertices i and i+1."""
    table = np.stack([np.arange(n), (np.arange(n) + 1) % n], axis=1).astype(gtx.IndexType)
    return {"E2V": gtx.as_connectivity([Edge, E2VDim], codomain=Vertex, data=table)}


@dataclasses.dataclass(frozen=True)
class Example:
    """A program, the offset provider it compiles for, and how to check a run of it."""

    name: str
    program: Any
    #: The offset provider for a mesh of a given size.
    offset_provider: Callable[[int], dict[str, Any]]
    #: ``(args, out)`` for a given size and seed; ``out`` is the last of ``args``.
    make_args: Callable[[int, int], tuple[tuple[Any, ...], Any]]
    reference: Callable[[tuple[Any, ...]], np.ndarray]


def _axpy_args(size: int, seed: int) -> tuple[tuple[Any, ...], Any]:
    rng = np.random.default_rng(seed)
    a = gtx.as_field([IDim, JDim], rng.random((size, size + 1)))
    b = gtx.as_field([IDim, JDim], rng.random((size, size + 1)))
    out = gtx.as_field([IDim, JDim], np.zeros((size, size + 1)))
    return (a, b, 2.5, out), out


def _edge_diff_args(size: int, seed: int) -> tuple[tuple[Any, ...], Any]:
    rng = np.random.default_rng(seed)
    v = gtx.as_field([Vertex], rng.random(size))
    out = gtx.as_field([Edge], np.zeros(size))
    return (v, out), out


def _edge_diff_reference(args: tuple[Any, ...]) -> np.ndarray:
    v = args[0].asnumpy()
    return np.roll(v, -1) - v


EXAMPLES: dict[str, Example] = {
    "axpy": Example(
        name="axpy",
        program=axpy,
        offset_provider=lambda size: {},
        make_args=_axpy_args,
        reference=lambda args: args[2] * args[0].asnumpy() + args[1].asnumpy(),
    ),
    "edge_diff": Example(
        name="edge_diff",
        program=edge_diff,
        offset_provider=ring_offset_provider,
        make_args=_edge_diff_args,
        reference=_edge_diff_reference,
    ),
}


def backend_by_name(name: str) -> Any:
    """``gtfn_cpu``, ``dace_cpu`` or ``roundtrip`` (any name ``gtcache.gt4py.targets`` knows)."""
    from gtcache.gt4py.targets import resolve_backend

    return resolve_backend(name)
