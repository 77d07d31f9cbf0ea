"""The host relaxation of the combined mapping objective (not in the paper).

A mapping, seen from its hosts only: replica ``(s, i)`` sits on host ``h(s, i)``; lane ``i`` of
stage edge ``e = (a, c)`` then pays at least the cheapest transfer between the two hosts
(``cost_e[h, h']`` = the smallest of ``costs.fwd[e]`` over device pairs of the two hosts, the
host itself over its distinct pairs), and the ring of stage ``s`` at least Eq. 9 with

* when every replica of ``s`` is on one host ``h``: the widest bottleneck of ``R`` devices joined
  inside ``h`` (the largest ``beta`` such that a component of ``h``'s pairs of bandwidth
  ``>= beta`` holds ``R`` devices);
* when ``s`` spans several hosts: the widest channel between two hosts (the ring has a hop
  between two of its hosts) and, for every host ``h`` it uses, the widest channel from ``h`` to
  another host it uses (the ring leaves ``h`` somewhere).

The relaxation is the integer program over host counts ``z[s, h]`` (capacity ``sum_s z[s, h] <=
|h|``, ``sum_h z[s, h] = R``), lane flows ``x[e, h, h']`` (lanes of ``e`` from ``h`` to ``h'``,
marginals ``z[a, .]`` and ``z[c, .]``), indicators of used host pairs ``v[e, h, h'] >= x / cap``
(``cap`` = the most lanes the pair can hold), of used hosts ``w[s, h]``, of a whole ring in one
host ``one[s, h]`` (``R one <= z``, at most one host, at most ``|h| // R`` rings per host) and of
every lane of an edge inside its host (``R inside[e] <= sum_h x[e, h, h]``), the slowest lane
``Cf[e] >= cost_e[h, h'] v[e, h, h']`` and ``>= crossing_e (1 - inside[e])`` (``Cb`` the reverse
direction), the ring terms above written with ``one`` and ``w`` (the widest used neighbour of
``h`` is the first used one in ``h``'s neighbours by decreasing bandwidth), and the recurrences of
:func:`~solvers.mapping.objective.iteration_bound_s` as linear inequalities over the
start and end times ``E``, ``G``, ``L`` (their least solution is the longest path), minimising
the iteration's end.  Every mapping gives a solution of it whose value is at most the mapping's
combined objective (each term above is at most the mapping's), so its optimum, and HiGHS' dual
bound below it, is a lower bound of every mapping of the partition.  HiGHS' incumbent is not: HiGHS
reports "optimal" once the incumbent is within its gap tolerances of the dual bound
(:data:`MIP_REL_GAP`, :data:`MIP_ABS_GAP_S`), so the bound read from an answer is the dual bound,
and never more than the incumbent less those tolerances (:func:`proven_bound_s`).  Lanes
are relaxed to one flow per edge (a DAG's lanes must agree over all edges); the device bounds of
:func:`~solvers.mapping.bounds.device_bounds` stay as floors.

Its incumbent is also a layout: :func:`host_lanes` turns the counts into a host per replica,
:func:`settle_lanes` makes its lanes agree over the edges, and
:func:`~solvers.mapping.search.host_start` places devices inside those hosts.
On hosts whose channels are far wider inside than between (Parmesan App. D-B's random
topologies, hierarchies of servers) this sees what the device-level bounds cannot: how far apart
a layout forces its lanes.
"""

from __future__ import annotations

import multiprocessing
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, linear_sum_assignment, milp
from scipy.sparse import coo_matrix

from solvers.arrays import FloatArray, IntArray
from solvers.mapping.bounds import DeviceBounds
from solvers.mapping.heuristics import consecutive_mapping, p2p_mapping
from solvers.mapping.objective import PipelineCosts, PipelineModel, edge_costs, iteration_bound_s, ring_s
from solvers.mapping.unionfind import component_threshold_Bps
from solvers.model.topology import Topology
from solvers.supervise import Child, silence_output

# the relaxation is built only while it stays small: HiGHS' time per node grows with it
MAX_NONZEROS = 600_000
# HiGHS ends a MIP as "optimal" once (incumbent - dual bound) <= max(MIP_REL_GAP * |incumbent|,
# MIP_ABS_GAP_S): the relative gap is passed to it (HiGHS' default), the absolute one is HiGHS'
# default ``mip_abs_gap`` (scipy's milp does not expose it), in the objective's unit, seconds here
MIP_REL_GAP = 1e-4
MIP_ABS_GAP_S = 1e-6
# HiGHS' dual bound comes from LPs solved to floating-point tolerances: it is taken this much lower
LP_REL_TOLERANCE = 1e-9


