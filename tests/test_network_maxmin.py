"""Max-min fairness: textbook cases, the max-min condition on random instances, and the
flow-level simulation (rates recomputed as flows start and end, bytes conserved)."""

from __future__ import annotations

import numpy as np
import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from tracesim.network.flows import FlowNetwork
from tracesim.network.maxmin import max_min_rates, max_min_sorted


def reference_progressive_filling(routes, capacity):
    """Textbook sequential progressive filling (one bottleneck level per round)."""
    cap = np.array(capacity, dtype=float)
    rate = np.zeros(len(routes))
    active = [i for i, r in enumerate(routes) if r]
    for i, r in enumerate(routes):
        if not r:
            rate[i] = np.inf
    while active:
        users = {}
        for i in active:
            for lk in routes[i]:
                users.setdefault(lk, []).append(i)
        share = {lk: cap[lk] / len(fs) for lk, fs in users.items()}
        m = min(share.values())
        frozen = set()
        for lk, s in share.items():
            if s <= m * (1 + 1e-12):
                frozen.update(users[lk])
        for i in frozen:  # all unfrozen flows sit at the common level m; these stop there
            rate[i] = m
        for i in frozen:
            for lk in routes[i]:
                cap[lk] -= m
        active = [i for i in active if i not in frozen]
    return rate


# ---------------------------------------------------------------- textbook cases


def test_single_bottleneck_equal_shares():
    rates = max_min_rates([[0], [0], [0]], np.array([9.0]))
    np.testing.assert_allclose(rates, [3, 3, 3])


def test_parking_lot():
    # one long flow over three unit links, one short flow per link: everyone gets 1/2
    rates = max_min_rates([[0, 1, 2], [0], [1], [2]], np.array([1.0, 1.0, 1.0]))
    np.testing.assert_allclose(rates, [0.5, 0.5, 0.5, 0.5])


def test_parking_lot_uneven():
    # link 0 shared by the long flow and two short flows: long flow gets 1/3 there;
    # link 1's short flow takes the rest: 1 - 1/3 = 2/3
    rates = max_min_rates([[0, 1], [0], [0], [1]], np.array([1.0, 1.0]))
    np.testing.assert_allclose(rates, [1 / 3, 1 / 3, 1 / 3, 2 / 3])


def test_two_bottlenecks():
    # link 0 (cap 1): A, B; link 1 (cap 10): B, C -> A = B = 0.5, C = 9.5
    rates = max_min_rates([[0], [0, 1], [1]], np.array([1.0, 10.0]))
    np.testing.assert_allclose(rates, [0.5, 0.5, 9.5])


def test_bertsekas_gallager_example():
    # Data Networks, max-min example: links (cap) a:1, b:1, c:1; flows
    # f0 over a,b ; f1 over a ; f2 over b,c ; f3 over c ; f4 over c
    # c: three flows -> 1/3 each (f2, f3, f4); then b: f0 gets 1 - 1/3 = 2/3, but a limits
    # f0, f1 to 1/2 -> f0 = f1 = 1/2
    rates = max_min_rates([[0, 1], [0], [1, 2], [2], [2]], np.array([1.0, 1.0, 1.0]))
    np.testing.assert_allclose(rates, [0.5, 0.5, 1 / 3, 1 / 3, 1 / 3])


def test_flows_on_links_of_their_own_run_at_their_slowest_link():
    """No link shared: each flow's rate is its slowest link's capacity, to the bit (the
    shortcut of max_min_sorted), and one shared link takes the rounds again."""
    caps = np.array([3.0, 7.0, 0.1 + 0.2, 5.0, 2.0])
    rates = max_min_sorted(np.array([0, 0, 1, 2, 2]), np.array([0, 1, 2, 3, 4]), caps)
    assert rates.tolist() == [3.0, 0.1 + 0.2, 2.0]
    shared = max_min_sorted(np.array([0, 0, 1, 2, 2]), np.array([0, 1, 2, 3, 1]), caps)
    np.testing.assert_allclose(shared, [3.0, 0.3, 4.0])


def test_empty_route_is_unlimited():
    rates = max_min_rates([[], [0]], np.array([2.0]))
    assert rates[0] == np.inf and rates[1] == 2.0


