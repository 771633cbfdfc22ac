"""The Ray node program (`ascendfactory/programs/ray_node.py`) and the `Ray` launch that calls it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from ascendfactory.plan import RAY_NODE_PROGRAM, Ray
from ascendfactory.programs import ray_node


def test_head_and_worker_commands_round_trip_through_the_programs_parser():
    common = dict(
        python="py",
        driver=("py", "drv.py", "--x"),
        nnodes=2,
        head_address="10.0.0.1",
        port=6379,
        resources=(("CPU", 4.0), ("NPU", 16.0)),
        node_resources=(("CPU", 2.0), ("NPU", 8.0)),
        job_id="exp",
    )
    head = Ray(node_rank=0, **common).command(timeout_s=60)
    assert head[:3] == ["py", RAY_NODE_PROGRAM, "head"]
    args = ray_node.parse(head[2:])
    assert (args.role, args.port, args.node_ip, args.nodes, args.timeout) == (
        "head",
        6379,
        "10.0.0.1",
        2,
        60.0,
    )
    assert json.loads(args.need) == {"CPU": 4.0, "NPU": 16.0}
    assert args.driver == ["py", "drv.py", "--x"]

    worker = ray_node.parse(Ray(node_rank=1, **common).command(timeout_s=60)[2:])
    assert (worker.role, worker.address, worker.job_id, worker.driver) == (
        "worker",
        "10.0.0.1:6379",
        "exp",
        [],
    )
    assert json.loads(worker.resources) == {"CPU": 2.0, "NPU": 8.0}


def test_head_without_a_driver_is_a_usage_error():
    with pytest.raises(SystemExit):
        ray_node.parse(["head", "--port", "1", "--nodes", "1", "--timeout", "1", "--job-id", "x"])


def test_resource_flags_use_ray_starts_own_flags_for_cpu_and_gpu():
    flags = ray_node.resource_flags({"CPU": 8, "GPU": 1, "NPU": 8})
    assert flags == ["--num-cpus", "8", "--num-gpus", "1", "--resources", '{"NPU": 8}']
    assert ray_node.resource_flags({}) == []


def test_missing_sums_what_the_alive_nodes_offer():
    nodes = [
        SimpleNamespace(resources_total={"CPU": 2.0, "NPU": 8.0}),
        SimpleNamespace(resources_total={"CPU": 2.0}),
    ]
    assert ray_node.missing({"CPU": 4, "NPU": 16}, nodes) == {"NPU": 16}
    assert ray_node.missing({"CPU": 4}, nodes) == {}


def test_descendants_finds_grandchildren_in_other_sessions():
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys, time;"
            "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'],"
            " start_new_session=True); time.sleep(30)",
        ]
    )
    try:
        deadline = time.monotonic() + 10
        while len(ray_node.descendants(os.getpid())) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        found = ray_node.descendants(os.getpid())
        assert child.pid in found and len(found) >= 2
    finally:
        for pid in ray_node.descendants(os.getpid()):
            os.kill(pid, 9)
        child.wait()


def test_a_worker_whose_head_never_answers_says_what_to_check():
    args = ray_node.parse(["worker", "--address", "127.0.0.1:9", "--timeout", "1", "--job-id", "x"])
    with pytest.raises(ray_node.NodeError, match="the head at 127.0.0.1:9 did not answer within 1 s") as e:
        ray_node.run_worker(args)
    assert "start NODE_RANK=0 first" in str(e.value)


def test_the_program_exits_with_the_cluster_code_and_one_line():
    proc = subprocess.run(
        [
            sys.executable,
            RAY_NODE_PROGRAM,
            "worker",
            "--address",
            "127.0.0.1:9",
            "--timeout",
            "1",
            "--job-id",
            "x",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == ray_node.EXIT_CLUSTER
    assert proc.stdout.startswith("[ray-node] error: the head at 127.0.0.1:9 did not answer")
    assert proc.stderr == ""


def test_host_names_become_addresses_before_ray_sees_them():
    """ModelArts gives domain names (VC_WORKER_HOSTS); `ray start --node-ip-address` takes an IP."""
    from ascendfactory.programs import ray_node

    args = ray_node.parse(
        [
            "head",
            "--port",
            "6379",
            "--node-ip",
            "localhost",
            "--nodes",
            "1",
            "--timeout",
            "5",
            "--job-id",
            "x",
            "--",
            "true",
        ]
    )
    ray_node.resolve_addresses(args)
    assert args.node_ip == "127.0.0.1"
    args = ray_node.parse(["worker", "--address", "localhost:6379", "--timeout", "5", "--job-id", "x"])
    ray_node.resolve_addresses(args)
    assert args.address == "127.0.0.1:6379"
    with pytest.raises(ray_node.NodeError, match="cannot resolve 'no-such-host.invalid'"):
        ray_node.as_ip("no-such-host.invalid")
