"""SymmetricComm's copies: which groups and transfers mirror a representative's, that they
load the network, and that leaving out the copies that cannot reach it changes nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
import simpy
import yaml

from tracesim.build.builder import build_graph
from tracesim.catalog import load_cluster, load_model, models_dir
from tracesim.engine.replay import replay
from tracesim.engine.symmetry import SymmetricComm
from tracesim.network.model import NetworkModel
from tracesim.specs.model import model_from_dict
from tracesim.specs.parallel import ParallelSpec
from tracesim.template.choose import choose_template
from tracesim.template.durations import make_op_time


def _built(model, par: ParallelSpec, cluster):
    from tracesim.hardware.device import get_device

    tpl, _ = choose_template(None, model, "analytic")
    op_time, _ = make_op_time(tpl, get_device(cluster.device), par.dtype)
    return build_graph(model, par, tpl, op_time, representatives=True, merge_compute=True).graph


def test_copies_of_groups_and_transfers() -> None:
    cluster = load_cluster("h100x8")
    par = ParallelSpec(tp=2, pp=2, dp=2, global_batch=4, seq_len=512)
    g = _built(load_model("gpt3-1.7b"), par, cluster)
    sc = SymmetricComm(NetworkModel(cluster), g)
    assert sc.placement is not None
    # rank = t + 2 d + 4 p; representatives 0 (stage 0) and 4 (stage 1)
    assert sc.group_images(0, (0, 1)) == ((0, 1), (2, 3))  # TP groups of stage 0
    assert sc.group_images(4, (4, 6)) == ((4, 6), (5, 7))  # DP groups of stage 1
    assert sc.group_images(0, (0, 4)) == ((0, 4), (1, 5), (2, 6), (3, 7))  # tied embeddings
    assert sorted(sc.pair_images(0, 4)) == [(0, 4), (1, 5), (2, 6), (3, 7)]  # pipeline sends
    assert sc.pair_images(0, 4)[0] == (0, 4)
    # the estimate model has no flows to load: no copies
    assert SymmetricComm(object(), g).placement is None  # type: ignore[arg-type]


def _s4_small(tmp: Path):
    spec = yaml.safe_load((models_dir() / "gpt3-175b.yaml").read_text())
    spec.update(name="gpt3-175b-16l", layers=16)
    model = model_from_dict(spec, tmp / "m.yaml")
    cluster = load_cluster("a100-selene")
    par = ParallelSpec(tp=8, pp=16, dp=8, global_batch=64, micro_batch=1, seq_len=2048)
    return _built(model, par, cluster), cluster


class _AllCopies(SymmetricComm):
    def _prune(self, graph) -> None:  # keep every copy
        pass


def _run(comm, g) -> int:
    return replay(g, comm).makespan_ns


def test_left_out_copies_change_nothing_and_copies_load_links(tmp_path: Path) -> None:
    g, cluster = _s4_small(tmp_path)
    pruned = SymmetricComm(NetworkModel(cluster), g)
    kept, total = pruned.copies
    assert 0 < kept < total
    t_pruned = _run(pruned, g)
    assert t_pruned == _run(_AllCopies(NetworkModel(cluster), g), g)
    # without copies, the 64 tied-embedding all-reduces over the spine do not collide
    alone = _run(SymmetricComm(NetworkModel(cluster), g, images=False), g)
    assert alone < t_pruned


def test_images_api_runs_every_copy() -> None:
    cluster = load_cluster("h100x8")
    env = simpy.Environment()
    net = NetworkModel(cluster)
    net.attach(env)
    groups = ((0, 1), (2, 3), (4, 5), (6, 7))
    ev = net.collective_images("all_reduce", groups, 64 << 20)
    env.run(until=ev)
    t_all = env.now
    env2 = simpy.Environment()
    net2 = NetworkModel(cluster)
    net2.attach(env2)
    env2.run(until=net2.collective("all_reduce", (0, 1), 64 << 20))
    # disjoint NVSwitch ports: the copies do not slow each other down
    assert t_all == env2.now
    assert net.flows.active_flows == 0
    pairs = ((0, 1), (2, 1))  # both into GPU 1: its port is shared, twice the time
    env3 = simpy.Environment()
    net3 = NetworkModel(cluster)
    net3.attach(env3)
    env3.run(until=net3.p2p_images(pairs, 1 << 30))
    env4 = simpy.Environment()
    net4 = NetworkModel(cluster)
    net4.attach(env4)
    env4.run(until=net4.p2p(0, 1, 1 << 30))
    # 1 GiB takes milliseconds, the latency a microsecond: sharing the port doubles the time
    assert env3.now == pytest.approx(2 * env4.now, rel=0.01)


def test_pruning_follows_the_algorithm_the_tasks_ask_for(tmp_path: Path) -> None:
    # with userbuffers the tensor-parallel tasks ask for them: the pruning follows their
    # links (not the ring the model would choose), and still changes no time
    spec = yaml.safe_load((models_dir() / "gpt3-175b.yaml").read_text())
    spec.update(name="gpt3-175b-4l", layers=4)
    model = model_from_dict(spec, tmp_path / "m.yaml")
    cluster = load_cluster("h100x128")
    par = ParallelSpec(tp=4, pp=2, dp=16, global_batch=32, micro_batch=1, seq_len=2048,
                       sp=True, tp_comm_overlap=True)
    g = _built(model, par, cluster)
    pruned = SymmetricComm(NetworkModel(cluster), g)
    asked = set(pruned._asked.values())
    assert "userbuffers" in asked
    assert _run(pruned, g) == _run(_AllCopies(NetworkModel(cluster), g), g)