# ---------------------------------------------------------------- properties


@st.composite
def instances(draw):
    n_links = draw(st.integers(1, 12))
    caps = draw(st.lists(st.floats(0.5, 100.0), min_size=n_links, max_size=n_links))
    n_flows = draw(st.integers(1, 25))
    routes = [
        sorted(draw(st.sets(st.integers(0, n_links - 1), min_size=1, max_size=min(4, n_links))))
        for _ in range(n_flows)
    ]
    return routes, np.array(caps)


@settings(max_examples=150, deadline=None)
@given(instances())
def test_max_min_condition(inst):
    routes, caps = inst
    rates = max_min_rates(routes, caps)
    load = np.zeros(len(caps))
    for r, x in zip(routes, rates, strict=True):
        load[r] += x
    # no link over capacity
    assert np.all(load <= caps * (1 + 1e-9) + 1e-12)
    # every flow has a saturated link on which its rate is the largest
    for i, r in enumerate(routes):
        ok = False
        for lk in r:
            saturated = load[lk] >= caps[lk] * (1 - 1e-9)
            largest = all(rates[j] <= rates[i] * (1 + 1e-9) for j, rr in enumerate(routes) if lk in rr)
            ok |= saturated and largest
        assert ok, f"flow {i} has no bottleneck link"
    # same allocation as the textbook algorithm
    np.testing.assert_allclose(rates, reference_progressive_filling(routes, caps), rtol=1e-9)


# ---------------------------------------------------------------- flow simulation


def reference_fluid(caps, flows):
    """Event-driven fluid simulation in float time, global max-min at every event."""
    t = 0.0
    rem = {i: b for i, (_, _, b) in enumerate(flows)}
    started: set[int] = set()
    ends = {}
    pending = sorted(range(len(flows)), key=lambda i: (flows[i][0], i))
    while len(ends) < len(flows):
        for i in list(pending):
            if flows[i][0] <= t + 1e-12:
                started.add(i)
                pending.remove(i)
        active = [i for i in sorted(started) if i not in ends]
        for i in active:
            if rem[i] <= 1e-9:
                ends[i] = t
        active = [i for i in active if i not in ends]
        rates = reference_progressive_filling([flows[i][1] for i in active], caps) if active else []
        dt = min([rem[i] / r for i, r in zip(active, rates, strict=True)] or [np.inf])
        if pending:
            dt = min(dt, flows[pending[0]][0] - t)
        if dt == np.inf:
            break
        for i, r in zip(active, rates, strict=True):
            rem[i] -= r * dt
        t += dt
    return ends



def _run(capacity, flows, compact_min=4096):
    """flows: (start_ns, route, nbytes); returns (network, end time per flow)."""
    env = simpy.Environment()
    net = FlowNetwork(np.asarray(capacity, dtype=float), record=True, compact_min=compact_min)
    net.attach(env)
    ends = {}

    def starter(i, t0, route, nbytes):
        yield env.timeout(t0)
        ev = net.start(np.array([0, len(route)]), np.array(route, dtype=np.int64), np.array([nbytes]))
        yield ev
        ends[i] = env.now

    for i, (t0, route, nbytes) in enumerate(flows):
        env.process(starter(i, t0, route, nbytes))
    env.run()
    return net, ends


def test_rates_recomputed_when_a_flow_ends():
    # A (100 B) and B (300 B) share a 1 B/ns link: both at 0.5 until A ends at t=200;
    # then B alone at 1 B/ns for its last 200 B: ends at 400.
    _, ends = _run([1.0], [(0, [0], 100.0), (0, [0], 300.0)])
    assert ends == {0: 200, 1: 400}


def test_rates_recomputed_when_a_flow_starts():
    # A (1000 B) alone at 2 B/ns for 100 ns (200 B); B (400 B) joins at 100: both 1 B/ns;
    # B ends at 500 (A has 800 - 400 = 400 left), A alone again at 2: ends at 700.
    _, ends = _run([2.0], [(0, [0], 1000.0), (100, [0], 400.0)])
    assert ends == {0: 700, 1: 500}