@dataclass(frozen=True)
class HostRelaxation:
    """``bound_s``: a proven lower bound of every mapping's combined objective; ``value_s`` the
    relaxation value of ``host_of`` (``S x R`` host per replica, lanes in ring order; ``None``
    when HiGHS found no solution in time); ``status``: ``optimal``, ``time_limit``, ``killed`` (no
    answer by the deadline) or ``cancelled`` (not needed any more)."""

    bound_s: float
    value_s: float
    host_of: IntArray | None
    host_index: IntArray
    status: str
    seconds: float


def host_index(topo: Topology) -> IntArray:
    """``out[d]`` = index of device ``d``'s host in ``topo.hosts``."""
    order = {h: k for k, h in enumerate(topo.hosts)}
    return np.array([order[d.node] for d in topo.devices], dtype=np.int64)


def _block_min(matrix: FloatArray, hid: IntArray, n_hosts: int) -> FloatArray:
    """``out[h, h']`` = the smallest entry of ``matrix`` over rows of host ``h`` and columns of
    ``h'``, the diagonal left out (``inf`` where there is no such pair)."""
    m = np.array(matrix, dtype=np.float64)
    np.fill_diagonal(m, np.inf)
    order = np.argsort(hid, kind="stable")
    starts = np.searchsorted(hid[order], np.arange(n_hosts))
    rows = np.minimum.reduceat(m[order], starts, axis=0)
    return np.asarray(np.minimum.reduceat(rows[:, order], starts, axis=1), dtype=np.float64)


def _intra_ring_Bps(bw: FloatArray, hid: IntArray, n_hosts: int, replicas: int) -> FloatArray:
    """Per host: the largest ``beta`` such that a component of its pairs with bandwidth ``>= beta``
    (either direction) holds ``replicas`` devices (0 when the host is smaller)."""
    out = np.zeros(n_hosts)
    for h in range(n_hosts):
        members = np.flatnonzero(hid == h)
        if len(members) >= replicas:
            out[h] = float(component_threshold_Bps(bw[np.ix_(members, members)], replicas).max())
    return out


def proven_bound_s(status: int, value: float, dual: float | None) -> float:
    """The lower bound that HiGHS' answer proves for the relaxation's optimum: its dual bound, and
    never more than its incumbent ``value`` less the gap tolerance ``max(MIP_REL_GAP |value|,
    MIP_ABS_GAP_S)``.  The incumbent is no bound even when ``status`` is 0 ("optimal"): HiGHS stops
    once the two are within that tolerance (on the first case ``make fuzz`` found, the incumbent
    0.0201694 s, the dual bound 0.0201688 s, the best mapping 0.0201688 s).  Nor is a dual bound
    equal to the incumbent: HiGHS prunes the nodes whose bound is within the tolerance of the
    incumbent and, the tree exhausted, reports the incumbent as its dual bound (on the second,
    random_blk_2 seed 429, both 0.0062049 s with ``mip_rel_gap`` 0, the best mapping 0.0062044 s:
    the absolute gap of 1e-6 s).  Where an answer carries no dual bound, the incumbent less the
    tolerance if optimal; otherwise 0."""
    shaved = value - max(MIP_REL_GAP * abs(value), MIP_ABS_GAP_S) if np.isfinite(value) else None
    if dual is not None and np.isfinite(dual):
        return max(0.0, float(dual) if shaved is None else min(float(dual), shaved))
    if status == 0 and shaved is not None:
        return max(0.0, shaved)
    return 0.0


