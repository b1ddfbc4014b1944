"""``cosim presets [models|devices]``: every model and device preset, with its source.

Lists the built-in presets (``hub/config/presets/*.yaml``) and, with ``--config`` or
``--presets``, a scenario's own (its ``presets:`` file and ``hf_config:``
models), each with where its figures come from. ``-s`` prints the source of
every figure of a device, not only its peak's, and which fitted family the
roofline backend times it with.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..config.presets import DevicePreset, ModelPreset
    from ..config.presets.user import UserPresets


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "presets", help="list model and device presets with their sources",
        description="List every model and device preset (built in, or a scenario's own) and its source.")
    parser.add_argument("kind", nargs="?", choices=("models", "devices"), help="only models or only devices")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--config", help="also list this scenario's presets: file and hf_config: models")
    group.add_argument("--presets", help="also list the presets in this file (models: and devices: lists)")
    parser.add_argument("-s", "--sources", action="store_true", help="the source of every device figure")
    parser.set_defaults(handler=presets_command)


def _gb(n: float) -> str:
    return f"{n / 1e9:.1f}B"


def model_rows(models: list[tuple[ModelPreset, str]]) -> list[str]:
    """One line per model: name, family, parameters, layers, heads, experts, origin and source."""
    rows = [f"{'model':<40} {'family':<12} {'params':>8} {'layers':>6} {'heads q/kv':>10} {'experts':>8}  origin"]
    for model, origin in models:
        params = model.num_params or model.param_count()
        experts = f"{model.experts_per_token}/{model.num_experts}" if model.is_moe else "-"
        rows.append(f"{model.name:<40} {model.family:<12} {_gb(params):>8} {model.num_layers:>6} "
                    f"{f'{model.num_attention_heads}/{model.num_kv_heads}':>10} {experts:>8}  {origin}")
        rows.append(f"    source: {model.source}")
    return rows


def device_rows(devices: list[tuple[DevicePreset, str]], every_source: bool) -> list[str]:
    """One line per device: name, bf16/fp16 peak, memory, bandwidth, link, origin; then its sources."""
    rows = [f"{'device':<22} {'kind':<4} {'TFLOP/s':>8} {'mem GiB':>8} {'mem GB/s':>9} {'link GB/s':>9}  origin"]
    for device, origin in devices:
        peak = device.peak_tflops.get("bf16") or device.peak_tflops.get("fp16") or max(device.peak_tflops.values())
        rows.append(f"{device.name:<22} {device.kind:<4} {peak:>8g} {device.mem_capacity_gib:>8g} "
                    f"{device.mem_bandwidth_gbps:>9g} {device.intra_node_gbps:>9g}  {origin}")
        shown = device.sources.items() if every_source else [("peak_tflops", device.sources["peak_tflops"])]
        rows += [f"    {field}: {text}" for field, text in shown]
        if every_source:
            rows.append(f"    roofline: {_roofline_family(device.name)}")
    return rows


def _roofline_family(device: str) -> str:
    """Which fitted parameters the roofline backend's default profile times ``device`` with."""
    from cosim.adapters.roofline.fitted import family_of  # lazy: data only, read when asked

    family, basis = family_of(device)
    return {"measured": f"fitted family {family}, measured on this device",
            "family": f"fitted family {family} (measured on other {family} devices) over this device's peaks",
            "bestserve": f"{family}: BestServe's parameters (profile: bestserve)",
            "generic": "generic fit (every measured GPU pooled) over this device's peaks: no family data"}[basis]


def presets_command(args: argparse.Namespace) -> int:
    from ..config import presets
    from ..config.loading import load_config
    from ..config.presets.user import UserPresets, inline_files
    from ..config.resolve import resolve_model
    from ..errors import ScenarioError

    models: list[tuple[ModelPreset, str]] = [(m, "built-in") for m in presets.builtin_models()]
    devices: list[tuple[DevicePreset, str]] = [(d, "built-in") for d in presets.builtin_devices()]
    own: UserPresets | None = None
    if args.presets:
        data: dict[str, Any] = {"presets": Path(args.presets).name}
        problems = inline_files(data, Path(args.presets).resolve().parent)
        if problems:
            raise ScenarioError(args.presets, problems[0][1])
        try:
            own = UserPresets.model_validate(data["presets"])
        except ValueError as err:
            raise ScenarioError(args.presets, str(err)) from None
    if args.config:
        config, _ = load_config(args.config)
        own = config.presets
        for name, entry in config.models.items():
            if entry.hf_config is not None:
                models.append((resolve_model(config, name), f"{args.config}: models.{name}.hf_config"))
    if own is not None:
        models += [(m, own.file or "presets") for m in own.models]
        devices += [(d, own.file or "presets") for d in own.devices]
    rows: list[str] = []
    if args.kind in (None, "models"):
        rows += model_rows(models)
    if args.kind is None:
        rows.append("")
    if args.kind in (None, "devices"):
        rows += device_rows(devices, args.sources)
    print("\n".join(rows))
    return 0