def test_batch_event_fires_when_last_flow_done():
    env = simpy.Environment()
    net = FlowNetwork(np.array([1.0, 4.0]))
    net.attach(env)
    ev = net.start(np.array([0, 1, 2]), np.array([0, 1]), np.array([10.0, 10.0]))
    env.run(until=ev)
    assert env.now == 10  # slow flow: 10 B at 1 B/ns
    np.testing.assert_allclose(net.link_bytes, [10.0, 10.0])


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.floats(1.0, 50.0), min_size=2, max_size=8),
    st.lists(
        st.tuples(st.integers(0, 500), st.lists(st.integers(0, 7), min_size=1, max_size=3, unique=True),
                  st.floats(0.0, 5000.0)),
        min_size=1, max_size=30,
    ),
)
@pytest.mark.parametrize("compact_min", [1, 4096])
def test_bytes_conserved_and_every_flow_finishes(compact_min, caps, flows):
    n = len(caps)
    flows = [(t0, sorted({lk % n for lk in route}), b) for t0, route, b in flows]
    net, ends = _run(caps, flows, compact_min)
    assert len(ends) == len(flows)
    assert len(net.records) == len(flows)
    for rec in net.records:  # integrated rate x time == bytes, up to half a ns of rate
        assert rec.nbytes - 0.5 * max(caps) - 1e-6 <= rec.delivered <= rec.nbytes * (1 + 1e-9) + 1e-9
    # completion times agree with a float-time fluid simulation recomputing globally
    ref = reference_fluid(caps, flows)
    for i in range(len(flows)):
        assert abs(ends[i] - ref[i]) <= 2 * len(flows) + 2, (i, ends[i], ref[i])
    # a flow cannot beat its best-case time alone on its route
    for i, (t0, route, b) in enumerate(flows):
        assert ends[i] - t0 >= np.floor(b / min(caps[lk] for lk in route)) - 1
    total = sum(b * len(route) for _, route, b in flows)
    assert net.link_bytes.sum() == pytest.approx(total, rel=1e-9)


def _run_batches(capacity, batches, skip):
    """batches: (start_ns, [(route, nbytes), ...]); the network, each batch's end and the
    flow records, with the unchanged-rates skip on or off."""
    env = simpy.Environment()
    net = FlowNetwork(np.asarray(capacity, dtype=float), record=True)
    net.skip_unchanged = skip
    net.attach(env)
    ends = {}

    def starter(i, t0, flows):
        yield env.timeout(t0)
        ptr = np.cumsum([0] + [len(r) for r, _ in flows])
        links = np.array([lk for r, _ in flows for lk in r], dtype=np.int64)
        yield net.start(ptr, links, np.array([b for _, b in flows]))
        ends[i] = env.now

    for i, (t0, flows) in enumerate(batches):
        env.process(starter(i, t0, flows))
    env.run()
    recs = sorted((r.flow_id, r.end_ns, r.delivered) for r in net.records)
    return net, ends, recs


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.floats(1.0, 50.0), min_size=2, max_size=10),
    st.lists(st.tuples(st.integers(0, 400), st.lists(st.tuples(
        st.lists(st.integers(0, 9), min_size=1, max_size=3, unique=True), st.floats(1.0, 4000.0)),
        min_size=1, max_size=4)), min_size=1, max_size=12),
)
def test_skipping_unchanged_solves_changes_nothing(caps, batches):
    """An instant where only flows alone on their links end takes no solve; every end time
    and delivered byte is the same as with a solve at every instant."""
    n = len(caps)
    batches = [(t0, [(sorted({lk % n for lk in r}), b) for r, b in flows]) for t0, flows in batches]
    fast, ends_a, recs_a = _run_batches(caps, batches, True)
    slow, ends_b, recs_b = _run_batches(caps, batches, False)
    assert ends_a == ends_b
    assert recs_a == recs_b
    assert fast.recomputes <= slow.recomputes


