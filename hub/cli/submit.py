"""``cosim submit CONFIG --hub HOST:PORT``: runs a config on a running hub.

Uploads the local files the config names (traces, presets, hf_config; see
:mod:`cosim.hub.uploads`), streams the hub's progress, then fetches the run
folder (GetReport) and writes it locally, so the result looks like ``cosim run``'s. A failed run
still brings back its partial folder (summary.json carries the error).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

# What one RunRequest may carry: the hub's gRPC message limit (server.MESSAGE_OPTIONS), less room for the config.
MAX_REQUEST_BYTES = (512 << 20) - (1 << 20)


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "submit", help="run a scenario on a running hub (cosim hub) and fetch its run folder",
        description="Send a scenario config to a hub, stream its progress, and write the run folder locally.")
    parser.add_argument("config", help="scenario YAML file")
    parser.add_argument("--hub", default="127.0.0.1:50050", help="hub address host:port (default: %(default)s)")
    parser.add_argument("-o", "--output", help="run folder (default: output.dir of the config, else runs/RUN_ID)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config field, e.g. --set workload.requests=100")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace the files of a local run folder that exists and is not empty (else refused)")
    parser.add_argument("--no-upload", action="store_true",
                        help="send no local files: trace, presets and hf_config paths resolve in the hub's --data-dir")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(handler=run)


def local_files(text: str, overrides: list[str], folder: Path) -> dict[str, bytes]:
    """The files the config (after ``overrides``) names that exist here, by path as written."""
    import yaml

    from ..config import apply_override
    from ..uploads import collect_uploads

    data = yaml.safe_load(text)
    for assignment in overrides:
        apply_override(data, assignment)
    return collect_uploads(data, folder)


def run(args: argparse.Namespace) -> int:
    import grpc

    from cosim.v1 import hub_service_pb2 as hub_pb
    from cosim.v1 import hub_service_pb2_grpc as hub_grpc

    from ..config import load_config
    from ..metrics import ProgressBar, format_table
    from ..provenance import check_run_folder
    from ..server import MESSAGE_OPTIONS, summary_of

    path = Path(args.config)
    config, folder = load_config(path, overrides=args.overrides)  # fail fast, before reaching the hub
    if args.output or config.output.dir:  # (a default runs/RUN_ID folder is new)
        check_run_folder(args.output or str(config.output.dir), overwrite=args.overwrite)
    text = path.read_text(encoding="utf-8")
    files = {} if args.no_upload else local_files(text, args.overrides, folder)
    if sum(map(len, files.values())) > MAX_REQUEST_BYTES:
        print(f"error: the local files this config names ({', '.join(files)}) exceed what one request carries "
              f"({MAX_REQUEST_BYTES >> 20} MiB); place them in the hub's --data-dir and submit with --no-upload",
              file=sys.stderr)
        return 2
    request = hub_pb.RunRequest(config_yaml=text, overrides=args.overrides, files=files)
    last = hub_pb.RunUpdate()
    failure: grpc.RpcError | None = None
    with grpc.insecure_channel(args.hub, options=MESSAGE_OPTIONS) as channel:
        stub = hub_grpc.HubServiceStub(channel)
        bar = ProgressBar(config.workload.requests, enabled=False if args.no_progress else None)
        try:
            for update in stub.Run(request, wait_for_ready=False):
                last = update
                bar.update(update.completed_requests, update.sim_time_ns)
        except grpc.RpcError as err:
            failure = err
        finally:
            bar.close()
        if not last.run_id:  # the hub refused the run, or could not be reached
            assert failure is not None
            code = failure.code()
            if code == grpc.StatusCode.UNAVAILABLE:
                print(f"error: cannot reach the hub at {args.hub}: {failure.details()}", file=sys.stderr)
                return 1
            print(f"error: {failure.details()}", file=sys.stderr)
            return 2 if code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED) else 1
        out = Path(args.output or config.output.dir or Path("runs") / last.run_id)
        try:
            report = stub.GetReport(hub_pb.GetReportRequest(run_id=last.run_id), timeout=120)
        except grpc.RpcError as err:
            report = None
            print(f"warning: could not fetch run {last.run_id}: {err.details()}", file=sys.stderr)
    if report is not None and report.files:
        for name, content in report.files.items():
            target = out / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
    if failure is not None or last.error:
        message = last.error or failure.details()  # type: ignore[union-attr]
        print(f"error: run {last.run_id} failed: {message}", file=sys.stderr)
        if report is not None and report.files:
            print(f"partial run folder: {out}", file=sys.stderr)
        return 1
    print(format_table(summary_of(last)))
    print(f"run {last.run_id} on {args.hub}; run folder: {out}")
    return 0
