"""An independent maximum flow for the R2T truncation tests (not a test module): scipy's Dinic
on the FULL network source -> a (cap) -> b (each result's capacity) -> sink (cap), with no
collapsing and no certificate, parallel results added and a bundle capped at cap."""

from __future__ import annotations

import numpy as np
from scipy import sparse
from scipy.sparse.csgraph import maximum_flow


def full_network_flow(a: np.ndarray, b: np.ndarray, caps: np.ndarray, cap: int) -> int:
    """The maximum flow of the network above (``a``, ``b``: unit codes >= 0 of each result;
    ``caps``: its integer capacity; ``cap``: every unit's)."""
    if not a.size:
        return 0
    na, nb = int(a.max()) + 1, int(b.max()) + 1
    sink = 1 + na + nb
    rows = np.concatenate([np.zeros(na, np.int64), 1 + a, 1 + na + np.arange(nb)])
    cols = np.concatenate([1 + np.arange(na), 1 + na + b, np.full(nb, sink)])
    data = np.concatenate([np.full(na, cap), caps, np.full(nb, cap)]).astype(np.int64)
    graph = sparse.coo_matrix((data, (rows, cols)), shape=(sink + 1, sink + 1)).tocsr()
    graph.sum_duplicates()
    graph.data = np.minimum(graph.data, cap).astype(np.int32)  # a bundle carries <= cap
    return int(maximum_flow(graph, 0, sink, method="dinic").flow_value)
