"""One node of a background job: runs the node's command, passes SIGTERM/SIGINT on to it, and records its
exit code in `<job dir>/node<rank>.exit` (what `submit status` reads).

    python -m af_background.node JOB_DIR RANK -- COMMAND...
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys


def main(argv: list[str]) -> int:
    job_dir, rank, command = argv[0], argv[1], argv[argv.index("--") + 1 :]
    child = subprocess.Popen(command)

    def forward(signum, frame):  # cancel: the node's runner stops its processes and ends its trackers
        child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    code = child.wait()
    tmp = os.path.join(job_dir, f".node{rank}.exit")
    with open(tmp, "w") as f:
        f.write(f"{code}\n")
    os.replace(tmp, os.path.join(job_dir, f"node{rank}.exit"))
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
