"""The port a run binds on this node (`env.MASTER_PORT`), checked before anything starts.

NODE_RANK 0 binds it: torchrun's rendezvous store (c10d TCPStore, on every interface) or the Ray head.
A port another program listens on fails the job at its first step after the queue, as a raw torchrun
traceback ending in EADDRINUSE; so a real run refuses it up front (naming `env.MASTER_PORT` and a free
port), `--dry-run` warns, and a launch that still meets it is not retried by auto-resume.
"""

from __future__ import annotations

import socket

from ascendfactory.plan import Plan, Ray, Role, Torchrun

# Text a train log ends with when the port was taken between the check and the launch: not retryable.
UNRETRYABLE = ("EADDRINUSE", "Address already in use", "address already in use")
KEY = "env.MASTER_PORT"


def in_use(port: int) -> bool:
    """True when binding `port` on every interface fails (a listener holds it), as the rendezvous store
    binds it (SO_REUSEADDR: a closed socket in TIME_WAIT does not count)."""
    for family, host in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
        try:
            s = socket.socket(family, socket.SOCK_STREAM)
        except OSError:
            continue  # no IPv6 on this machine
        with s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((host, port))
            except OSError as e:
                if e.errno == 98 or "in use" in str(e).lower():
                    return True
    return False


def free_port_near(port: int) -> int:
    """The first free port above `port` (up to 200 further), else one the system picks."""
    for candidate in range(port + 1, min(port + 200, 65535) + 1):
        if not in_use(candidate):
            return candidate
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def bound_port(plan: Plan) -> int | None:
    """The port the train step binds on this node (NODE_RANK 0 of a torchrun or Ray launch), if any."""
    step = plan.with_role(Role.TRAIN)
    if step is None or step.skipped:
        return None
    launch = step.launch
    if isinstance(launch, Torchrun) and launch.node_rank == 0:
        return launch.master_port
    if isinstance(launch, Ray) and launch.node_rank == 0:
        return launch.port
    return None


def busy_message(port: int) -> tuple[str, str]:
    """(message, fix) for a port in use."""
    return (
        f"port {port} is in use on this machine (another job, or a leftover of an earlier run, listens on "
        "it); this node binds it for the rendezvous",
        f"set env.MASTER_PORT to a free port, e.g. {free_port_near(port)} (the same on every node), or stop "
        "the program that holds it",
    )
