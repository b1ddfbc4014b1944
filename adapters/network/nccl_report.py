"""Error report of the analytical network model against real NCCL measurements.

    python -m cosim.adapters.network.nccl_report --data ../shared/data/vidur --out docs/network-nccl.md

Reads Vidur's ``profiling/network/<sku>/{all_reduce,send_recv}.csv`` (median
kernel time, ms), times every configuration with :class:`.model.NetworkModel`
on the topology of :func:`.nccl_calibration.session_spec` (the same code the
backend serves, called in-process for speed), and writes a Markdown report:
mean absolute percentage error per configuration for messages >= 1 MiB (the
target is <= 15%), and the efficiency parameters used. ``--fit`` refits the
parameters first and prints them in the form of ``PARAMETERS``.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from cosim.v1 import network_service_pb2 as net_pb

from .model import NetworkModel
from .nccl_calibration import PARAMETERS, SKUS, Efficiency, Key, level_keys, session_spec

log = logging.getLogger(__name__)

MIN_BYTES = 1 << 20
TARGET_MAPE = 0.15
OPERATIONS = ("all_reduce", "send_recv")


@dataclasses.dataclass
class Config:
    """Measurements of one (sku, operation, num_workers, devices_per_node)."""

    sku: str
    operation: str
    num_workers: int
    devices_per_node: int
    sizes: np.ndarray
    times_ns: np.ndarray

    @property
    def level(self) -> str:
        domain = min(self.devices_per_node, SKUS[self.sku].nvlink_domain)
        return "intra" if self.num_workers <= domain else "inter"

    @property
    def label(self) -> str:
        return f"{self.sku} {self.operation} {self.num_workers}x{self.devices_per_node}"


def load_configs(data: Path) -> list[Config]:
    """Reads every known SKU's CSVs under ``data/profiling/network``."""
    configs = []
    for sku in SKUS:
        for operation in OPERATIONS:
            path = data / "profiling" / "network" / sku / f"{operation}.csv"
            if not path.exists():
                continue
            groups: dict[tuple[int, int], list[tuple[int, float]]] = {}
            with path.open() as f:
                for row in csv.DictReader(f):
                    key = (int(row["num_workers"]), int(row["devices_per_node"]))
                    ms = float(row[f"time_stats.{operation}.median"])
                    groups.setdefault(key, []).append((int(row["size"]), ms * 1e6))
            for (workers, per_node), rows in sorted(groups.items()):
                rows.sort()
                configs.append(Config(sku, operation, workers, per_node,
                                      np.array([r[0] for r in rows]), np.array([r[1] for r in rows])))
    return configs


def predict_ns(config: Config, params: dict[Key, Efficiency]) -> np.ndarray:
    """Model times of every size of ``config``."""
    model = NetworkModel(session_spec(SKUS[config.sku], config.num_workers, config.devices_per_node,
                                      config.operation, params))
    if config.operation == "all_reduce":
        return np.array([model.collective_ns(net_pb.COLLECTIVE_KIND_ALL_REDUCE, int(s), "all") for s in config.sizes])
    return np.array([model.transfer_ns("src", "dst", int(s), 1) for s in config.sizes])


def relative_errors(config: Config, params: dict[Key, Efficiency]) -> np.ndarray:
    """|model - measured| / measured for sizes >= 1 MiB."""
    keep = config.sizes >= MIN_BYTES
    sub = dataclasses.replace(config, sizes=config.sizes[keep], times_ns=config.times_ns[keep])
    return np.abs(predict_ns(sub, params) - sub.times_ns) / sub.times_ns


def _residuals(x: np.ndarray, params: dict[Key, Efficiency], key: Key, chosen: Sequence[Config]) -> np.ndarray:
    """Relative errors of every fourth size >= 1 MiB of ``chosen``, with ``key`` at (efficiency, latency) ``x``."""
    trial = dict(params)
    trial[key] = Efficiency(float(x[0]), float(x[1]))
    out = []
    for one in chosen:
        keep = one.sizes >= MIN_BYTES
        sub = dataclasses.replace(one, sizes=one.sizes[keep][::4], times_ns=one.times_ns[keep][::4])
        out.append((predict_ns(sub, trial) - sub.times_ns) / sub.times_ns)
    return np.concatenate(out)


def fit(configs: Sequence[Config]) -> dict[Key, Efficiency]:
    """Fits (efficiency, latency) per (sku, operation, level, shape): one-domain
    shapes first, then the inter level of the others with intra fixed,
    minimizing the relative squared error of sizes >= 1 MiB."""
    from scipy.optimize import least_squares  # only fitting needs scipy

    params = dict(PARAMETERS)
    for level in ("intra", "inter"):
        for c in configs:
            if c.level != level:
                continue
            key = level_keys(SKUS[c.sku], c.num_workers, c.devices_per_node, c.operation)[level]
            start = params.get(key, Efficiency(0.7, 500.0))
            result = least_squares(_residuals, [start.efficiency, start.latency_ns], args=(params, key, [c]),
                                   bounds=([0.01, 0.0], [1.5, 1e6]), x_scale=[0.1, 1000.0], diff_step=[1e-3, 1e-2],
                                   loss="soft_l1", f_scale=0.02)
            params[key] = Efficiency(round(float(result.x[0]), 3), round(float(result.x[1]), -1))
            log.info("fitted %s: %s", key, params[key])
    return params


