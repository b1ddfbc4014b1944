"""``cosim submit CONFIG --hub HOST:PORT``: runs a config on a running hub.

Uploads the local files the config names (traces, presets, hf_config; see
:mod:`cosim.hub.service.uploads`), streams the hub's progress, then fetches the run
folder (GetReport) and writes it locally, so the result looks like ``cosim run``'s. A failed run
still brings back its partial folder (summary.json carries the error).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .connection import add_hub_client_arguments

# Most a RunRequest carries at all; a hub receives less (its --max-upload-mb + 5 MiB) and says so.
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
    add_hub_client_arguments(parser)
    parser.set_defaults(handler=run)


def local_files(text: str, overrides: list[str], folder: Path) -> dict[str, bytes]:
    """The files the config (after ``overrides``) names that exist here, by path as written."""
    from ..config.loading import apply_override
    from ..config.safe_yaml import load
    from ..service.uploads import collect_uploads

    data = load(text)
    for assignment in overrides:
        apply_override(data, assignment)
    return collect_uploads(data, folder)


def interrupted_message(run_id: str, hub: str, output: str | Path | None) -> str:
    """What to tell a user who interrupted ``cosim submit``: the run id, and how to get its folder."""
    if not run_id:
        return f"interrupted before the hub at {hub} named the run; it stops whatever it started for it"
    target = f" -o {output}" if output else ""
    return (f"interrupted: the hub at {hub} stops run {run_id} and keeps its partial run folder; fetch it with\n"
            f"  cosim fetch {run_id} --hub {hub}{target}")


def run(args: argparse.Namespace) -> int:
    import grpc

    from cosim.v1 import hub_service_pb2 as hub_pb
    from cosim.v1 import hub_service_pb2_grpc as hub_grpc

    from ..config.loading import load_config
    from ..errors import ScenarioError
    from ..metrics import ProgressBar, format_table
    from ..service.auth import hub_channel, read_token
    from ..service.report_files import check_run_id, write_report
    from ..service.server import MESSAGE_OPTIONS, summary_of
    from ..studies.interrupts import exit_code
    from ..studies.provenance import check_run_folder

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
    token = read_token(args.token_file)
    with hub_channel(args.hub, tls_ca=args.tls_ca, token=token, options=MESSAGE_OPTIONS) as channel:
        stub = hub_grpc.HubServiceStub(channel)
        bar: ProgressBar | None = None
        try:
            for update in stub.Run(request, wait_for_ready=False):
                if bar is None:  # the first update names the run: say it first, so it is known come what may
                    print(f"run {update.run_id} on {args.hub}", flush=True)
                    bar = ProgressBar(config.workload.num_requests, enabled=False if args.no_progress else None)
                last = update
                bar.update(update.completed_requests, update.sim_time_ns)
        except grpc.RpcError as err:
            failure = err
        except KeyboardInterrupt as stop:  # Ctrl-C or SIGTERM: the hub stops the run when this call goes away
            if bar is not None:
                bar.close()
            print(interrupted_message(last.run_id, args.hub, args.output or config.output.dir), file=sys.stderr)
            return exit_code(stop)
        finally:
            if bar is not None:
                bar.close()
        if not last.run_id:  # the hub refused the run, or could not be reached
            assert failure is not None
            code = failure.code()
            if code == grpc.StatusCode.UNAVAILABLE:
                print(f"error: cannot reach the hub at {args.hub}: {failure.details()}", file=sys.stderr)
                return 1
            hint = ""
            if code == grpc.StatusCode.RESOURCE_EXHAUSTED and "larger than max" in (failure.details() or ""):
                hint = " (the config and its uploaded files exceed what this hub receives: cosim hub --max-upload-mb)"
            print(f"error: {failure.details()}{hint}", file=sys.stderr)
            return 2 if code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED) else 1
        out = Path(args.output or config.output.dir or Path("runs") / check_run_id(last.run_id))
        try:
            report = stub.GetReport(hub_pb.GetReportRequest(run_id=last.run_id), timeout=120)
        except grpc.RpcError as err:
            report = None
            print(f"warning: could not fetch run {last.run_id}: {err.details()}", file=sys.stderr)
    if report is not None and report.files:
        try:
            write_report(out, report.files)  # inside `out` only: the hub names the files
        except ScenarioError as err:
            print(f"error: {err}", file=sys.stderr)
            return 1
    if failure is not None or last.error:
        message = last.error or failure.details()  # type: ignore[union-attr]
        print(f"error: run {last.run_id} failed: {message}", file=sys.stderr)
        if report is not None and report.files:
            print(f"partial run folder: {out}", file=sys.stderr)
        return 1
    print(format_table(summary_of(last)))
    print(f"run {last.run_id} on {args.hub}; run folder: {out}")
    return 0
