"""Releasing the calling thread's idle OpenMP workers (what the chat app does before decoding off its main thread)."""

from __future__ import annotations

import os
import sys

import pytest
import torch

from drafting.machine.openmp import release_idle_workers


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


@pytest.mark.skipif(not sys.platform.startswith("linux") or torch.get_num_threads() < 2,
                    reason="needs Linux and torch running more than one thread")
def test_release_lets_the_workers_go_and_torch_still_runs():
    a = torch.randn(256, 256)
    (a @ a).sum()  # a parallel region: this thread's OpenMP team now exists
    before = _threads()
    assert release_idle_workers()
    assert _threads() < before
    expected = a.double() @ a.double()
    assert torch.allclose((a @ a).double(), expected, rtol=1e-4, atol=1e-3)  # the team comes back when needed


def test_startup_settings_never_override_the_user():
    from drafting.machine.openmp import STARTUP_SETTINGS, apply_startup_settings, startup_settings

    assert startup_settings({}) == STARTUP_SETTINGS
    for knob in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME", "OMP_NUM_THREADS"):
        assert startup_settings({knob: "x"}) == {}
    assert startup_settings({"GOOSE_OPENMP": "keep"}) == {}
    env: dict = {}
    assert apply_startup_settings(env) == {} and env == {}  # torch is imported here already: too late to set


def _child_env(**extra):
    import subprocess

    from support.cli import ROOT

    clean = {k: v for k, v in os.environ.items()
             if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME", "OMP_NUM_THREADS", "GOOSE_OPENMP")}
    clean.update(PYTHONPATH=str(ROOT), **extra)
    code = "import goosecli, os; print(os.environ.get('GOMP_SPINCOUNT'), os.environ.get('OMP_WAIT_POLICY'))"
    return subprocess.run([sys.executable, "-c", code], env=clean, capture_output=True, text=True, timeout=120).stdout.split()


def test_the_command_sets_its_default_before_torch_loads_unless_told_otherwise():
    from drafting.machine.openmp import STARTUP_SETTINGS

    assert _child_env() == [STARTUP_SETTINGS.get("GOMP_SPINCOUNT", "None"), STARTUP_SETTINGS.get("OMP_WAIT_POLICY", "None")]
    assert _child_env(OMP_WAIT_POLICY="PASSIVE") == ["None", "PASSIVE"]  # the user's setting wins, alone
    assert _child_env(GOOSE_OPENMP="keep") == ["None", "None"]


def test_threads_follow_the_cores_other_processes_leave():
    from drafting.machine.load import Load
    from drafting.machine.thread_share import threads_for

    def load(others: float, steal: float = 0.0) -> Load:
        return Load(others_cores=others, steal_cores=steal, own_cores=2.0, cores=2, wall_s=1.0)

    assert threads_for(load(0.0), 2) == 2  # alone: every thread
    assert threads_for(load(0.3), 2) == 2  # a little background work is not worth a core
    assert threads_for(load(0.9), 2) == 1  # a twin holds a core: run on the one that is left
    assert threads_for(load(0.4, steal=0.4), 2) == 1  # the hypervisor's share counts too
    assert threads_for(load(2.0), 2) == 1  # never below one
    assert threads_for(load(0.0), 1) == 1  # never above what the process was given


def test_thread_sharing_stays_out_of_the_way_of_a_users_choice():
    from drafting.machine.openmp import user_chose

    assert not user_chose({})
    assert user_chose({"OMP_NUM_THREADS": "2"}) and user_chose({"GOOSE_OPENMP": "keep"})
