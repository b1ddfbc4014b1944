"""How long a client's step takes, and the devices that make asking cheap.

The step timer lives in the compiled core (``cosim_core.StepTimer``, core/src/step_timer.rs), over
the timing cache (core/src/timing.rs, :mod:`.cache`). A step's time is the runtime backend's
answer for its batch signature (new and context tokens per sequence), with the network backend's
collectives in place of the backend's own estimate where one times them, plus what the batch does
before its forward pass (drafts, swapped KV, LoRA loads), plus the host time the engine loop
exposes (:mod:`cosim.hub.sim.clients.host`): one formula, ``StepTimer.step_ns``, for every step.
The optional parts (host time, the network backend's collectives, energy, the speculative drafter,
LoRA) stay Python objects the core calls where a config gives them. The rest changes how often a
backend is asked, never the answer:

- **timing cache** (``RuntimeSessionProxy``): a batch signature timed once is never asked again;
  clients whose sessions are identical share one;
- **lookahead** (``cosim_core.Forecast``, core/src/forecast.rs): on a miss, the batches that will
  follow if no work arrives ride along in the same call. They come from the client's own scheduler
  policy run on a copy of its state, so there is one model of admission, preemption and KV growth;
  a wrong prediction costs backend work, never a different result. The forecast is kept until work
  arrives, so asking again continues it; then the next copy reuses the dropped one's KV blocks,
  brought up to date by what either side wrote since. None where the backend's compiled model times
  a miss in process (``RuntimeSessionProxy.native``): that costs less than the forecast;
- **top-ups** (``StepTimer.top_up``): when another client of the session misses, this one's
  predictions ride along too, where they fall short;
- **drafts ahead**: a speculative drafter model's forwards are timed in its own session; on a miss
  there, the step's later forwards and those of the predicted steps (the same forecast's) ride
  along in one call;
- **decode runs** (``cosim_core.DecodeRun``, core/src/runs.rs): steps certain to be the same
  sequences decoding skip the scheduler's per-step forming and updating; the scheduler applies them
  in bulk when anyone looks (``StepTimer.settled``);
- **steps in place** (``StepTimer.take_steps``, core/src/stepping.rs): a lone client's step ends
  and wake-ups that come before anything else in the simulation are handled without the kernel's
  heap, and a decode run's steps whose timings are cached (or, in a session the backend's compiled
  model times in process, timed there on a miss) are taken in one go, without a batch or
  an event each; each step is begun, timed, ended and recorded there, the client's Python called
  only for what is rare or its own.
"""

from __future__ import annotations

from typing import Any

import cosim_core
from cosim_core import predict

__all__ = ["StepTimer", "predict"]


class StepTimer(cosim_core.StepTimer):
    """Steps one client's scheduler and times each step (``cosim_core.StepTimer``'s arguments).

    The core's timer, joined to its session as a rider."""

    def __init__(self, **kwargs: Any) -> None:
        self.session.join(self)  # its top-ups ride along when another client of the session misses
