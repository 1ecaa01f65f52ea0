"""Releasing the calling thread's idle OpenMP workers (what the chat app does before decoding off its main thread)."""

from __future__ import annotations

import os
import sys

import pytest
import torch

from drafting.machine.openmp import release_idle_workers


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


@pytest.fixture
def a_team():
    """At least two torch threads, so a parallel region makes a team (``make test``'s workers run one each)."""
    before = torch.get_num_threads()
    torch.set_num_threads(max(2, before))
    yield
    torch.set_num_threads(before)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the threads of /proc/self/task")
def test_release_lets_the_workers_go_and_torch_still_runs(a_team):
    a = torch.randn(256, 256)
    (a @ a).sum()  # a parallel region: this thread's OpenMP team now exists
    before = _threads()
    assert release_idle_workers()
    assert _threads() < before
    expected = a.double() @ a.double()
    assert torch.allclose((a @ a).double(), expected, rtol=1e-4, atol=1e-3)  # the team comes back when needed


def _child_env(**extra):
    import subprocess

    from support.cli import ROOT

    clean = {k: v for k, v in os.environ.items()
             if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME", "OMP_NUM_THREADS", "GOOSE_OPENMP")}
    clean.update(PYTHONPATH=str(ROOT), **extra)
    code = "import goosecli, os; print(os.environ.get('GOMP_SPINCOUNT'), os.environ.get('OMP_WAIT_POLICY'))"
    return subprocess.run([sys.executable, "-c", code], env=clean, capture_output=True, text=True, timeout=120).stdout.split()


def test_the_command_sets_no_openmp_variable_and_keeps_the_users():
    assert _child_env() == ["None", "None"]  # the runtime's defaults (docs/speed.md: none measured better)
    assert _child_env(OMP_WAIT_POLICY="PASSIVE") == ["None", "PASSIVE"]  # the user's setting, alone


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


def test_sharing_the_cores_sets_an_engines_own_threads_too():
    """llama.cpp decodes on threads of its own: giving cores up must reach them, not torch's alone."""
    import torch

    from drafting.machine.load import Load
    from drafting.machine.thread_share import ThreadShare

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    share = ThreadShare()
    share.enabled, share.ceiling = True, 2
    set_to = []
    try:
        for others in (1.0, 0.0):
            share._meter.stop = lambda: Load(others_cores=others, steal_cores=0.0, own_cores=1.0, cores=2, wall_s=1.0)
            share._t = 0.0  # the last reading is long past
            share.tick(set_to.append)
        assert set_to == [1, 2]
    finally:
        torch.set_num_threads(before)


def test_thread_sharing_stays_out_of_the_way_of_a_users_choice():
    from drafting.machine.openmp import describe_settings, user_chose

    assert not user_chose({})
    assert user_chose({"OMP_NUM_THREADS": "2"}) and user_chose({"GOOSE_OPENMP": "keep"})
    assert describe_settings({}) == "OpenMP runtime defaults"
    assert describe_settings({"OMP_WAIT_POLICY": "PASSIVE"}) == "OMP_WAIT_POLICY=PASSIVE (set by the user)"
