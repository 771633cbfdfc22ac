"""One node of a Ray job, run by the `Ray` launch of a plan (see `ascendfactory.plan.Ray`).

    ray_node.py head   --port P --node-ip A --nodes N [--need JSON] [--resources JSON]
                       --timeout T --job-id ID -- DRIVER...
    ray_node.py worker --address A:P [--node-ip IP] [--resources JSON] --timeout T --job-id ID

The head starts `ray start --head --block` as its child, waits until `N` nodes are alive and the cluster
offers what `--need` asks for, runs the driver with RAY_ADDRESS set, and publishes the driver's result in
the cluster's key-value store. A worker waits for the head, joins with `ray start --address --block`, and
leaves when the head publishes a result, or when it loses the head.

Either side stops only the Ray processes it started (never `ray stop`, which would stop every Ray node of
the machine): the node program makes itself a child subreaper, so every process its `ray start` spawns,
whatever session it moves to, stays its descendant and is stopped on exit.

Runs in the framework's environment, so it imports nothing from ascendfactory: standard library and ray.
Exit codes: the driver's own on the head; on a worker 0 when the driver succeeded, 1 when it failed;
3 when the cluster could not form or lost a node; 130/143 on SIGINT/SIGTERM.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

NAMESPACE = b"ascendfactory"
POLL_S = 1.0
RESULT_LINGER_S = 3 * POLL_S  # the head keeps the cluster up this long after publishing the result
HEAD_LOST_AFTER_S = 20.0  # a worker that cannot reach the head for this long leaves
EXIT_CLUSTER = 3
PR_SET_CHILD_SUBREAPER = 36


class NodeError(Exception):
    """The cluster could not form, or lost a node: the message says which and what to check."""


class Stopped(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.code = 128 + signum


def say(message: str) -> None:
    print(f"[ray-node] {message}", flush=True)


def become_subreaper() -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: stopping falls back to the process group
        pass


def descendants(root: int) -> list[int]:
    """Every live descendant of `root`, read from /proc (children before their parents' siblings)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        for pid in children.get(todo.pop(), []):
            found.append(pid)
            todo.append(pid)
    return found


def stop_all(grace_s: float = 10.0) -> None:
    """SIGTERM every descendant of this program, then SIGKILL what is left after `grace_s`."""
    me = os.getpid()
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 2.0)):
        pids = descendants(me)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and descendants(me):
            try:  # reap our children, and orphans re-parented to us as subreaper
                while os.waitpid(-1, os.WNOHANG)[0] > 0:
                    pass
            except ChildProcessError:
                pass
            time.sleep(0.1)


def ray_start(args: argparse.Namespace, *head_or_address: str) -> subprocess.Popen:
    ray = Path(sys.executable).with_name("ray")
    argv = [
        str(ray) if ray.exists() else "ray",
        "start",
        *head_or_address,
        "--block",
        "--disable-usage-stats",
    ]
    if args.node_ip:
        argv += ["--node-ip-address", args.node_ip]
    argv += resource_flags(json.loads(args.resources) if args.resources else {})
    say("starting: " + " ".join(argv))
    # The job is over when this program stops its node: nothing to drain (Ray would wait up to 30 s).
    env = {"RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0", "RAY_USAGE_STATS_ENABLED": "0", **os.environ}
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, env=env)


def resource_flags(resources: dict[str, float]) -> list[str]:
    """`ray start` flags for what this node offers: CPU and GPU have flags, the rest is --resources."""
    flags, custom = [], {}
    for name, amount in resources.items():
        if name == "CPU":
            flags += ["--num-cpus", f"{amount:g}"]
        elif name == "GPU":
            flags += ["--num-gpus", f"{amount:g}"]
        else:
            custom[name] = amount
    if custom:
        flags += ["--resources", json.dumps(custom, sort_keys=True)]
    return flags


