"""The integration tests' Ray cluster is as closed as the library's own local one: every
socket its processes (GCS, raylet, agents, workers) listen on is on loopback, no metrics are
exported, and the learner's and the weight group's stores are given a loopback address."""

import os

import psutil
import pytest
import ray

from rti_actors.weight_sync import free_address

pytestmark = pytest.mark.integration

LOOPBACK = ("127.0.0.1", "::1", "::ffff:127.0.0.1")


@ray.remote(num_cpus=0)
class _Probe:
    def pid(self) -> int:
        return os.getpid()


def _listening() -> dict[tuple[str, int], str]:
    """{(process name, port): address} of every listening socket of this process and its
    descendants (Ray's head processes and workers are among them)."""
    out = {}
    for p in [psutil.Process(), *psutil.Process().children(recursive=True)]:
        try:
            name, conns = p.name(), p.net_connections(kind="inet")
        except psutil.Error:  # a worker that just exited
            continue
        for c in conns:
            if c.status == psutil.CONN_LISTEN:
                out[(name, c.laddr.port)] = c.laddr.ip
    return out


def test_the_test_cluster_listens_on_loopback_only(ray_cluster):
    probe = _Probe.remote()
    try:
        worker = psutil.Process(ray.get(probe.pid.remote()))
        listening = _listening()
        assert ray.util.get_node_ip_address() == "127.0.0.1"
        assert any(port in {c.laddr.port for c in worker.net_connections(kind="inet")}
                   for _, port in listening)  # a worker's server is among those checked
        assert {k: ip for k, ip in listening.items() if ip not in LOOPBACK} == {}
        # no Prometheus endpoint at all (with metrics on, the node names the port it serves)
        assert ray._private.worker.global_worker.node.metrics_export_port <= 0
    finally:
        ray.kill(probe)


def test_the_process_group_stores_get_a_loopback_address(ray_cluster):
    # what LearnerGroup asks a rank's node for: its master_addr, where rank 0's store listens
    host, port = ray.get(ray.remote(free_address).options(num_cpus=0).remote())
    assert host == "127.0.0.1" and port > 0