def render(configs: Sequence[Config], params: dict[Key, Efficiency]) -> tuple[str, float]:
    """The Markdown report and the mean error over every measurement >= 1 MiB."""
    lines = [
        "# Network model vs NCCL measurements (Vidur profiling data)",
        "",
        "Generated by `python -m cosim.adapters.network.nccl_report --data ../shared/data/vidur "
        "--out docs/network-nccl.md`; do not edit by hand.",
        "",
        "Each configuration of `profiling/network/<sku>/{all_reduce,send_recv}.csv` (median NCCL kernel "
        "time) is timed by the congestion-unaware model (`NetworkModel`, the code the backend serves) on "
        "the topology of `nccl_calibration.session_spec`: NVLink domains (dimension 0) joined by "
        "InfiniBand or PCIe (dimension 1, a switch); all-reduce is ring per dimension with localBWAware, "
        "reductions cost 3 passes over local memory; send/recv is one point-to-point transfer. "
        f"Errors are mean absolute percentage errors over messages >= {MIN_BYTES >> 20} MiB; the target "
        f"is <= {TARGET_MAPE:.0%} over all measurements; configurations above it are marked and explained "
        "below.",
        "",
        "## Errors",
        "",
        "| configuration (ranks x ranks per node) | level | sizes >= 1 MiB | mean error | max error |",
        "| --- | --- | --- | --- | --- |",
    ]
    worst = 0.0
    all_errors = []
    for c in configs:
        err = relative_errors(c, params)
        worst = max(worst, float(err.mean()))
        all_errors.append(err)
        mark = " (above target)" if err.mean() > TARGET_MAPE else ""
        lines.append(f"| {c.label} | {c.level} | {len(err)} | {err.mean():.1%}{mark} | {err.max():.1%} |")
    pooled = np.concatenate(all_errors)
    lines += ["", f"**Over all {len(pooled)} measurements >= 1 MiB: mean error {pooled.mean():.1%}** "
              f"(target <= {TARGET_MAPE:.0%}); worst configuration {worst:.1%}.", "",
              "Where the model cannot follow: the time of a shape is linear in size in the model (a step "
              "cost plus bytes over bandwidth), so a measurement whose throughput changes with size misses. "
              "`*_pairwise_nvlink send_recv 2x1` (PCIe between NVLink pairs; the two files are byte-identical "
              "upstream) run at ~7.5 GB/s up to 4 MiB and ~2.5 GB/s above; `a100_dgx all_reduce 4x2` and "
              "`16x8` change NCCL algorithm near 16 MiB (the time jumps 2.3x between 15 and 19 MiB).", "",
              "## Efficiency parameters", "",
              "Model bandwidth = nominal x efficiency; latency is per hop (a switch step is two hops). "
              "Fitted with `--fit` (least squares on relative error, sizes >= 1 MiB) and committed in "
              "`adapters/network/nccl_calibration.py`.", "",
              "| node SKU | operation | level | shape | nominal GB/s | efficiency | latency per hop (ns) |",
              "| --- | --- | --- | --- | --- | --- | --- |"]
    for (sku, operation, level, shape), p in sorted(params.items()):
        nominal = SKUS[sku].intra_gbps if level == "intra" else SKUS[sku].inter_gbps
        lines.append(f"| {sku} | {operation} | {level} | {shape} | {nominal:g} | {p.efficiency:.3f} | "
                     f"{p.latency_ns:.0f} |")
    lines += ["", "Efficiencies above 1 mean the nominal figure is conservative (the NVLink bridge pairs "
              "move ~350 GB/s one way); the A40 pair (`a40_pairwise_nvlink 2x2`) runs at ~4 GB/s, so its "
              "traffic does not use NVLink.", "", "## Node SKUs", ""]
    lines += [f"- `{s.name}`: {s.note}; local memory {s.local_mem_gbps:g} GB/s." for s in SKUS.values()]
    return "\n".join(lines) + "\n", float(pooled.mean())


def main(argv: Sequence[str] | None = None) -> int:
    """Writes the report; exits 1 when a configuration misses the target."""
    parser = argparse.ArgumentParser(prog="python -m cosim.adapters.network.nccl_report", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, required=True, help="the vidur data folder")
    parser.add_argument("--out", type=Path, help="Markdown file to write (default: stdout)")
    parser.add_argument("--fit", action="store_true", help="refit the parameters and print them")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    configs = load_configs(args.data)
    if not configs:
        log.error("no NCCL measurements under %s/profiling/network", args.data)
        return 2
    params = fit(configs) if args.fit else dict(PARAMETERS)
    if args.fit:
        body = "\n".join(f"    {k!r}: Efficiency({v.efficiency}, {v.latency_ns}),"
                         for k, v in sorted(params.items()))
        log.info("PARAMETERS = {\n%s\n}", body)
    text, mean_error = render(configs, params)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
        log.info("wrote %s (mean error %.1f%%)", args.out, mean_error * 100)
    else:
        sys.stdout.write(text)
    return 0 if mean_error <= TARGET_MAPE else 1


if __name__ == "__main__":
    sys.exit(main())