class Cluster:
    """What this node reads from and writes to the GCS, without joining as a driver."""

    def __init__(self, address: str, job_id: str) -> None:
        from ray import _raylet  # GcsClient: Ray's own client of the GCS (ray._raylet, Ray >= 2.x)

        self.address = address
        self.gcs = getattr(_raylet, "GcsClient")(address=address)
        self.key = f"job/{job_id}/result".encode()

    def alive_nodes(self) -> list:
        return [info for info in self.gcs.get_all_node_info(timeout=5).values() if info.state == 0]

    def publish(self, value: str) -> None:
        self.gcs.internal_kv_put(self.key, value.encode(), True, NAMESPACE, timeout=5)

    def result(self) -> str | None:
        value = self.gcs.internal_kv_get(self.key, NAMESPACE, timeout=5)
        return value.decode() if value else None


def reachable(address: str, timeout_s: float = 2.0) -> bool:
    import socket

    host, port = address.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            return True
    except OSError:
        return False


def missing(need: dict[str, float], nodes: list) -> dict[str, float]:
    total: dict[str, float] = {}
    for info in nodes:
        for name, amount in info.resources_total.items():
            total[name] = total.get(name, 0.0) + amount
    return {name: amount for name, amount in need.items() if total.get(name, 0.0) < amount}


def check_child(child: subprocess.Popen, what: str) -> None:
    if child.poll() is not None:
        raise NodeError(f"{what} exited with code {child.returncode}; its output is above in this log")


def wait_for_cluster(args: argparse.Namespace, head: subprocess.Popen, address: str) -> Cluster:
    need = json.loads(args.need) if args.need else {}
    deadline = time.monotonic() + args.timeout
    cluster, nodes, short = None, [], need
    while time.monotonic() < deadline:
        check_child(head, "the Ray head (ray start --head)")
        try:
            cluster = cluster or Cluster(address, args.job_id)
            nodes = cluster.alive_nodes()
            short = missing(need, nodes)
            if len(nodes) >= args.nodes and not short:
                say(f"cluster ready: {len(nodes)} of {args.nodes} nodes")
                return cluster
        except Exception:  # the GCS is still starting
            cluster = None
        time.sleep(POLL_S)
    detail = (
        f"only {len(nodes)} of {args.nodes} nodes joined"
        if len(nodes) < args.nodes
        else (f"the cluster lacks resources {json.dumps(short, sort_keys=True)}")
    )
    raise NodeError(
        f"{detail} within {args.timeout:g} s (node_wait_timeout_s): start the same command with "
        f"NODE_RANK=1..{args.nodes - 1} on the other nodes, MASTER_ADDR={args.node_ip} and "
        f"port {args.port} reachable from them"
    )


def run_head(args: argparse.Namespace) -> int:
    address = f"{args.node_ip}:{args.port}"
    head = ray_start(args, "--head", "--port", str(args.port), "--include-dashboard=false")
    cluster = wait_for_cluster(args, head, address)
    cluster.publish("running")
    expected = {
        info.node_id: f"{info.node_manager_address}:{info.node_manager_port}"
        for info in cluster.alive_nodes()
    }
    say("driver: " + " ".join(args.driver))
    driver = subprocess.Popen(
        args.driver, env={**os.environ, "RAY_ADDRESS": address}, stdin=subprocess.DEVNULL
    )
    code = None
    try:
        while (code := driver.poll()) is None:
            time.sleep(POLL_S)
            check_child(head, "the Ray head (ray start --head)")
            lost = set(expected) - {info.node_id for info in cluster.alive_nodes()}
            if lost:
                which = ", ".join(sorted(expected[node] for node in lost))
                raise NodeError(
                    f"{len(lost)} node(s) left the Ray cluster while the driver ran (raylet {which}); "
                    f"the logs of those nodes say why"
                )
    finally:
        if code is None:
            driver.terminate()
            try:
                driver.wait(10)
            except subprocess.TimeoutExpired:
                driver.kill()
        try:
            cluster.publish(f"done:{code if code is not None else EXIT_CLUSTER}")
            if args.nodes > 1:
                time.sleep(RESULT_LINGER_S)
        except Exception:
            pass
    say(f"driver exited with code {code}")
    return code


