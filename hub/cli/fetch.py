"""``cosim fetch RUN_ID --hub HOST:PORT [-o DIR]``: a hub run's folder, fetched after the fact.

For a run whose ``cosim submit`` went away (Ctrl-C, a lost connection, a
closed laptop): the hub keeps every run's folder, partial ones included, and
``GetReport`` returns its files; they are written as ``cosim submit`` writes
them (:func:`cosim.hub.service.report_files.write_report`: inside the folder only).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .connection import add_hub_client_arguments


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "fetch", help="fetch the run folder of a run on a hub (cosim submit prints its run id)",
        description="Fetch the run folder of a run on a hub by its run id, finished, failed or interrupted.")
    parser.add_argument("run_id", metavar="RUN_ID", help="the run id cosim submit printed")
    parser.add_argument("--hub", default="127.0.0.1:50050", help="hub address host:port (default: %(default)s)")
    parser.add_argument("-o", "--output", help="run folder (default: runs/RUN_ID)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace the files of a local run folder that exists and is not empty (else refused)")
    add_hub_client_arguments(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    import grpc

    from cosim.v1 import hub_service_pb2 as hub_pb
    from cosim.v1 import hub_service_pb2_grpc as hub_grpc

    from ..metrics import format_table
    from ..service.auth import hub_channel, read_token
    from ..service.report_files import write_report
    from ..service.server import MESSAGE_OPTIONS
    from ..studies.provenance import check_run_folder

    out = Path(args.output or Path("runs") / args.run_id)
    check_run_folder(out, overwrite=args.overwrite)  # before asking the hub for what may be a large folder
    with hub_channel(args.hub, tls_ca=args.tls_ca, token=read_token(args.token_file),
                     options=MESSAGE_OPTIONS) as channel:
        try:
            report = hub_grpc.HubServiceStub(channel).GetReport(hub_pb.GetReportRequest(run_id=args.run_id),
                                                                 timeout=120)
        except grpc.RpcError as err:
            if err.code() == grpc.StatusCode.UNAVAILABLE:
                print(f"error: cannot reach the hub at {args.hub}: {err.details()}", file=sys.stderr)
            elif err.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.FAILED_PRECONDITION):
                print(f"error: {err.details()}", file=sys.stderr)
            else:
                print(f"error: the hub at {args.hub} answered {err.code().name}: {err.details()}", file=sys.stderr)
            return 1
    if not report.files:
        print(f"error: run {args.run_id} on {args.hub} has no files yet; try again when it ends", file=sys.stderr)
        return 1
    write_report(out, report.files)
    summary = json.loads(report.files["summary.json"]) if "summary.json" in report.files else {}
    if summary:
        print(format_table(summary))
    if summary.get("error"):
        print(f"run {args.run_id} failed: {summary['error']}", file=sys.stderr)
    print(f"run {args.run_id} from {args.hub}; run folder: {out}")
    return 0
