"""The live view's pure JavaScript (frontend/tests/, `node --test`): formatting, merging series, the axes'
domains, thinning, the stepper's phase order and the drawers' registry.

Run here so that `python -m pytest` (and CI) runs them too. Without Node this fails, it does not skip: the
browser code would otherwise go untested. The drawers' test is given each strategy's drawer key and phase
names from fitcore itself, so a strategy without a drawer, or a phase without its drawing, fails here.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from fitcore.kit import live
from fitcore.protocols import registry
from fitcore.strategies.dataparallel import phases

ROOT = Path(__file__).resolve().parents[1]


def strategy_phases() -> dict[str, list[str]]:
    """{drawer key: the phase names its strategy records}, from each strategy's `phases` hook, and the
    engine's grid of a 2-D mesh (fitcore.kit.live.MESH_DRAWER), whatever runs its dp dimension."""
    assert registry.strategy(registry.DEFAULT).phases() == phases.DATAPARALLEL_PHASES
    return {**{s.drawer: list(s.phases()) for s in registry.STRATEGIES.values()},
            live.MESH_DRAWER: list(live.MESH_PHASES)}  # fmt: skip


def test_the_browser_modules_pass_their_node_tests():
    node = shutil.which("node")
    assert node, "node is not on the PATH: install Node.js 20 or newer to run frontend/tests/"
    env = {**os.environ, "FITCORE_PHASES": json.dumps(strategy_phases())}
    done = subprocess.run(
        [node, "--test", "frontend/tests/"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-6000:]
    assert "# fail 0" in out and "# skipped 0" in out and "# pass 0" not in out, out[-2000:]