class _Program:
    """Columns with bounds and integrality, rows as coordinate lists (a sparse MILP)."""

    def __init__(self) -> None:
        self.lb: list[FloatArray] = []
        self.ub: list[FloatArray] = []
        self.integer: list[FloatArray] = []
        self.n = 0
        self.rows: list[IntArray] = []
        self.cols: list[IntArray] = []
        self.vals: list[FloatArray] = []
        self.lo: list[FloatArray] = []
        self.hi: list[FloatArray] = []
        self.m = 0

    def columns(self, shape: tuple[int, ...], lb: Any, ub: Any, integer: bool) -> IntArray:
        size = int(np.prod(shape))
        idx = np.arange(self.n, self.n + size).reshape(shape)
        self.n += size
        self.lb.append(np.broadcast_to(np.asarray(lb, dtype=np.float64), shape).reshape(-1).copy())
        self.ub.append(np.broadcast_to(np.asarray(ub, dtype=np.float64), shape).reshape(-1).copy())
        self.integer.append(np.full(size, 1.0 if integer else 0.0))
        return idx

    def add(self, cols: Any, vals: Any, lo: Any, hi: Any) -> None:
        """Rows ``lo <= sum_k vals[r, k] x[cols[r, k]] <= hi`` (2-D ``cols``/``vals``, one row each)."""
        cols = np.atleast_2d(np.asarray(cols, dtype=np.int64))
        vals = np.broadcast_to(np.asarray(vals, dtype=np.float64), cols.shape)
        k = cols.shape[0]
        self.rows.append(np.repeat(np.arange(self.m, self.m + k), cols.shape[1]))
        self.cols.append(cols.reshape(-1))
        self.vals.append(vals.reshape(-1))
        self.lo.append(np.broadcast_to(np.asarray(lo, dtype=np.float64), (k,)).copy())
        self.hi.append(np.broadcast_to(np.asarray(hi, dtype=np.float64), (k,)).copy())
        self.m += k

    @property
    def nonzeros(self) -> int:
        return int(sum(len(c) for c in self.cols))

    def solve(self, objective_col: int, time_limit_s: float) -> tuple[int, float, FloatArray | None, float | None]:
        """HiGHS on ``min x[objective_col]``: status (0 optimal, 1 limit), value, solution, dual bound."""
        c = np.zeros(self.n)
        c[objective_col] = 1.0
        keep = np.concatenate(self.vals) != 0
        a = coo_matrix((np.concatenate(self.vals)[keep], (np.concatenate(self.rows)[keep],
                                                           np.concatenate(self.cols)[keep])),
                       shape=(self.m, self.n)).tocsr()
        res = milp(c, integrality=np.concatenate(self.integer),
                   bounds=Bounds(np.concatenate(self.lb), np.concatenate(self.ub)),
                   constraints=[LinearConstraint(a, np.concatenate(self.lo), np.concatenate(self.hi))],
                   options={"time_limit": max(0.05, time_limit_s), "mip_rel_gap": MIP_REL_GAP})
        dual = getattr(res, "mip_dual_bound", None)
        return int(res.status), float(res.fun) if res.x is not None else float("inf"), res.x, \
            float(dual) if dual is not None else None


def _solve_child(conn: Any, program: _Program, objective_col: int, time_limit_s: float) -> None:
    silence_output()  # HiGHS may print on fd 1 / 2
    try:
        conn.send(program.solve(objective_col, time_limit_s))
    except Exception:  # the parent treats a silent child as "no result"
        conn.send(None)
    conn.close()


class BackgroundSolve:
    """:meth:`_Program.solve` in a forked child, so that the caller goes on meanwhile; the child
    is killed ``grace_s`` after the time limit (HiGHS can overrun its own limit inside a
    heuristic).  Inside a daemonic process (which may not have children) it is solved at once,
    under HiGHS' own limit only."""

    def __init__(self, program: _Program, objective_col: int, time_limit_s: float, grace_s: float = 1.0) -> None:
        self.deadline = time.monotonic() + time_limit_s + grace_s
        self.child: Child | None = None
        self.cancelled = False
        self.solved: tuple[int, float, FloatArray | None, float | None] | None = None
        try:
            self.child = Child.start(multiprocessing.get_context("fork"), _solve_child,
                                     (program, objective_col, time_limit_s), daemon=True)
        except AssertionError:
            self.solved = program.solve(objective_col, time_limit_s)

    def done(self) -> bool:
        """Whether the answer is there (or the child is gone)."""
        return self.cancelled or self.child is None or self.child.conn.poll(0) or not self.child.process.is_alive()

    def cancel(self) -> None:
        """Stop the child now (:meth:`answer` then gives ``None``)."""
        if self.child is not None and not self.cancelled:
            self.child.stop(1.0)
        self.cancelled = True

    def answer(self) -> tuple[int, float, FloatArray | None, float | None] | None:
        """Status, value, solution and dual bound (:meth:`_Program.solve`); ``None`` when the child
        gave no answer by the deadline.  Call once."""
        if self.cancelled:
            return None
        if self.child is None:
            return self.solved
        try:
            ready = self.child.conn.poll(max(0.0, self.deadline - time.monotonic()))
            return self.child.receive() if ready else None
        finally:
            self.child.stop(1.0)


