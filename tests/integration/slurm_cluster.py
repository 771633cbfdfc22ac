"""A private, real Slurm cluster on this host for the `submit slurm` tests: Debian's slurmctld and slurmd
(`sh install.sh --dev` installs them as root), no munge (`auth/none`, `cred/none`), two nodes served by two
slurmd daemons with their own NodeName and port (`slurmd -N`), each declaring the machine's CPUs, state and
logs under a temporary directory, stopped at the end (jobs cancelled first).

Node names: the first node is this machine's host name, so that the node list's first host, which every
node takes as MASTER_ADDR, resolves here; the second only needs a name Slurm knows that sorts after it
(both NodeAddr 127.0.0.1).
Slurm 22.05 refuses a node named `localhost` beside another ("Duplicated NodeHostName"). Where the host
name does not resolve, the first node is `node1` and `resolvable` is False (the two-node test skips).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DAEMONS = ("slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel", "sinfo")


def first_node() -> str:
    name = socket.gethostname().split(".")[0]
    try:
        socket.getaddrinfo(name, None)
    except OSError:
        return "node1"
    return name if name != "localhost" else "node1"


NODES = (first_node(), first_node() + "x2")  # Slurm sorts its node lists: the first must stay first

CONF = """\
ClusterName=aftest
SlurmctldHost=localhost
AuthType=auth/none
CredType=cred/none
SlurmUser=root
SlurmdUser=root
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool-%n
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd-%n.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd-%n.log
SlurmctldPort={ctld_port}
SlurmdPort={node_ports[0]}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
MinJobAge=600
KillWait=10
SlurmdParameters=config_overrides
NodeName={nodes[0]} NodeAddr=127.0.0.1 Port={node_ports[0]} CPUs={cpus} RealMemory=4000 State=UNKNOWN
NodeName={nodes[1]} NodeAddr=127.0.0.1 Port={node_ports[1]} CPUs={cpus} RealMemory=4000 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


def missing() -> str | None:
    """Why no cluster can start here, or None."""
    if os.geteuid() != 0:
        return "the Slurm test cluster runs its daemons as root"
    absent = [d for d in DAEMONS if shutil.which(d) is None]
    if absent:
        return f"{', '.join(absent)} not installed (sh install.sh --dev installs Debian's Slurm as root)"
    return None


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@dataclass
class SlurmCluster:
    root: Path
    conf: Path
    procs: list[subprocess.Popen]
    output: Any = None  # the daemons' console file, closed by stop()

    @property
    def resolvable(self) -> bool:
        """Whether the first node's name is an address here (MASTER_ADDR of a two-node job)."""
        return NODES[0] != "node1"

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(self, *argv: str) -> subprocess.CompletedProcess:
        return subprocess.run(list(argv), env=self.env, capture_output=True, text=True, timeout=60)

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace")[-3000:] for p in sorted(self.root.glob("*.log")))


def start(root: Path, timeout_s: float = 60) -> SlurmCluster:
    root.mkdir(parents=True, exist_ok=True)
    (root / "state").mkdir(exist_ok=True)
    ctld_port, *node_ports = free_ports(3)
    conf = root / "slurm.conf"
    conf.write_text(
        CONF.format(d=root, ctld_port=ctld_port, node_ports=node_ports, nodes=NODES, cpus=os.cpu_count() or 1)
    )
    env = {**os.environ, "SLURM_CONF": str(conf)}
    out = open(root / "daemons.out", "ab")  # noqa: SIM115 - kept open while the daemons run
    procs = [subprocess.Popen(["slurmctld", "-D", "-c", "-i"], env=env, stdout=out, stderr=out)]
    procs += [subprocess.Popen(["slurmd", "-D", "-N", n], env=env, stdout=out, stderr=out) for n in NODES]
    cluster = SlurmCluster(root, conf, procs, out)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        states = cluster.run("sinfo", "-h", "-N", "-o", "%N %T").stdout.split("\n")
        if sum(1 for line in states if line.split()[-1:] == ["idle"]) == len(NODES):
            return cluster
        if any(p.poll() is not None for p in procs):
            break
        time.sleep(0.5)
    text = cluster.logs()
    stop(cluster)
    raise RuntimeError(f"the test Slurm cluster did not come up:\n{text}")


def stop(cluster: SlurmCluster, timeout_s: float = 60) -> None:
    """Cancel every job (their steps run under slurmstepd, which outlives slurmd), then stop the daemons."""
    cluster.run("scancel", "--full", "--partition=debug")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and cluster.run("squeue", "-h").stdout.strip():
        time.sleep(0.5)
    for p in reversed(cluster.procs):
        p.terminate()
    for p in cluster.procs:
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    if cluster.output is not None:
        cluster.output.close()
