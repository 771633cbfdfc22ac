"""Where the MindSpeed-RL checkout is and which version's keys and rules apply: what reading the experiment
needs (`config.read_config` with no key set given), so it lives with the experiment, not the backend.

The MindSpeed-RL directory, in order: `scripts_dir` in the experiment, else env `AF_MINDSPEED_RL_DIR`,
else where `install.sh mindspeed-rl` clones it (`<AF_THIRD_PARTY_DIR or ~/.ascendfactory/third-party>/
MindSpeed-RL`).

The version whose keys and rules apply (`keys.KeySet`), in order: `backend_config.mindspeed_rl_version`
(a shipped version: 2.1.0, 2.2.0, 2.3.0, master); else the checkout's own config classes, read from its
source (named after the shipped version they equal, else checked with their own keys and the closest
version's rules); else the newest shipped version, with a warning.
"""

from __future__ import annotations

from dataclasses import dataclass

from ascendfactory.backends.common.mindspeed_rl_experiment import keys as keyfiles
from ascendfactory.backends.environment import FrameworkCheckout

ENTRY_SCRIPTS = ("cli/train_grpo.py", "cli/preprocess_data.py")


CHECKOUT = FrameworkCheckout("MindSpeed-RL", "AF_MINDSPEED_RL_DIR", ENTRY_SCRIPTS)
install_dir = CHECKOUT.install_dir
find_checkout = CHECKOUT.find  # (absolute directory, where it came from): the module docstring's order
missing_entry_scripts = CHECKOUT.missing


@dataclass(frozen=True)
class VersionChoice:
    keys: keyfiles.KeySet
    reason: str
    guessed: bool = False  # no checkout and no explicit version: the newest shipped one


def choose_version(explicit: str | None, checkout: str | None) -> VersionChoice:
    """The key set in use, by the precedence in the module docstring. `explicit` must be shipped."""
    if explicit:
        return VersionChoice(keyfiles.shipped(explicit), f"backend_config.mindspeed_rl_version: {explicit}")
    if checkout and not missing_entry_scripts(checkout):
        try:
            ks = keyfiles.from_checkout(checkout)
        except (OSError, ValueError, StopIteration, SyntaxError) as e:
            latest = keyfiles.latest()
            return VersionChoice(
                latest,
                f"could not read the config classes of {checkout} ({e}); checking against "
                f"MindSpeed-RL {latest.version}",
                guessed=True,
            )
        if ks.version == "checkout":
            return VersionChoice(
                ks,
                f"keys read from {checkout} (they match no shipped version; the rules of "
                f"{ks.closest}, the closest, apply)",
            )
        return VersionChoice(ks, f"{checkout} has the keys of MindSpeed-RL {ks.version}")
    latest = keyfiles.latest()
    return VersionChoice(
        latest,
        f"no MindSpeed-RL checkout found: checking against MindSpeed-RL {latest.version}, the newest "
        f"shipped key list; set backend_config.mindspeed_rl_version (one of "
        f"{', '.join(keyfiles.shipped_versions())}) to check against another",
        guessed=True,
    )