def run_worker(args: argparse.Namespace) -> int:
    deadline = time.monotonic() + args.timeout
    while not reachable(args.address):
        if time.monotonic() > deadline:
            raise NodeError(
                f"the head at {args.address} did not answer within {args.timeout:g} s "
                f"(node_wait_timeout_s): start NODE_RANK=0 first, check MASTER_ADDR and the port"
            )
        time.sleep(POLL_S)
    node = ray_start(args, "--address", args.address)
    cluster = Cluster(args.address, args.job_id)
    last_seen = time.monotonic()
    while True:
        time.sleep(POLL_S)
        check_child(node, "this node's Ray processes (ray start)")
        try:
            result = cluster.result()
            last_seen = time.monotonic()
        except Exception:
            if time.monotonic() - last_seen > HEAD_LOST_AFTER_S:
                raise NodeError(
                    f"lost the head at {args.address} for {HEAD_LOST_AFTER_S:g} s: "
                    f"the node with NODE_RANK=0 stopped; its log says why"
                ) from None
            continue
        if result and result.startswith("done:"):
            code = int(result.split(":", 1)[1])
            say("the driver on the head " + ("succeeded" if code == 0 else f"failed with code {code}"))
            return 0 if code == 0 else 1


def as_ip(host: str) -> str:
    """`host` as an IP address: `ray start --node-ip-address` takes no host name, and clusters such as
    ModelArts give domain names (VC_WORKER_HOSTS)."""
    try:
        return str(socket.getaddrinfo(host, None, socket.AF_INET)[0][4][0])
    except (OSError, IndexError):
        raise NodeError(f"cannot resolve {host!r} to an address (MASTER_ADDR): check the host name") from None


def resolve_addresses(args: argparse.Namespace) -> None:
    """Host names -> IPs in --node-ip and --address, before Ray sees them."""
    if args.node_ip:
        args.node_ip = as_ip(args.node_ip)
    if getattr(args, "address", None):
        host, port = args.address.rsplit(":", 1)
        args.address = f"{as_ip(host)}:{port}"


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="ray_node.py", description=__doc__.split("\n\n")[1])
    sub = parser.add_subparsers(dest="role", required=True)
    for role in ("head", "worker"):
        p = sub.add_parser(role)
        p.add_argument("--timeout", type=float, required=True, help="seconds to wait for the cluster")
        p.add_argument("--job-id", required=True)
        p.add_argument("--resources", help='JSON: what this node offers, e.g. {"CPU": 2, "NPU": 8}')
        p.add_argument("--node-ip", help="this node's address as the cluster sees it")
        if role == "head":
            p.add_argument("--port", type=int, required=True)
            p.add_argument("--nodes", type=int, required=True)
            p.add_argument("--need", help="JSON: what the whole cluster must offer before the driver starts")
        else:
            p.add_argument("--address", required=True, help="the head's host:port")
    if "--" in argv:
        cut = argv.index("--")
        args = parser.parse_args(argv[:cut])
        args.driver = argv[cut + 1 :]
    else:
        args = parser.parse_args(argv)
        args.driver = []
    if args.role == "head" and not args.driver:
        parser.error("head needs the driver command after --")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    become_subreaper()

    def stop(signum, _frame):
        raise Stopped(signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        resolve_addresses(args)
        return run_head(args) if args.role == "head" else run_worker(args)
    except NodeError as e:
        say(f"error: {e}")
        return EXIT_CLUSTER
    except Stopped as e:
        say(f"stopped by {e}")
        return e.code
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        stop_all()


if __name__ == "__main__":
    sys.exit(main())