def _run_reused(capacity, routes, starts, skip):
    """Batches of a few route arrays started again and again (memo on, no record: isolated
    rates reused, lazy batches and recorded runs that get slots when another batch comes,
    busy() probes releasing them): each start's end time."""
    env = simpy.Environment()
    net = FlowNetwork(np.asarray(capacity, dtype=float))
    net.skip_unchanged = skip
    net.attach(env)
    arrays = [(np.cumsum([0] + [len(r) for r, _ in flows]),
               np.array([lk for r, _ in flows for lk in r], dtype=np.int64),
               np.array([b for _, b in flows])) for flows in routes]
    ends = {}

    def starter(i, t0, r, probe):
        yield env.timeout(t0)
        if probe:
            ends[("busy", i)] = net.busy(arrays[r][1])
        yield net.start(*arrays[r])
        ends[i] = env.now

    for i, (t0, r, probe) in enumerate(starts):
        env.process(starter(i, t0, r % len(arrays), probe))
    env.run()
    assert not net.link_flows.any()
    return net, ends


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.floats(1.0, 50.0), min_size=2, max_size=8),
    st.lists(st.lists(st.tuples(st.lists(st.integers(0, 7), min_size=1, max_size=3, unique=True),
                                st.sampled_from([100.0, 1000.0, 2500.0, 4000.0])),
                      min_size=1, max_size=4), min_size=1, max_size=4),
    st.lists(st.tuples(st.integers(0, 3000), st.integers(0, 3), st.booleans()),
             min_size=1, max_size=16),
)
def test_skipping_unchanged_solves_with_reused_routes(caps, routes, starts):
    """As above with the paths a replay takes: the same route arrays again (isolated rates,
    lazy batches, recorded runs), memo on, busy() probes."""
    n = len(caps)
    routes = [[(sorted({lk % n for lk in r}), b) for r, b in flows] for flows in routes]
    _, ends_a = _run_reused(caps, routes, starts, True)
    _, ends_b = _run_reused(caps, routes, starts, False)
    assert ends_a == ends_b


def test_flows_ending_alone_take_no_solve():
    # one batch: a flow on link 0 (ends at 10) and one on links 1 and 2 (ends at 100); a
    # second batch on link 2 keeps the component together. The first flow ends alone on
    # link 0: nothing to re-solve.
    batches = [(0, [([0], 10.0), ([1, 2], 200.0)]), (0, [([2], 1000.0)])]
    fast, ends_a, _ = _run_batches([1.0, 4.0, 4.0], batches, True)
    slow, ends_b, _ = _run_batches([1.0, 4.0, 4.0], batches, False)
    assert ends_a == ends_b == {0: 100, 1: 300}
    assert fast.recomputes == slow.recomputes - 1


def test_distinct_gids_of_shared_links() -> None:
    """``owners._distinct``: the distinct values in ascending order, whether few (taken one
    by one) or many (the rest hashed)."""
    from tracesim.network.owners import _FEW, _distinct

    rng = np.random.default_rng(3)
    for k in (1, 2, 3, _FEW, _FEW + 1, 40):
        x = rng.integers(0, k * 7, 5000)
        assert _distinct(x) == np.unique(x).tolist()
    assert _distinct(np.zeros(0, dtype=np.int64)) == []


def test_batch_leaves_the_links_its_ended_flows_crossed():
    """A batch whose flow on link 0 has ended no longer holds link 0: a batch that comes
    there later finds it free (its own component, a lone batch's known run) and ends as it
    would alone; the first batch still holds link 1 until its last flow ends."""
    env = simpy.Environment()
    net = FlowNetwork(np.array([1.0, 1.0]))
    net.attach(env)
    first = net.start(np.array([0, 1, 2]), np.array([0, 1]), np.array([10.0, 100.0]))
    ends: dict[str, int] = {}
    first.callbacks.append(lambda _e: ends.__setitem__("first", int(env.now)))

    def later():  # noqa: ANN202
        yield env.timeout(20)
        assert net.idle(np.array([0])) and not net.idle(np.array([1]))
        yield net.start(np.array([0, 1]), np.array([0]), np.array([30.0]))
        ends["second"] = int(env.now)

    env.process(later())
    env.run()
    assert ends == {"first": 100, "second": 50}
    np.testing.assert_allclose(net.link_bytes, [40.0, 100.0])
    assert net.idle(np.array([0, 1]))
