"""Programs the benchmark measures besides gtcache.examples: a large unstructured stencil
(divergence, curl and gradients over cells, edges and vertices with a vertical dimension,
shaped like icon4py's diffusion / dycore stencils) and a program compiled for many static
values (50 variants of one program, as a model set-up compiles them)."""

from __future__ import annotations

from typing import Any

import gt4py.next as gtx
import numpy as np
from gt4py.next import Dims, Field, abs, float64, neighbor_sum, where  # noqa: A004

Cell = gtx.Dimension("Cell")
Edge = gtx.Dimension("Edge")
Vertex = gtx.Dimension("Vertex")
K = gtx.Dimension("K", kind=gtx.DimensionKind.VERTICAL)
C2EDim = gtx.Dimension("C2E", kind=gtx.DimensionKind.LOCAL)
V2EDim = gtx.Dimension("V2E", kind=gtx.DimensionKind.LOCAL)
E2CDim = gtx.Dimension("E2C", kind=gtx.DimensionKind.LOCAL)
E2VDim = gtx.Dimension("E2V", kind=gtx.DimensionKind.LOCAL)
C2E = gtx.FieldOffset("C2E", source=Edge, target=(Cell, C2EDim))
V2E = gtx.FieldOffset("V2E", source=Edge, target=(Vertex, V2EDim))
E2C = gtx.FieldOffset("E2C", source=Cell, target=(Edge, E2CDim))
E2V = gtx.FieldOffset("E2V", source=Vertex, target=(Edge, E2VDim))


@gtx.field_operator
def _divergence(vn: Field[Dims[Edge, K], float64], geofac_div: Field[Dims[Cell, C2EDim], float64]) -> Field[Dims[Cell, K], float64]:
    return neighbor_sum(geofac_div * vn(C2E), axis=C2EDim)


@gtx.field_operator
def _curl(vn: Field[Dims[Edge, K], float64], geofac_rot: Field[Dims[Vertex, V2EDim], float64]) -> Field[Dims[Vertex, K], float64]:
    return neighbor_sum(geofac_rot * vn(V2E), axis=V2EDim)


@gtx.field_operator
def _diffuse_vn(
    vn: Field[Dims[Edge, K], float64],
    w: Field[Dims[Cell, K], float64],
    theta: Field[Dims[Cell, K], float64],
    geofac_div: Field[Dims[Cell, C2EDim], float64],
    geofac_rot: Field[Dims[Vertex, V2EDim], float64],
    inv_dual_edge_length: Field[Dims[Edge], float64],
    inv_primal_edge_length: Field[Dims[Edge], float64],
    tangent_orientation: Field[Dims[Edge], float64],
    dt: float64,
    nudge: float64,
) -> tuple[Field[Dims[Edge, K], float64], Field[Dims[Cell, K], float64], Field[Dims[Vertex, K], float64]]:
    div = _divergence(vn, geofac_div)
    rot = _curl(vn, geofac_rot)
    grad_div = (div(E2C[1]) - div(E2C[0])) * inv_dual_edge_length
    grad_rot = tangent_orientation * (rot(E2V[1]) - rot(E2V[0])) * inv_primal_edge_length
    w_e = 0.5 * (w(E2C[0]) + w(E2C[1]))
    theta_e = 0.5 * (theta(E2C[0]) + theta(E2C[1]))
    kh = nudge * (abs(grad_div) + abs(grad_rot)) + 0.01
    limited = where(theta_e > 300.0, kh * grad_div, kh * grad_div * 0.5)
    vn_new = vn + dt * (limited - kh * grad_rot) + dt * nudge * w_e * theta_e * 1.0e-3
    div_new = _divergence(vn_new, geofac_div)
    w_new = w + dt * div_new * theta * 1.0e-3
    return vn_new, w_new, _curl(vn_new, geofac_rot)


@gtx.program
def diffuse_vn(
    vn: Field[Dims[Edge, K], float64],
    w: Field[Dims[Cell, K], float64],
    theta: Field[Dims[Cell, K], float64],
    geofac_div: Field[Dims[Cell, C2EDim], float64],
    geofac_rot: Field[Dims[Vertex, V2EDim], float64],
    inv_dual_edge_length: Field[Dims[Edge], float64],
    inv_primal_edge_length: Field[Dims[Edge], float64],
    tangent_orientation: Field[Dims[Edge], float64],
    dt: float64,
    nudge: float64,
    vn_out: Field[Dims[Edge, K], float64],
    w_out: Field[Dims[Cell, K], float64],
    vort_out: Field[Dims[Vertex, K], float64],
) -> None:
    _diffuse_vn(
        vn, w, theta, geofac_div, geofac_rot, inv_dual_edge_length, inv_primal_edge_length,
        tangent_orientation, dt, nudge, out=(vn_out, w_out, vort_out),
    )


def mesh_offset_provider(n_cells: int = 200, seed: int = 0) -> dict[str, Any]:
    """Connectivities of a synthetic triangle mesh (random but valid indices)."""
    rng = np.random.default_rng(seed)
    n_edges, n_vertices = n_cells * 3 // 2, n_cells // 2

    def table(rows: int, cols: int, high: int) -> np.ndarray:
        return rng.integers(0, high, size=(rows, cols)).astype(gtx.IndexType)

    return {
        "C2E": gtx.as_connectivity([Cell, C2EDim], codomain=Edge, data=table(n_cells, 3, n_edges)),
        "V2E": gtx.as_connectivity([Vertex, V2EDim], codomain=Edge, data=table(n_vertices, 6, n_edges)),
        "E2C": gtx.as_connectivity([Edge, E2CDim], codomain=Cell, data=table(n_edges, 2, n_cells)),
        "E2V": gtx.as_connectivity([Edge, E2VDim], codomain=Vertex, data=table(n_edges, 2, n_vertices)),
    }


# One program compiled for many static values (50 variants, as a model set-up compiles them).
from gtcache.examples import scale_by  # noqa: E402,F401
