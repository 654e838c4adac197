"""The query-conditioned graph network that scores candidate primitives and estimates task progress.

Every message is conditioned on the query, ``m_{u→v} = Msg(h_u, h_v, Q_t, e_uv)`` (a torch_geometric
``MessagePassing`` layer, mean aggregation, residual update with layer norm), three layers by default. The
network reads a batch of candidate subgraphs at once: ``batch[v]`` says which query node ``v`` belongs to.
Outputs: a score per node (softmax over a query's candidates gives retrieval weights) and a progress estimate
``p̂`` per query from the score-weighted pooling of the node states.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import nn
from torch_geometric.nn import MessagePassing
from torch_geometric.utils import softmax as segment_softmax


@dataclass(frozen=True)
class RetrieverNetConfig:
    """Shapes of the network; stored in the checkpoint."""

    query_dim: int
    node_dim: int
    edge_dim: int
    hidden: int = 64
    layers: int = 3

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


def _mlp(*widths: int) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(widths, widths[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(widths) - 2:
            layers.append(nn.SiLU())
    return nn.Sequential(*layers)


class QueryConditionedConv(MessagePassing):
    """One round of messages, each a function of both end states, the edge and the query.

    ``Msg(h_u, h_v, Q, e) = W2 · SiLU(W_src h_u + W_dst h_v + W_q Q + W_e e + b)`` — an MLP on the concatenation
    ``[h_u, h_v, Q, e]`` whose first layer is split by input, so the node terms are computed once per node (and
    the query term once per query) instead of once per edge. The output layer ``W2`` is affine, so it commutes
    with the mean: it is applied to the aggregated hidden messages, once per receiving node — the same function
    as applying it to every message, a fraction of the work (candidate subgraphs have ~8× more edges than
    nodes). A node that receives no message aggregates to zero, as with the mean of no messages. Then a residual
    update with layer norm.
    """

    def __init__(self, hidden: int, edge_dim: int) -> None:
        super().__init__(aggr="mean")
        self.src = nn.Linear(hidden, hidden, bias=False)
        self.dst = nn.Linear(hidden, hidden)
        self.query = nn.Linear(hidden, hidden, bias=False)
        self.edge = nn.Linear(edge_dim, hidden, bias=False)
        self.message_out = nn.Sequential(nn.SiLU(), nn.Linear(hidden, hidden))
        self.update_mlp = _mlp(2 * hidden, hidden, hidden)
        self.norm = nn.LayerNorm(hidden)

    def forward(self, h: torch.Tensor, edge_index: torch.Tensor, edge_attr: torch.Tensor,
                q: torch.Tensor, batch: torch.Tensor, receives: torch.Tensor) -> torch.Tensor:
        """``h`` (N, hidden) node states, ``q`` (B, hidden) the encoded queries, ``batch`` (N,) each node's query,
        ``receives`` (N, 1) 1.0 where a node has at least one incoming edge."""
        hidden = self.propagate(edge_index, src=self.src(h), dst=self.dst(h) + self.query(q)[batch],
                                edge_attr=self.edge(edge_attr), size=(len(h), len(h)))
        w2 = self.message_out[1]
        aggregated = torch.addmm(w2.bias, hidden, w2.weight.t()) * receives
        return self.norm(h + self.update_mlp(torch.cat([h, aggregated], dim=-1)))

    def message(self, src_j: torch.Tensor, dst_i: torch.Tensor,  # type: ignore[override]
                edge_attr: torch.Tensor) -> torch.Tensor:
        return self.message_out[0](src_j + dst_i + edge_attr)


class RetrieverNet(nn.Module):
    """(queries, candidate subgraphs) → node scores and per-query progress."""

    def __init__(self, config: RetrieverNetConfig) -> None:
        super().__init__()
        self.config = config
        h = config.hidden
        # input normalization, fitted on the training data and saved with the weights
        for name, dim in (("query", config.query_dim), ("node", config.node_dim), ("edge", config.edge_dim)):
            self.register_buffer(f"{name}_mean", torch.zeros(dim))
            self.register_buffer(f"{name}_std", torch.ones(dim))
        self.query_encoder = _mlp(config.query_dim, 2 * h, h)
        self.node_encoder = _mlp(config.node_dim, h, h)
        self.convs = nn.ModuleList(QueryConditionedConv(h, config.edge_dim) for _ in range(config.layers))
        self.score_head = _mlp(2 * h, h, 1)
        self.progress_head = _mlp(2 * h, h, 1)

    def set_normalization(self, stats: dict[str, tuple[torch.Tensor, torch.Tensor]]) -> None:
        for name, (mean, std) in stats.items():
            getattr(self, f"{name}_mean").copy_(mean)
            getattr(self, f"{name}_std").copy_(torch.clamp(std, min=1e-3))

    def forward(self, query: torch.Tensor, x: torch.Tensor, edge_index: torch.Tensor, edge_attr: torch.Tensor,
                batch: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``query`` (B, Dq); ``x`` (N, Dn) candidate features; ``edge_index`` (2, E) over the N candidates;
        ``edge_attr`` (E, De); ``batch`` (N,) query index of each candidate → scores (N,), progress (B,)."""
        q = self.query_encoder((query - self.query_mean) / self.query_std)
        q_node = q[batch]
        h = self.node_encoder((x - self.node_mean) / self.node_std)
        e = (edge_attr - self.edge_mean) / self.edge_std
        receives = (torch.bincount(edge_index[1], minlength=len(h)) > 0).to(h.dtype)[:, None]
        for conv in self.convs:
            h = conv(h, edge_index, e, q, batch, receives)
        scores = self.score_head(torch.cat([h, q_node], dim=-1)).squeeze(-1)
        weights = segment_softmax(scores, batch, num_nodes=len(q))
        pooled = torch.zeros_like(q).index_add_(0, batch, weights[:, None] * h)
        progress = torch.sigmoid(self.progress_head(torch.cat([pooled, q], dim=-1)).squeeze(-1))
        return scores, progress


__all__ = ["QueryConditionedConv", "RetrieverNet", "RetrieverNetConfig"]
