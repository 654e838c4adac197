"""The retriever network for one query at a time: :class:`~r2a.retrieval.gnn.RetrieverNet`'s function as a few
folded weight tensors and plain torch calls.

The wrapper scores one candidate subgraph (~100 nodes, ~750 edges) per executed chunk. On graphs that small the
torch_geometric network spends most of its time in per-call overhead (≈ 30 module calls and the message-passing
machinery), not in arithmetic. This is the same function written for that case, derived from a trained network
once at load (nothing is retrained; the checkpoint is unchanged), in about 70 torch calls instead of ~300:

* the input normalizations are folded into the first linear layers;
* per layer, one matrix product of the node states gives every term that reads them — the message's sender and
  receiver terms and the update's own-state term — and its bias holds the query's term ``W_q Q + b_dst`` (one
  product of Q per query gives it for all layers and both heads' query halves);
* the message's output layer ``W2`` is affine and followed by the update's first linear layer, so the two are
  one matrix ``W2·U_a`` (folded in float64 at load), applied after the mean, once per receiving node;
* the messages are two row gathers of that product plus the edge terms (all layers' in one product per query),
  and their mean one ``index_add_``;
* no modules, no autograd (``inference_mode``), one intra-op thread for the call (a single query is too small to
  split; a second thread only adds hand-off latency), restored afterwards for whoever shares the process.

Same float32 arithmetic as the network up to the rounding of the folds: scores agree within ~1e-5
(``tests/test_retrieval_fast.py``: random networks and subgraphs, and the shipped checkpoint). Training keeps
using :class:`RetrieverNet`; this class only reads its weights.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np
import torch
import torch.nn.functional as F

#: torch.nn.LayerNorm's default, which QueryConditionedConv uses
LAYER_NORM_EPS = 1e-5


@contextmanager
def one_torch_thread() -> Iterator[None]:
    """torch on one intra-op thread inside the block (a single query's tensors are too small to split)."""
    threads = torch.get_num_threads()
    if threads != 1:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        if threads != 1:
            torch.set_num_threads(threads)


def _weight(layer: torch.nn.Linear) -> torch.Tensor:
    """A linear layer's weight as ``(in, out)`` float64, for folding (:func:`_stored` keeps the result)."""
    return layer.weight.detach().cpu().double().t()


def _bias(layer: torch.nn.Linear) -> torch.Tensor:
    return layer.bias.detach().cpu().double()


def _stored(t: torch.Tensor) -> torch.Tensor:
    return t.detach().cpu().float().contiguous()


def _linears(seq: torch.nn.Module) -> list[torch.nn.Linear]:
    return [m for m in seq.modules() if isinstance(m, torch.nn.Linear)]


def _normalized_first(layer: torch.nn.Linear, mean: torch.Tensor, std: torch.Tensor,
                      bias: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """``((x − mean) / std) W + b`` as ``x W' + b'``: the input normalization folded into a linear layer."""
    w, inv = _weight(layer), 1.0 / std.detach().cpu().double()
    b = _bias(layer) if bias else torch.zeros(w.shape[1], dtype=torch.float64)
    return _stored(w * inv[:, None]), _stored(b - (mean.detach().cpu().double() * inv) @ w)


@dataclass(frozen=True)
class _Encoder:
    """A two-layer ``gnn._mlp`` with its input normalization folded into the first layer."""

    w1: torch.Tensor
    b1: torch.Tensor
    w2: torch.Tensor
    b2: torch.Tensor

    @classmethod
    def of(cls, seq: torch.nn.Module, mean: torch.Tensor, std: torch.Tensor) -> "_Encoder":
        first, second = _linears(seq)
        w1, b1 = _normalized_first(first, mean, std)
        return cls(w1, b1, _stored(_weight(second)), _stored(_bias(second)))

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return torch.addmm(self.b2, F.silu(torch.addmm(self.b1, x, self.w1), inplace=True), self.w2)


@dataclass(frozen=True)
class _Layer:
    """One :class:`~r2a.retrieval.gnn.QueryConditionedConv`, folded."""

    node: torch.Tensor  # (k, 3k): [W_src | W_dst | U_h], every term that reads the node states
    node_bias: torch.Tensor  # (3k,): [0 | b_dst | b_update]; the query's part comes per query
    receiver_bias: torch.Tensor  # (k,): b2·U_a, what the fold of W2 leaves on nodes that receive messages
    message_update: torch.Tensor  # (k, k): W2·U_a, the message's output layer and the update's aggregate half
    update_out: torch.Tensor  # (k, k)
    update_out_bias: torch.Tensor
    norm_weight: torch.Tensor
    norm_bias: torch.Tensor

    @classmethod
    def of(cls, conv: Any) -> "_Layer":
        k = conv.src.weight.shape[0]
        update_in = _weight(conv.update_mlp[0])  # (2k, k): rows [:k] read h, rows [k:] the aggregate
        w2 = conv.message_out[1]
        return cls(node=_stored(torch.cat([_weight(conv.src), _weight(conv.dst), update_in[:k]], dim=1)),
                   node_bias=_stored(torch.cat([torch.zeros(k, dtype=torch.float64), _bias(conv.dst),
                                                _bias(conv.update_mlp[0])])),
                   receiver_bias=_stored(_bias(w2) @ update_in[k:]),
                   message_update=_stored(_weight(w2) @ update_in[k:]),
                   update_out=_stored(_weight(conv.update_mlp[2])), update_out_bias=_stored(_bias(conv.update_mlp[2])),
                   norm_weight=_stored(conv.norm.weight), norm_bias=_stored(conv.norm.bias))


class FastRetrieverNet:
    """A trained :class:`~r2a.retrieval.gnn.RetrieverNet`, folded for a single query's candidate subgraph."""

    def __init__(self, net: Any) -> None:
        self.config = net.config
        k = self.hidden = net.config.hidden
        self.query_encoder = _Encoder.of(net.query_encoder, net.query_mean, net.query_std)
        self.node_encoder = _Encoder.of(net.node_encoder, net.node_mean, net.node_std)
        self.layers = tuple(_Layer.of(conv) for conv in net.convs)
        edge = torch.nn.Linear(net.config.edge_dim, k * len(net.convs), bias=False)  # every layer's W_e side by side
        edge.weight.data = torch.cat([conv.edge.weight.detach().cpu() for conv in net.convs])
        self.edge, self.edge_bias = _normalized_first(edge, net.edge_mean, net.edge_std, bias=False)
        self.node_bias = torch.stack([layer.node_bias for layer in self.layers])  # (L, 3k)
        self.receiver_bias = torch.stack([layer.receiver_bias for layer in self.layers])  # (L, k)
        # the heads read [h, Q]: their first layer split by input; the query halves join the layers' query terms
        (score_in, score_out), (progress_in, progress_out) = _linears(net.score_head), _linears(net.progress_head)
        self.score_node, self.progress_node = _stored(_weight(score_in)[:k]), _stored(_weight(progress_in)[:k])
        self.score_out, self.score_out_bias = _stored(_weight(score_out)[:, 0]), _stored(_bias(score_out))
        self.progress_out, self.progress_out_bias = _stored(_weight(progress_out)[:, 0]), _stored(_bias(progress_out))
        self.query_terms = _stored(torch.cat([_weight(conv.query) for conv in net.convs]
                                             + [_weight(score_in)[k:], _weight(progress_in)[k:]], dim=1).t())
        self.query_bias = _stored(torch.cat([torch.zeros(k * len(net.convs), dtype=torch.float64),
                                             _bias(score_in), _bias(progress_in)]))

    def __call__(self, query: np.ndarray, x: np.ndarray, edge_index: np.ndarray,
                 edge_attr: np.ndarray) -> tuple[np.ndarray, float]:
        """``query`` (Dq,), ``x`` (n, Dn), ``edge_index`` (2, e), ``edge_attr`` (e, De) of one query → scores (n,)
        float32 and the progress estimate, what ``RetrieverNet`` gives with ``batch`` all zeros."""
        with one_torch_thread(), torch.inference_mode():
            scores, progress = self.forward(torch.from_numpy(np.asarray(query, np.float32)),
                                            torch.from_numpy(np.asarray(x, np.float32)), _Edges.of(edge_index, len(x)),
                                            torch.from_numpy(np.asarray(edge_attr, np.float32)))
            return scores.numpy(), float(progress)

    def forward(self, query: torch.Tensor, x: torch.Tensor, edges: "_Edges",
                edge_attr: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        k, layers = self.hidden, len(self.layers)
        q = self.query_encoder(query[None])[0]
        q_terms = torch.addmv(self.query_bias, self.query_terms, q)  # (L·k + 2k,)
        node_bias = self.node_bias.clone()  # each layer's [0 | b_dst + W_q Q | b_update]
        node_bias[:, k:2 * k] += q_terms[:layers * k].view(layers, k)
        h = self.node_encoder(x)
        edge_terms = torch.addmm(self.edge_bias, edge_attr, self.edge).view(-1, layers, k)
        for i, layer in enumerate(self.layers):
            h = self._layer(layer, h, node_bias[i], edges, edge_terms[:, i])
        at = layers * k
        return self._heads(h, q_terms[at:at + k], q_terms[at + k:])

    def _layer(self, layer: _Layer, h: torch.Tensor, node_bias: torch.Tensor, edges: "_Edges",
               edge_terms: torch.Tensor) -> torch.Tensor:
        """``norm(h + update([h, W2 · mean_{u→v} SiLU(W_src h_u + W_dst h_v + W_q Q + W_e e)]))``."""
        k = self.hidden
        terms = torch.addmm(node_bias, h, layer.node).view(-1, k)  # row 3v: v's sender term, 3v+1 receiver, 3v+2 own
        message = terms.index_select(0, edges.sender)
        message += terms.index_select(0, edges.receiver)
        message += edge_terms
        F.silu(message, inplace=True)
        mean = torch.zeros_like(h).index_add_(0, edges.target, message).mul_(edges.inverse_degree)
        update = torch.addmm(terms[2::3], mean, layer.message_update).addcmul_(edges.receives, layer.receiver_bias)
        F.silu(update, inplace=True)
        update = torch.addmm(layer.update_out_bias, update, layer.update_out).add_(h)
        return F.layer_norm(update, (k,), layer.norm_weight, layer.norm_bias, LAYER_NORM_EPS)

    def _heads(self, h: torch.Tensor, score_q: torch.Tensor,
               progress_q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A score per node from ``[h_v, Q]``; progress from ``[Σ_v softmax(score)_v h_v, Q]``."""
        hidden = F.silu(torch.addmm(score_q, h, self.score_node), inplace=True)
        scores = torch.addmv(self.score_out_bias, hidden, self.score_out)
        pooled = torch.softmax(scores, 0) @ h
        hidden = F.silu(torch.addmv(progress_q, self.progress_node.t(), pooled), inplace=True)
        return scores, torch.sigmoid(hidden @ self.progress_out + self.progress_out_bias)[0]


@dataclass(frozen=True)
class _Edges:
    """What every layer reads of a subgraph's edges (built once per query)."""

    sender: torch.Tensor  # (e,) row of each edge's sender term in the layer's (3n, k) node terms: 3·source
    receiver: torch.Tensor  # (e,) row of its receiver term: 3·target + 1
    target: torch.Tensor  # (e,) receiving node
    inverse_degree: torch.Tensor  # (n, 1) 1 / in-degree (1 where there is none: the sum is 0 there)
    receives: torch.Tensor  # (n, 1) 1.0 where a node has an incoming edge

    @classmethod
    def of(cls, edge_index: np.ndarray, num_nodes: int) -> "_Edges":
        source, target = np.asarray(edge_index[0], np.int64), np.asarray(edge_index[1], np.int64)
        degree = np.bincount(target, minlength=num_nodes)[:, None]
        return cls(sender=torch.from_numpy(3 * source), receiver=torch.from_numpy(3 * target + 1),
                   target=torch.from_numpy(target),
                   inverse_degree=torch.from_numpy((1.0 / np.maximum(degree, 1)).astype(np.float32)),
                   receives=torch.from_numpy((degree > 0).astype(np.float32)))


__all__ = ["FastRetrieverNet", "one_torch_thread"]
