"""Busy-machine detection and thread sharing count the CPUs this process may use (its CPU affinity and its
cgroup's CPU quota), not the host's: a container or a `taskset` run is not always busy."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from support.cli import ROOT, cli_env

from drafting.machine.load import Load, cgroup_cpu_limit, cpu_ticks, usable_cores
from drafting.machine.thread_share import threads_for

PROC_STAT = """cpu  100 5 50 1000 10 1 2 7 0 0
cpu0 60 5 30 400 5 1 1 3 0 0
cpu1 40 0 20 600 5 0 1 4 0 0
intr 12345
"""


@pytest.mark.parametrize("cpu_max, cores", [("max 100000\n", None), ("200000 100000\n", 2.0),
                                            ("150000 100000", 1.5), ("50000 100000", 0.5), ("", None),
                                            ("garbage", None)])
def test_cgroup_v2_cpu_max(cpu_max, cores):
    assert cgroup_cpu_limit(cpu_max=cpu_max) == cores


@pytest.mark.parametrize("quota, period, cores", [("-1\n", "100000\n", None), ("400000\n", "100000\n", 4.0),
                                                  ("25000", "100000", 0.25), ("100000", "0", None),
                                                  ("x", "100000", None)])
def test_cgroup_v1_cfs_quota(quota, period, cores):
    assert cgroup_cpu_limit(cfs_quota_us=quota, cfs_period_us=period) == cores


def test_no_cgroup_files_is_no_limit():
    assert cgroup_cpu_limit() is None


def test_usable_cores_is_the_smaller_of_affinity_and_quota(monkeypatch):
    import drafting.machine.load as load

    monkeypatch.setattr(load, "_affinity", lambda: {0, 1, 2, 3})
    monkeypatch.setattr(load, "_cgroup_limit", lambda: None)
    assert usable_cores() == 4
    monkeypatch.setattr(load, "_cgroup_limit", lambda: 1.5)
    assert usable_cores() == 2  # a fraction of a core still runs a thread
    monkeypatch.setattr(load, "_cgroup_limit", lambda: 0.25)
    assert usable_cores() == 1
    monkeypatch.setattr(load, "_cgroup_limit", lambda: 16.0)
    assert usable_cores() == 4


def test_ticks_are_counted_on_the_cpus_this_process_may_run_on():
    # busy = user + nice + system + irq + softirq; steal is the eighth field
    assert cpu_ticks(PROC_STAT, None) == (100 + 5 + 50 + 1 + 2, 7)
    assert cpu_ticks(PROC_STAT, {0}) == (60 + 5 + 30 + 1 + 1, 3)
    assert cpu_ticks(PROC_STAT, {0, 1}) == (100 + 5 + 50 + 1 + 2, 7)
    assert cpu_ticks("", None) is None


def test_other_processes_on_cpus_we_cannot_use_do_not_make_us_busy():
    # a 2-core quota on a 64-CPU host whose other processes use 10 cores: 54 are free, we keep our 2
    crowded_host = Load(others_cores=10.0, steal_cores=0.0, own_cores=2.0, cores=2, wall_s=1.0, cpus=64)
    assert not crowded_host.busy and threads_for(crowded_host, 2) == 2
    # the same host nearly full: only one core is left to us
    full_host = Load(others_cores=63.0, steal_cores=0.0, own_cores=1.0, cores=2, wall_s=1.0, cpus=64)
    assert full_host.busy and threads_for(full_host, 2) == 1
    # a whole machine (cpus defaults to cores): as before, anything over half a core of others is busy
    machine = Load(others_cores=0.6, steal_cores=0.0, own_cores=1.0, cores=4, wall_s=1.0)
    assert machine.busy and threads_for(machine, 4) == 3


METER = """
import time
from drafting.machine.load import LoadMeter
with LoadMeter() as meter:
    time.sleep(0.3)  # the meter needs a few clock ticks to say anything
print(meter.load.cores, meter.load.cpus)
"""


@pytest.mark.skipif(shutil.which("taskset") is None, reason="taskset is not installed")
@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="this machine has one CPU: a taskset run is the whole of it")
def test_a_taskset_run_counts_one_usable_core():
    cpu = min(os.sched_getaffinity(0))
    done = subprocess.run(["taskset", "-c", str(cpu), sys.executable, "-c", METER], cwd=ROOT, env=cli_env(),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "1"]
