"""The phase clock's CUDA event path, run on the CPU through a stand-in for CUDA's timing (``CudaTiming``): a
clock makes its events once and records them again every step, settles once per step, reads the marks it was
given, and refuses a mark read after the clock moved on; a model over several devices synchronises each one."""

from __future__ import annotations

import itertools

import pytest
import torch

from drafting.engine.decode import Decoder
from drafting.engine.phase_clock import CudaTiming, EventMark, PhaseClock, StaleMark
from drafting.speculators import create

GPU = torch.device("cuda")  # only named: nothing runs there


class FakeEvent:
    """Records a tick of a fake device clock (one millisecond per record)."""

    def __init__(self, timing: "FakeTiming"):
        self.timing, self.at = timing, None

    def record(self, stream):
        assert stream == ("stream of", GPU)
        self.at = next(self.timing.ticks)

    def synchronize(self):
        self.timing.waits += 1

    def elapsed_time(self, later: "FakeEvent") -> float:
        return float(later.at - self.at)


class FakeTiming(CudaTiming):
    def __init__(self):
        self.ticks = itertools.count()
        self.made = 0
        self.waits = 0
        self.synced: list = []

    def new_event(self):
        self.made += 1
        return FakeEvent(self)

    def stream(self, device):
        return ("stream of", device)

    def synchronize(self, device):
        self.synced.append(device)


def test_a_clock_makes_its_events_once_and_reads_each_step_after_one_wait():
    timing = FakeTiming()
    clock = PhaseClock([GPU], cuda=timing)
    for step in range(5):
        marks = [clock.mark() for _ in range(4)]
        assert all(isinstance(m, EventMark) for m in marks)
        waits = timing.waits
        clock.settle()
        assert timing.waits == waits + 1  # one wait per step, for the last mark
        assert [clock.seconds(a, b) for a, b in zip(marks, marks[1:])] == [0.001] * 3
    assert timing.made == 4  # four marks a step, made by the first step and recorded again by the others


def test_a_mark_read_after_the_clock_marked_again_is_refused():
    clock = PhaseClock([GPU], cuda=FakeTiming())
    a, b = clock.mark(), clock.mark()
    clock.settle()
    clock.mark()  # a new round: a's and b's events may be recorded again
    with pytest.raises(StaleMark):
        clock.seconds(a, b)


def test_a_model_over_several_devices_synchronises_each_at_every_mark():
    timing = FakeTiming()
    devices = [torch.device("cuda:0"), torch.device("cuda:1")]
    clock = PhaseClock(devices, cuda=timing)
    a, b = clock.mark(), clock.mark()
    assert isinstance(a, float) and clock.seconds(a, b) >= 0.0
    assert timing.synced == devices * 2 and timing.made == 0


def test_the_decode_loop_reads_its_marks_within_each_step(tiny_lm):
    timing = FakeTiming()
    dec = Decoder(tiny_lm, create("goose:budget=8"))
    dec.clock = PhaseClock([GPU], cuda=timing)
    ids = [5, 6, 7, 8, 9, 10, 11, 12] * 3
    res = dec.generate(ids, 16)
    assert res.steps > 1 and timing.made == 4  # 2 marks for the prefill, 4 a step, all from the same 4 events
    assert res.prefill_s == pytest.approx(0.001)
    for rec in res.records:  # marks one tick apart: draft = (t1 - t0) + (t3 - t2), verify = t2 - t1
        assert rec.draft_s == pytest.approx(0.002) and rec.verify_s == pytest.approx(0.001)
