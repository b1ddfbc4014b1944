"""HERMES Fig. 9 with cosim: six embedder/hardware configurations of one RAG pipeline.

    python examples/multistage/hermes_rag.py [-o runs/hermes-rag]

Runs hermes-rag.yaml under each configuration, prints the mean latency
breakdown (embedding, embedding transfer, retrieval, communication, prefill,
decode, queue) and writes breakdown.png. HERMES ranks the configurations, by
end-to-end latency: E5 A100 < E5 Large CPU < Mistral-7B A100 < E5 Small CPU <
Mistral-7B Large CPU < Mistral-7B Small CPU.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import cosim
from cosim.hub.metrics import plot_breakdown, stage_breakdown

CONFIG = Path(__file__).with_name("hermes-rag.yaml")
CPU = ["clients[0].backend=cpu"]
# (label, overrides of hermes-rag.yaml): embedder, where it runs, and where the index is searched.
VARIANTS = {
    "E5_Base A100": [],
    "E5_Base Large CPU": CPU + ["clients[0].hardware.device=large-cpu"],
    "Mistral_7B A100": ["clients[0].model=mistral"],
    "E5_Base Small CPU": CPU + ["clients[0].hardware.device=small-cpu", "clients[0].rag.retrieval_device=small-cpu"],
    "Mistral_7B Large CPU": CPU + ["clients[0].model=mistral", "clients[0].hardware.device=large-cpu"],
    "Mistral_7B Small CPU": CPU + ["clients[0].model=mistral", "clients[0].hardware.device=small-cpu",
                                   "clients[0].rag.retrieval_device=small-cpu"],
}
PAPER_ORDER = list(VARIANTS)  # HERMES Fig. 9, fastest first


def run_variants(requests: int | None = None) -> dict[str, dict[str, float]]:
    """Mean latency breakdown (seconds per component) of each configuration."""
    extra = [f"workload.requests={requests}"] if requests else []
    return {label: stage_breakdown(cosim.run(CONFIG, overrides=[*overrides, *extra, "output.dir=null"]).requests)
            for label, overrides in VARIANTS.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-o", "--output", default="runs/hermes-rag", help="folder for breakdown.png")
    parser.add_argument("--requests", type=int, help="requests per configuration (default: the config's)")
    args = parser.parse_args()
    breakdowns = run_variants(args.requests)
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    plot_breakdown(out / "breakdown.png", breakdowns, title="HERMES Fig. 9 with cosim: RAG latency breakdown")
    components = list(next(iter(breakdowns.values())))
    print(f"{'configuration':<22}" + "".join(f"{c:>20}" for c in components) + f"{'total':>10}")
    for label, parts in sorted(breakdowns.items(), key=lambda item: sum(item[1].values())):
        print(f"{label:<22}" + "".join(f"{parts.get(c, 0.0):>20.4f}" for c in components)
              + f"{sum(parts.values()):>10.3f}")
    print(f"chart: {out / 'breakdown.png'}")


if __name__ == "__main__":
    main()
