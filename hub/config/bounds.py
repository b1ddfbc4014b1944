"""Upper bounds of the numbers a scenario config may hold.

Every number a run turns into simulated nanoseconds, token counts, blocks or
bytes is bounded here, so that ``cosim validate`` refuses what a run could not
do (int64 nanoseconds, protobuf's unsigned 32-bit model fields, numpy's int64
lengths) instead of the run overflowing. The figures are far beyond any real
deployment; README.md ("The scenario config") lists them.
"""

from __future__ import annotations

#: Longest simulated time a config may ask for, in seconds (31.7 years). Simulated time is int64
#: nanoseconds (2**63 ns = 292 years); the margin leaves room for the steps that follow the last arrival.
MAX_TIME_S = 1e9
MAX_TIME_NS = int(MAX_TIME_S * 1e9)

#: Most tokens of one request, one prompt, one step or one prefix (and of a client's max_model_len).
MAX_TOKENS = 1_000_000_000

#: Most requests one workload generates.
MAX_REQUESTS = 100_000_000

#: Seeds are numpy seeds that fit a signed 64-bit integer (summary.json, run.json).
MAX_SEED = 2**63 - 1

#: Most devices of one client (count, and each parallel degree) or of one network dimension.
MAX_DEVICES = 100_000

#: Rates in requests per second: at most one per nanosecond (a rate so low that arrivals pass MAX_TIME_S
#: is refused when the workload is drawn).
MAX_RATE_PER_S = 1e9

#: Bandwidths in GB/s: 1 MB/s to 1 PB/s, so that no transfer of a bounded size outlasts MAX_TIME_S.
MIN_GBPS = 1e-3
MAX_GBPS = 1e6

#: Figures of a device (a preset's or an override's), TFLOP/s and GB/s: from 1 GFLOP/s and 1 MB/s (a slower
#: device's step outlasts the simulation's clock, and one near 0 overflows the roofline's times) to an
#: exa-op device and a PB/s link.
MIN_FIGURE, MAX_FIGURE = 1e-3, 1e9

#: Fixed latency of one collective or one of its steps on a device's link, in µs: at most a second (NCCL's
#: are microseconds; a latency beyond int64 nanoseconds overflowed the roofline).
MAX_LINK_LATENCY_US = 1e6

#: Share of a link's bandwidth a collective reaches (a bus efficiency): at least 0.1%, at most all of it (one
#: near 0 overflowed the roofline's collective times).
MIN_LINK_EFFICIENCY = 1e-3

#: Bytes of memory (capacities, reserves, swap space): 2**53, the largest count a float holds exactly.
MAX_BYTES = 2**53

#: Relative weights (model and template mixes): positive and finite, their sum too.
MAX_WEIGHT = 1e12

#: Sequences one client holds at once, and KV blocks of one client.
MAX_SEQS = 1_000_000
MAX_BLOCKS = 10**12

#: Fields of a model shape travel as protobuf uint32 (cosim.v1.ModelSpec).
MAX_UINT32 = 2**32 - 1