@dataclass
class HostRelaxationRun:
    """A relaxation being solved (:func:`start_host_relaxation`); :meth:`result` waits for it."""

    model: PipelineModel
    solve: BackgroundSolve
    counts: IntArray
    host_costs: PipelineCosts
    host_index: IntArray
    started_s: float

    def result(self, settle_deadline: float) -> HostRelaxation:
        """The relaxation's answer; its layout's lanes settled (:func:`settle_lanes`) until
        ``settle_deadline``."""
        answer = self.solve.answer()
        if answer is None:
            return HostRelaxation(0.0, float("inf"), None, self.host_index,
                                  "cancelled" if self.solve.cancelled else "killed", time.monotonic() - self.started_s)
        status, value, sol, dual = answer
        bound = proven_bound_s(status, value, dual)
        host_of = None
        if sol is not None:
            host_of = host_lanes(self.model, np.rint(sol[self.counts]).astype(np.int64),
                                 [np.maximum(m, m.T) for m in self.host_costs.fwd])
            host_of = settle_lanes(self.model, host_of, self.host_costs, settle_deadline)
        return HostRelaxation(bound * (1 - LP_REL_TOLERANCE), value, host_of, self.host_index,
                              "optimal" if status == 0 else "time_limit", time.monotonic() - self.started_s)


    def heuristic_layout(self, settle_deadline: float) -> tuple[IntArray, float] | None:
        """A layout without the relaxation's counts, for when HiGHS has none in time (the 256-
        and 512-device random_blk_2 cells): the better at host level of the hosts of p2p-first's and of
        CS's devices taken as counts (lane-major and stage-major fills of the hosts in
        device order), each through :func:`host_lanes` and :func:`settle_lanes`; with its host
        objective (a lower bound of every mapping that keeps it).  ``None`` when
        ``settle_deadline`` passes first."""
        s_, r = self.model.n_stages, self.model.replicas
        n_hosts = int(self.host_index.max()) + 1
        if s_ * r > len(self.host_index):
            return None
        lane_cost = [np.maximum(m, m.T) for m in self.host_costs.fwd]
        best: tuple[tuple[float, float], IntArray] | None = None
        fills = (p2p_mapping(s_, r), consecutive_mapping(s_, r))
        for k, place in enumerate(fills):
            now = time.monotonic()
            if now > settle_deadline:
                break
            counts = np.array([np.bincount(self.host_index[place[s]], minlength=n_hosts) for s in range(s_)])
            host_of = settle_lanes(self.model, host_lanes(self.model, counts, lane_cost), self.host_costs,
                                   now + (settle_deadline - now) / (len(fills) - k))
            value = _host_objective(self.model, host_of, self.host_costs)
            if best is None or value < best[0]:
                best = (value, host_of)
        return None if best is None else (best[1], best[0][0])


