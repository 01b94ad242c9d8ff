# SPDX-License-Identifier: Apache-2.0
"""Shared markers: GPU tests are skipped, visibly, where no CUDA device exists."""

import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import cudapmr

HAS_GPU = cudapmr.device_count() > 0

gpu = pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA device (none found)")
no_gpu = pytest.mark.skipif(HAS_GPU, reason="checks the behaviour where no CUDA device exists")


def needs(module_name):
    """The module, or a skip naming it where it is not installed."""
    return pytest.importorskip(module_name, reason=f"needs {module_name}")


UNAVAILABLE = 3  # what a child script exits with where this machine cannot run its scenario


def run_child(script, scenario):
    """Runs ``scenario`` of ``script`` (a file beside this one) in a child
    process, which a failure may crash or deadlock: passes when it prints
    ``ok`` (``ok (NOTE)``: passes with NOTE as a warning in pytest's summary),
    skips when it exits with UNAVAILABLE, else fails with its output."""
    path = Path(__file__).with_name(script)
    # The timeout only stops a hang that the child's own watchdog missed.
    child = subprocess.run([sys.executable, str(path), scenario], capture_output=True, text=True, timeout=600,
                           cwd=path.parent)
    if child.returncode == UNAVAILABLE:
        pytest.skip(f"{script} {scenario}: {child.stdout.strip()}")
    said = child.stdout.strip()
    assert child.returncode == 0 and (said == "ok" or said.startswith("ok (") and said.endswith(")")), (
        f"{script} {scenario} exited {child.returncode}: {child.stdout[-2000:]}{child.stderr[-4000:]}")
    if said != "ok":
        warnings.warn(f"{script} {scenario}: {said[len('ok ('):-1]}", stacklevel=2)
