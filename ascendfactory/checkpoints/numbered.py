"""Numbered checkpoint directories (`iter_0000040`, `checkpoint-40`, `global_step_40`), listed once."""

from __future__ import annotations

import os
import re
from collections.abc import Callable


def numbered_dirs(
    root: str, pattern: re.Pattern[str], complete: Callable[[str], bool]
) -> list[tuple[int, str, bool]]:
    """(N, path, complete) of every directory under `root` whose name matches `pattern` (its group 1 is N),
    oldest first; `complete(path)` tells a finished checkpoint from one still being written."""
    try:
        names = os.listdir(root)
    except OSError:
        return []
    found = []
    for name in names:
        m = pattern.match(name)
        path = os.path.join(root, name)
        if m and os.path.isdir(path):
            found.append((int(m.group(1)), path, complete(path)))
    return sorted(found)