def start_host_relaxation(model: PipelineModel, costs: PipelineCosts, topo: Topology, bounds: DeviceBounds,
                          time_limit_s: float) -> HostRelaxationRun | None:
    """The relaxation (module doc) handed to HiGHS for ``time_limit_s`` in the background; ``None``
    where it does not apply (one host, a host per device, a program over
    ``MAX_NONZEROS``)."""
    started = time.monotonic()
    hid = host_index(topo)
    n_hosts, n = len(topo.hosts), topo.n_devices
    s_, r, mb = model.n_stages, model.replicas, model.micro_batches
    if n_hosts < 2 or n_hosts == n or s_ * r > n:
        return None
    size = np.bincount(hid, minlength=n_hosts)
    e_ = model.n_edges
    if e_ * n_hosts * n_hosts * 4 + s_ * n_hosts * n_hosts * (n_hosts + 2) > MAX_NONZEROS:
        return None
    src, dst = model.src.tolist(), model.dst.tolist()
    f, b, k = model.f_s.tolist(), model.b_s.tolist(), model.k.tolist()
    bw = np.array(costs.bandwidth_Bps, dtype=np.float64)
    np.fill_diagonal(bw, 0.0)
    lat = costs.latency_s[~np.eye(n, dtype=bool)]
    lat_min = float(lat.min()) if lat.size else 0.0
    cap = np.minimum(size, r)

    p = _Program()
    z = p.columns((s_, n_hosts), 0, np.broadcast_to(cap, (s_, n_hosts)), True)
    w = p.columns((s_, n_hosts), 0, 1, True)
    pair_cap = np.minimum(cap[:, None], cap[None, :])
    x = p.columns((e_, n_hosts, n_hosts), 0, np.broadcast_to(pair_cap, (e_, n_hosts, n_hosts)), True)
    v = p.columns((e_, n_hosts, n_hosts), 0, 1, True)
    cf = p.columns((e_,), [fl for fl, _ in bounds.edge_floor], np.inf, False)
    cb = p.columns((e_,), [gr for _, gr in bounds.edge_floor], np.inf, False)
    ar = p.columns((s_,), bounds.ar_floor, np.inf, False)
    e_t = p.columns((s_,), 0, np.inf, False)
    g_t = p.columns((s_,), 0, np.inf, False)
    l_t = p.columns((s_,), 0, np.inf, False)
    end = int(p.columns((1,), 0, np.inf, False)[0])

    hosts = np.arange(n_hosts)
    lane_fwd: list[FloatArray] = []
    p.add(z, 1.0, r, r)  # every stage's R replicas
    p.add(z.T, 1.0, -np.inf, size)  # host capacity
    p.add(np.stack([z.reshape(-1), w.reshape(-1)], axis=1), np.stack([np.ones(s_ * n_hosts),
                                                                       -np.tile(cap, s_).astype(np.float64)], axis=1),
          -np.inf, 0.0)  # z <= cap w
    p.add(np.stack([w.reshape(-1), z.reshape(-1)], axis=1), [1.0, -1.0], -np.inf, 0.0)  # w <= z
    for j, (a, c) in enumerate(zip(src, dst, strict=True)):
        # lanes out of a's hosts and into c's hosts
        p.add(np.concatenate([x[j], z[a][:, None]], axis=1), np.r_[np.ones(n_hosts), -1.0], 0.0, 0.0)
        p.add(np.concatenate([x[j].T, z[c][:, None]], axis=1), np.r_[np.ones(n_hosts), -1.0], 0.0, 0.0)
        p.add(np.stack([x[j].reshape(-1), v[j].reshape(-1)], axis=1),
              np.stack([np.ones(n_hosts * n_hosts), -pair_cap.reshape(-1).astype(np.float64)], axis=1), -np.inf, 0.0)
        fwd = _block_min(costs.fwd[j], hid, n_hosts)
        lane_fwd.append(fwd)
        for col, cost in ((cf[j], fwd), (cb[j], fwd.T)):
            finite = np.isfinite(cost)
            hh = np.flatnonzero(~finite.reshape(-1))
            if len(hh):  # no channel at all (a host of one device with itself)
                p.add(x[j].reshape(-1)[hh][:, None], 1.0, 0.0, 0.0)
            live = np.flatnonzero(finite.reshape(-1) & (cost.reshape(-1) > 0))
            if len(live):
                p.add(np.stack([np.full(len(live), col), v[j].reshape(-1)[live]], axis=1),
                      np.stack([np.ones(len(live)), -cost.reshape(-1)[live]], axis=1), 0.0, np.inf)
        # a lane that leaves its host pays at least the cheapest transfer between two hosts:
        # ``inside`` = 1 only when every lane stays in its host (tighter than ``v`` alone)
        crossing = float(np.where(np.eye(n_hosts, dtype=bool), np.inf, fwd).min())
        if 0 < crossing < np.inf:
            inside = int(p.columns((1,), 0, 1, True)[0])
            p.add([[*np.diagonal(x[j]), inside]], [[*np.ones(n_hosts), -float(r)]], 0.0, np.inf)
            p.add([[cf[j], inside], [cb[j], inside]], [[1.0, crossing], [1.0, crossing]], crossing, np.inf)
    if r > 1:
        ring_in = _intra_ring_Bps(bw, hid, n_hosts, r)
        between = -_block_min(-bw, hid, n_hosts)  # widest channel between two hosts, either way
        between = np.maximum(between, between.T)
        hop_bw = between.copy()  # a ring hop's bandwidth for the lanes' settling: inside a host,
        inner = np.diagonal(between).copy()  # its ring bottleneck (its widest pair if under R devices)
        np.fill_diagonal(hop_bw, np.where(ring_in > 0, ring_in, inner))
        np.fill_diagonal(between, 0.0)
        alone_in = np.flatnonzero(ring_in > 0)  # hosts that can hold a whole ring
        widest = float(between.max())
        holds: list[list[int]] = [[] for _ in range(n_hosts)]
        # each host's other hosts, widest channel first: the first used one is its widest used neighbour
        neighbours = [[int(o) for o in sorted(hosts[hosts != h], key=lambda o: -between[h, o])] for h in range(n_hosts)]
        for s in range(s_):
            param = float(model.param_bytes[s])
            if param <= 0:
                continue
            if widest > 0:
                # ``one[h]`` = 1: the whole ring in host h (R of its devices); a ring over several
                # hosts has a hop between two of them, at most the widest such channel
                one = p.columns((len(alone_in),), 0, 1, True)
                spread = float(ring_s(r, param, widest, lat_min))
                gain = [spread - float(ring_s(r, param, ring_in[h], lat_min)) for h in alone_in]
                p.add([[ar[s], *one]], [[1.0, *gain]], spread, np.inf)
                if len(alone_in):
                    p.add([one], 1.0, -np.inf, 1.0)
                    p.add(np.stack([z[s, alone_in], one], axis=1), [1.0, -float(r)], 0.0, np.inf)
                for h, col in zip(alone_in.tolist(), one.tolist(), strict=True):
                    holds[h].append(col)
            for h, others in enumerate(neighbours):
                for pos, o in enumerate(others):  # o the widest used neighbour of h
                    if between[h, o] <= 0 or between[h, o] >= widest:
                        continue  # no channel, or no more than the spread row above asks
                    hop = float(ring_s(r, param, between[h, o], lat_min))
                    better = w[s, others[:pos]]
                    p.add([[ar[s], w[s, h], w[s, o], *better]], [[1.0, -hop, -hop, *([hop] * pos)]], -hop, np.inf)
        for h in alone_in.tolist():  # host h holds at most |h| // R whole rings
            if holds[h]:
                p.add([holds[h]], 1.0, -np.inf, float(size[h] // r))
    for j, (a, c) in enumerate(zip(src, dst, strict=True)):
        p.add([[e_t[c], e_t[a], cf[j]]], [[1.0, -1.0, -1.0]], f[a], np.inf)
        p.add([[g_t[c], e_t[a], cf[j]]], [[1.0, -1.0, -float(k[c])]], f[a] + f[c], np.inf)
        p.add([[g_t[a], g_t[c], cb[j]]], [[1.0, -1.0, -1.0]], b[c], np.inf)
        p.add([[l_t[c], e_t[a], cf[j]]], [[1.0, -1.0, -float(mb)]], f[a] + f[c] + b[c], np.inf)
        p.add([[l_t[a], l_t[c], cb[j]]], [[1.0, -1.0, -1.0]], b[a], np.inf)
        p.add([[l_t[a], g_t[c], cb[j]]], [[1.0, -1.0, -float(mb)]], b[c] + b[a], np.inf)
    for s in range(s_):
        p.add([[g_t[s], e_t[s]]], [[1.0, -1.0]], k[s] * f[s], np.inf)
        p.add([[l_t[s], e_t[s]]], [[1.0, -1.0]], mb * (f[s] + b[s]), np.inf)
        p.add([[l_t[s], g_t[s]]], [[1.0, -1.0]], mb * b[s] + (mb - k[s]) * f[s], np.inf)
        p.add([[end, l_t[s], ar[s]]], [[1.0, -1.0, -1.0]], 0.0, np.inf)
    if p.nonzeros > MAX_NONZEROS:
        return None
    # the host layout's own costs (settle_lanes): lanes at the hosts' cheapest transfer, ring hops
    # at the widest channel between the hosts (inside one: its ring bottleneck)
    host_costs = PipelineCosts(lane_fwd, hop_bw if r > 1 else np.zeros((n_hosts, n_hosts)),
                               np.full((n_hosts, n_hosts), lat_min))
    return HostRelaxationRun(model, BackgroundSolve(p, end, time_limit_s - (time.monotonic() - started)), z,
                             host_costs, hid, started)


def host_lanes(model: PipelineModel, counts: IntArray, lane_cost: list[FloatArray]) -> IntArray:
    """A host per replica (``S x R``) from the relaxation's counts ``[s, h]``: stages in pipeline
    order (stage edges go forward), a stage without senders in host order, every other one by
    an assignment of its lanes to its hosts' slots that first minimises the costliest lane
    (``lane_cost[e][h, h']``: the dearer direction of edge ``e``'s transfer between the hosts,
    the largest over the stage's senders) and then the sum; lanes are then ordered zigzag by the
    host of the stage with the most parameters (up through every other lane, back through the
    rest), so that its ring hops between neighbouring hosts."""
    s_, r = model.n_stages, model.replicas
    into: list[list[int]] = [[] for _ in range(s_)]
    for j, c in enumerate(model.dst.tolist()):
        into[c].append(j)
    host_of = np.zeros((s_, r), dtype=np.int64)
    for s in range(s_):
        slots = np.repeat(np.arange(counts.shape[1]), counts[s])
        if not into[s]:
            host_of[s] = slots
            continue
        cost = np.zeros((r, r))
        for j in into[s]:
            cost = np.maximum(cost, lane_cost[j][host_of[int(model.src[j])]][:, slots])
        values = np.unique(cost)
        lo, hi = 0, len(values) - 1  # the least bottleneck an assignment of lanes to slots can have
        while lo < hi:
            mid = (lo + hi) // 2
            rows, cols = linear_sum_assignment(cost > values[mid])
            if (cost[rows, cols] > values[mid]).any():
                lo = mid + 1
            else:
                hi = mid
        scale = float(cost.sum()) + 1.0
        rows, cols = linear_sum_assignment(cost + scale * (cost > values[lo]))
        host_of[s, rows] = slots[cols]
    by_host = np.argsort(host_of[int(np.argmax(model.param_bytes))], kind="stable")
    zigzag = np.concatenate([by_host[0::2], by_host[1::2][::-1]])
    return np.asarray(host_of[:, zigzag], dtype=np.int64)


def _host_objective(model: PipelineModel, host_of: IntArray, host_costs: PipelineCosts) -> tuple[float, float]:
    """The combined objective of a host layout at the hosts' own costs, and the sum of its terms
    (a tie-break)."""
    cf, cb, ar = edge_costs(model, host_costs, host_of)
    return float(iteration_bound_s(model, cf, cb, ar)), sum(cf) + sum(cb) + sum(ar)


def settle_lanes(model: PipelineModel, host_of: IntArray, host_costs: PipelineCosts, deadline: float) -> IntArray:
    """Swaps of two lanes' hosts, in one stage or in a stage and every stage after it on the
    stage graph (which keeps the lanes' pairing downstream), kept while the layout's host
    objective (:func:`_host_objective`) falls (then its sum of terms), until none does or the
    deadline: the relaxation's flows may disagree over a DAG's edges, its layout's lanes must not."""
    s_ = model.n_stages
    after = [{s} for s in range(s_)]
    for s in reversed(range(s_)):
        for a, c in zip(model.src.tolist(), model.dst.tolist(), strict=True):
            if a == s:
                after[s] |= after[c]
    groups = [np.array([s]) for s in range(s_)] + [np.array(sorted(g)) for g in after if len(g) > 1]
    place = host_of.copy()
    best = _host_objective(model, place, host_costs)
    better = True
    while better and time.monotonic() < deadline:
        better = False
        for rows in groups:
            head = place[rows[0]]
            for i in range(model.replicas):
                for k in (np.flatnonzero(head[i + 1:] != head[i]) + i + 1).tolist():
                    pair, swapped = np.ix_(rows, np.array([i, k])), np.ix_(rows, np.array([k, i]))
                    place[pair] = place[swapped]
                    value = _host_objective(model, place, host_costs)
                    if value < best:
                        best, better = value, True
                    else:
                        place[pair] = place[swapped]
                if time.monotonic() > deadline:
                    return place
    return place
