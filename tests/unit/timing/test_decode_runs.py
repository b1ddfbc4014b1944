"""Decode runs (cosim_core.DecodeRun, core/src/runs.rs): steps begun without forming, applied in bulk when settled."""

from __future__ import annotations

from cosim_core import DecodeRun

from tests.unit.sim.test_scheduler import scheduler, seq


def test_a_decode_run_lasts_until_a_sequence_finishes() -> None:
    s = scheduler(batching="continuous")
    s.add(seq(4, 10, rid=0))
    s.add(seq(4, 6, rid=1))
    prefill = s.schedule()
    run = DecodeRun.start(s, prefill, s.update(prefill))
    assert run is not None and run.steps_left == 6 - 1  # request 1 samples its last token in the run's last step

    def take() -> list[int]:
        run.begin()
        return run.step().context

    assert [take(), take()] == [[4, 4], [4, 4]]  # none done yet
    run.end_step(0, 10)
    run.end_step(10, 30)
    assert run.max_gap_ns == 20 and run.last_ns == 30
    assert run.settle() == 2 and [x.num_computed for x in s.running] == [6, 6] and run.max_gap_ns == 0
    assert run.settle() == 0  # idempotent
    assert take() == [6, 6] and run.steps_left == 2
    run.end_step(30, 40)
    take()
    run.end_step(40, 50)
    run.settle()
    run.begin()
    last = run.step()  # handed back like any other step
    assert last.context == [8, 8] and run.steps_left == 0
    assert [x.request.id for x in s.update(last).finished] == [1]


def test_work_arriving_cuts_a_run_after_its_steps_begun() -> None:
    s = scheduler(batching="continuous")
    s.add(seq(4, 10, rid=0))
    prefill = s.schedule()
    run = DecodeRun.start(s, prefill, s.update(prefill))
    assert run is not None and run.steps_left == 10 - 1
    run.begin()
    run.cut()
    assert run.steps_left == 0 and run.num_requests == 1
