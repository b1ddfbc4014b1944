"""A submitted config is untrusted input (issue 23, Security): each reproducer gets a named refusal.

Most checks run ``HubServicer.prepare`` (what ``Run`` does first); those that need the wire (message
limits, concurrent runs, ports, token, TLS, ``cosim submit``) run a real hub on loopback.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc

from cosim.hub.cli import main as cli_main
from cosim.hub.config import safe_yaml
from cosim.hub.config.loading import load_config
from cosim.hub.config.safe_yaml import MAX_DEPTH
from cosim.hub.errors import ScenarioError
from cosim.hub.service.auth import hub_channel, read_token, server_credentials
from cosim.hub.service.backend_registry import BackendRegistry
from cosim.hub.service.report_files import check_run_id, write_report
from cosim.hub.service.server import HubServer, HubServicer, prune_runs
from cosim.hub.service.submitted import FILE_OPTIONS, SubmitPolicy
from cosim.v1 import hub_service_pb2 as hub_pb
from cosim.v1 import hub_service_pb2_grpc as hub_grpc
from tests.contract.test_hub_service import LINEAR, scenario
from tests.paths import REPO
from tests.waiting import wait_until

ALLOW_PYTHON = SubmitPolicy(allow_python=True)

# 9 levels of 9 aliases: 9^9 "lol"s once expanded (the 723-byte bomb, under backends.*.options).
BOMB_ENTRIES = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"] + [
    f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
BOMB = "\n".join(f"      {entry}" for entry in BOMB_ENTRIES)


def request(config: dict[str, Any] | str, *overrides: str, files: dict[str, bytes] | None = None) -> hub_pb.RunRequest:
    text = config if isinstance(config, str) else yaml.safe_dump(config)
    return hub_pb.RunRequest(config_yaml=text, overrides=list(overrides), files=files or {})


def refusal(servicer: HubServicer, req: hub_pb.RunRequest) -> str:
    """The ScenarioError ``prepare`` raises, as ``Run`` would send it."""
    with pytest.raises(ScenarioError) as err:
        servicer.prepare(req, servicer.runs_dir / "uploads")
    return str(err.value)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "data"
    (folder / "traces").mkdir(parents=True)
    (folder / "traces" / "ok.csv").write_text("arrival_s,input,output\n" + "".join(
        f"{i * 0.01:.2f},{50 + i},{4}\n" for i in range(20)))
    return folder


@pytest.fixture
def servicer(tmp_path: Path, data_dir: Path) -> HubServicer:
    return HubServicer(tmp_path / "runs", data_dir=data_dir)


def trace_config(path: str) -> dict[str, Any]:
    config = scenario({"kind": "roofline"})
    config["workload"] = {"trace": {"path": path, "format": "csv", "arrival_column": "arrival_s",
                                    "input_column": "input", "output_column": "output"},
                          "arrival": {"process": "trace"}, "input_tokens": {"dist": "trace"},
                          "output_tokens": {"dist": "trace"}}
    return config


# -- backends that launch, import or connect; options that name files -----------------------------------------


@pytest.mark.parametrize("option, value", [("binary", "/bin/sh"), ("extra_args", ["-c", "id"])])
def test_astrasim_binary_and_arguments_are_refused(servicer: HubServicer, option: str, value: Any) -> None:
    config = scenario({"kind": "roofline"})
    config["backends"]["net"] = {"kind": "astrasim", "options": {option: value}}
    assert refusal(servicer, request(config)).startswith(f"backends.net.options.{option}: names an executable")


def test_file_options_are_refused_for_registered_backends_too(tmp_path: Path, data_dir: Path) -> None:
    """A registered astrasim service would run the binary as well: the option is refused whatever the entry."""
    servicer = HubServicer(tmp_path / "runs", data_dir=data_dir,
                           registry=BackendRegistry({"astrasim": "astrasim:50051"}))
    config = scenario({"kind": "roofline"})
    config["backends"]["net"] = {"kind": "astrasim", "options": {"binary": "/tmp/x"}}
    assert "backends.net.options.binary" in refusal(servicer, request(config))


@pytest.mark.parametrize("options, key", [
    ({"artifact": "/etc/passwd"}, "artifact"),
    ({"profile_bundle": "bundles/x"}, "profile_bundle"),
    ({"profile": "../../secret.yaml"}, "profile"),
    ({"profile": "mine.yaml"}, "profile"),
    ({"step_ns": 1, "note": "/etc/shadow"}, "note"),  # any option whose value is a path by its form
    ({"nested": {"deep": ["~/.ssh/id_rsa"]}}, "nested"),
])
def test_options_naming_files_are_refused_naming_the_option(servicer: HubServicer, options: dict[str, Any],
                                                             key: str) -> None:
    config = scenario({"kind": "roofline"})
    config["backends"]["lin"]["options"] = options
    message = refusal(servicer, request(config))
    assert message.startswith(f"backends.lin.options.{key}:") and "--allow-backend-files" in message


def test_plain_profile_names_and_allowed_files_pass(tmp_path: Path, data_dir: Path, servicer: HubServicer) -> None:
    config = scenario({"kind": "roofline"})
    config["backends"]["lin"]["options"] = {"profile": "auto"}
    servicer.prepare(request(config))
    config["backends"]["lin"]["options"] = {"profile": "/somewhere/mine.yaml"}
    trusting = HubServicer(tmp_path / "runs", data_dir=data_dir, policy=SubmitPolicy(allow_backend_files=True))
    trusting.prepare(request(config))


def test_the_hub_list_of_file_options_matches_what_backends_declare() -> None:
    from cosim.adapters.astrasim import AstraSimBackend
    from cosim.adapters.regression import RegressionBackend
    from cosim.adapters.roofline import RooflineBackend

    declared = {"astrasim": AstraSimBackend.file_options, "regression": RegressionBackend.file_options,
                "roofline": RooflineBackend.file_options}
    assert declared == FILE_OPTIONS


def test_python_backends_are_refused_before_their_module_is_imported(tmp_path: Path, data_dir: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    marker = tmp_path / "imported"
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "cosim_canary_mod.py").write_text(f"open({str(marker)!r}, 'w').close()\nclass X: pass\n")
    monkeypatch.syspath_prepend(str(tmp_path / "mods"))
    config = scenario({"python": "cosim_canary_mod:X"})
    with HubServer(HubServicer(tmp_path / "runs", data_dir=data_dir)) as hub, \
            grpc.insecure_channel(hub.address) as channel, pytest.raises(grpc.RpcError) as err:
        list(hub_grpc.HubServiceStub(channel).Run(request(config), timeout=60))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.details().startswith("backends.lin.python: ") and "--allow-python" in err.value.details()
    assert not marker.exists() and "cosim_canary_mod" not in sys.modules


def test_address_backends_are_refused_unless_registered_or_allowed(tmp_path: Path, data_dir: Path,
                                                                   servicer: HubServicer) -> None:
    config = scenario({"address": "10.0.0.1:22"})
    message = refusal(servicer, request(config))
    assert message.startswith("backends.lin.address: ") and "--allow-address" in message
    registered = HubServicer(tmp_path / "runs", data_dir=data_dir, registry=BackendRegistry({"lin": "lab:7000"}))
    assert registered.prepare(request(config)).backends["lin"].address == "lab:7000"
    allowed = HubServicer(tmp_path / "runs", data_dir=data_dir, policy=SubmitPolicy(allow_address=True))
    assert allowed.prepare(request(config)).backends["lin"].address == "10.0.0.1:22"


def test_python_backends_pass_when_allowed_or_registered(tmp_path: Path, data_dir: Path) -> None:
    config = scenario({"python": LINEAR})
    HubServicer(tmp_path / "runs", data_dir=data_dir, policy=ALLOW_PYTHON).prepare(request(config))
    registered = HubServicer(tmp_path / "runs", data_dir=data_dir, registry=BackendRegistry({"lin": "lab:7000"}))
    assert registered.prepare(request(config)).backends["lin"].python is None


# -- files: confined to --data-dir, and never quoted from there ---------------------------------------------------


@pytest.mark.parametrize("path, problem", [
    ("/etc/passwd", "is an absolute path"),
    ("../outside.csv", "has a '..' part"),
    ("traces/../../outside.csv", "has a '..' part"),
    ("~/trace.csv", "is relative to a home folder"),
])
def test_trace_paths_outside_the_data_dir_are_refused(servicer: HubServicer, path: str, problem: str) -> None:
    message = refusal(servicer, request(trace_config(path)))
    assert message.startswith(f"workload.trace.path: {path!r} {problem}")


def test_malformed_file_entries_are_named_errors_not_tracebacks(servicer: HubServicer) -> None:
    assert "has a NUL character" in refusal(servicer, request(trace_config("a\0b.csv")))
    for key, value in (("models", [1]), ("workload", [1]), ("presets", 3)):
        config = scenario({"kind": "roofline"})
        config[key] = value
        assert refusal(servicer, request(config)).startswith("config: ")


def test_symlinks_leading_out_of_the_data_dir_are_refused(servicer: HubServicer, data_dir: Path,
                                                          tmp_path: Path) -> None:
    (tmp_path / "secret.csv").write_text("arrival_s,input,output\n1,2,3\n")
    (data_dir / "link.csv").symlink_to(tmp_path / "secret.csv")
    (data_dir / "dir").symlink_to(tmp_path)
    for path in ("link.csv", "dir/secret.csv"):
        assert "resolves outside the hub's --data-dir" in refusal(servicer, request(trace_config(path)))


@pytest.mark.parametrize("key, value, where", [
    ("presets", "/etc/passwd", "presets"),
    ("base_dir", "/", "base_dir"),
    ("base_dir", "..", "base_dir"),
])
def test_other_paths_are_confined_too(servicer: HubServicer, key: str, value: str, where: str) -> None:
    config = scenario({"kind": "roofline"})
    config[key] = value
    assert refusal(servicer, request(config)).startswith(f"{where}: ")


def test_hf_config_outside_the_data_dir_is_refused(servicer: HubServicer) -> None:
    config = scenario({"kind": "roofline"})
    config["models"] = {"m": {"hf_config": "../../config.json"}}
    assert refusal(servicer, request(config)).startswith("models.m.hf_config: '../../config.json' has a '..' part")


def test_confined_and_uploaded_traces_pass(servicer: HubServicer) -> None:
    servicer.prepare(request(trace_config("traces/ok.csv")))
    # An uploaded file may be named as the submitter wrote it: the hub places it itself.
    config = servicer.prepare(request(trace_config("../mine.csv"), files={"../mine.csv": b"arrival_s,input,output\n"
                                                                                       b"0.1,10,2\n"}))
    assert config.workload.trace is not None and Path(config.workload.trace.path).is_absolute()


def run_on_hub(servicer: HubServicer, req: hub_pb.RunRequest) -> tuple[list[hub_pb.RunUpdate], grpc.RpcError | None]:
    updates: list[hub_pb.RunUpdate] = []
    with HubServer(servicer) as hub, grpc.insecure_channel(hub.address) as channel:
        try:
            for update in hub_grpc.HubServiceStub(channel).Run(req, timeout=120):
                updates.append(update)
        except grpc.RpcError as err:
            return updates, err
    return updates, None


def test_trace_errors_on_a_hub_never_quote_the_hubs_files(tmp_path: Path, data_dir: Path) -> None:
    (data_dir / "bad.csv").write_text("arrival_s,input,output\n0.1,SECRET-LINE-2,3\n")
    (data_dir / "cols.csv").write_text("password,hunter2\n1,2\n")
    (data_dir / "short.csv").write_text("arrival_s,input,output\n0.1,PRIVATE\n")
    servicer = HubServicer(tmp_path / "runs", data_dir=data_dir, policy=ALLOW_PYTHON)
    for name, secret in (("bad.csv", "SECRET-LINE-2"), ("cols.csv", "hunter2"), ("short.csv", "arrival_s,input")):
        config = trace_config(name)
        config["backends"] = scenario({"python": LINEAR})["backends"]
        updates, err = run_on_hub(servicer, request(config))
        assert err is not None and err.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert f"{name}:" in err.details()  # names the file and line
        assert secret not in err.details() and all(secret not in u.error for u in updates)


def test_trace_errors_quote_uploaded_files_and_local_runs(tmp_path: Path, data_dir: Path) -> None:
    servicer = HubServicer(tmp_path / "runs", data_dir=data_dir, policy=ALLOW_PYTHON)
    config = trace_config("mine.csv")
    config["backends"] = scenario({"python": LINEAR})["backends"]
    content = b"arrival_s,input,output\n0.1,abc,3\n"
    _, err = run_on_hub(servicer, request(config, files={"mine.csv": content}))
    assert err is not None and "input='abc' is not a number" in err.details()
    (tmp_path / "mine.csv").write_bytes(content)
    (tmp_path / "local.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(ScenarioError, match="input='abc' is not a number"):
        from cosim.hub.studies.runner import run
        run(tmp_path / "local.yaml")


# -- YAML, sizes and counts ---------------------------------------------------------------------------------------


def test_alias_bomb_is_a_named_error_at_once(servicer: HubServicer, tmp_path: Path) -> None:
    text = yaml.safe_dump(scenario({"kind": "roofline"})).replace("options:\n", f"options:\n{BOMB}\n", 1)
    assert len(BOMB) < 723
    started = time.process_time()  # work done, which a busy machine does not stretch (its wall time, it does)
    message = refusal(servicer, request(text))
    assert message.startswith("config: not valid YAML: ") and "aliases expand this document" in message
    (tmp_path / "bomb.yaml").write_text(text)
    with pytest.raises(ScenarioError, match="aliases expand"):
        load_config(tmp_path / "bomb.yaml")
    with pytest.raises(ScenarioError, match=r"--set backends\.lin\.options\.x: not valid YAML: .*aliases expand"):
        servicer.prepare(request(scenario({"kind": "roofline"}),
                                 "backends.lin.options.x={" + ", ".join(BOMB_ENTRIES) + "}"))
    assert time.process_time() - started < 2  # an expansion would take hours


def test_deep_nesting_is_a_named_error_not_a_recursion_error(servicer: HubServicer, tmp_path: Path) -> None:
    text = yaml.safe_dump(scenario({"kind": "roofline"})) + "deep: " + "[" * 400 + "]" * 400 + "\n"
    message = refusal(servicer, request(text))
    assert message.startswith("config: not valid YAML: ") and f"nested deeper than {MAX_DEPTH} levels" in message
    (tmp_path / "deep.yaml").write_text(text)
    with pytest.raises(ScenarioError, match=f"deep.yaml:.*nested deeper than {MAX_DEPTH}"):
        load_config(tmp_path / "deep.yaml")
    deep_set = "deep." + ".".join(f"k{i}" for i in range(400)) + "=1"
    assert refusal(servicer, request(scenario({"kind": "roofline"}), deep_set)).startswith(
        f"config: nested deeper than {MAX_DEPTH} levels")


def test_a_large_config_is_refused_before_it_is_parsed(servicer: HubServicer, monkeypatch: pytest.MonkeyPatch) -> None:
    text = yaml.safe_dump(scenario({"kind": "roofline"})) + "pad: [" + ", ".join(["1"] * 700_000) + "]\n"

    def parse(text: str | bytes) -> Any:
        raise AssertionError("the config was parsed")

    monkeypatch.setattr(safe_yaml, "load", parse)
    assert "exceeds this hub's limit of 1.0 MiB for a config" in refusal(servicer, request(text))


def test_too_many_requests_are_refused_at_prepare(servicer: HubServicer, tmp_path: Path, data_dir: Path) -> None:
    assert "workload.requests: " in refusal(servicer, request(scenario({"kind": "roofline"}),
                                                              "workload.requests=1000000000"))
    message = refusal(servicer, request(scenario({"kind": "roofline"}), "workload.requests=5000000"))
    assert message.startswith("workload.requests: 5,000,000 requests exceed this hub's limit of 1,000,000")
    small = HubServicer(tmp_path / "runs", data_dir=data_dir, policy=SubmitPolicy(max_requests=10))
    # Trace-driven without workload.requests: every row of the trace (20) counts.
    message = refusal(small, request(trace_config("traces/ok.csv")))
    assert message.startswith("workload.requests: unset, so the run would take all 20 rows of traces/ok.csv")
    small.prepare(request(trace_config("traces/ok.csv"), "workload.trace.start_row=12"))
    uploaded = {"up.csv": b"arrival_s,input,output\n" + b"0.1,10,2\n" * 11}
    assert "all 11 rows" in refusal(small, request(trace_config("up.csv"), files=uploaded))


def test_incoming_messages_are_capped_near_the_upload_limit(tmp_path: Path, data_dir: Path) -> None:
    servicer = HubServicer(tmp_path / "runs", data_dir=data_dir, max_upload_bytes=64 << 10)
    assert servicer.receive_limit == (64 << 10) + (5 << 20)
    big = request(trace_config("x.csv"), files={"x.csv": b"0" * (6 << 20)})
    _, err = run_on_hub(servicer, big)
    assert err is not None and err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


# -- runs at once, run folders kept, the port ---------------------------------------------------------------------


def test_runs_beyond_the_limit_are_refused_with_resource_exhausted(tmp_path: Path, data_dir: Path) -> None:
    servicer = HubServicer(tmp_path / "runs", data_dir=data_dir, policy=ALLOW_PYTHON, max_runs=1)
    long = scenario({"python": LINEAR}, requests=20_000)
    long["backends"]["lin"]["cache"] = False
    with HubServer(servicer) as hub, grpc.insecure_channel(hub.address) as channel:
        stub = hub_grpc.HubServiceStub(channel)
        first = stub.Run(request(long), timeout=120)
        next(first)  # running
        with pytest.raises(grpc.RpcError) as err:
            list(stub.Run(request(scenario({"python": LINEAR}, requests=5)), timeout=60))
        first.cancel()
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "limit of 1 runs at once (cosim hub --max-runs)" in err.value.details()
    # The slot comes back when the cancelled run stops.
    wait_until(lambda: servicer._slots.acquire(blocking=False), 120, "the cancelled run's slot")


def test_only_the_newest_run_folders_are_kept(tmp_path: Path, data_dir: Path) -> None:
    runs = tmp_path / "runs"
    old = [f"20240101-00000{i}-0000000{i}" for i in range(4)]
    for run_id in old:
        (runs / run_id).mkdir(parents=True)
    (runs / "notes").mkdir()  # not a run folder: never touched
    assert prune_runs(runs, 3, keep_ids={old[0]}) == old[1:3]
    assert sorted(p.name for p in runs.iterdir()) == [old[0], old[3], "notes"]
    servicer = HubServicer(runs, data_dir=data_dir, policy=ALLOW_PYTHON, keep_runs=2)
    updates, err = run_on_hub(servicer, request(scenario({"python": LINEAR}, requests=5)))
    assert err is None
    assert sorted(p.name for p in runs.iterdir()) == sorted([old[3], updates[0].run_id, "notes"])


def test_a_second_hub_on_a_port_in_use_fails(tmp_path: Path) -> None:
    with HubServer(HubServicer(tmp_path / "a")) as first:
        with pytest.raises(OSError, match=f"cannot listen on 127.0.0.1:{first.port}: the port is in use"):
            HubServer(HubServicer(tmp_path / "b"), port=first.port)
        cli = _cosim("hub", "--port", str(first.port), "--runs-dir", str(tmp_path / "c"), cwd=tmp_path)
    assert cli.returncode == 1 and f"cannot listen on 127.0.0.1:{first.port}: the port is in use" in cli.stderr


def _cosim(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The cosim command as a user types it."""
    return subprocess.run([str(Path(sys.executable).parent / "cosim"), *args], capture_output=True, text=True,
                          timeout=60, cwd=cwd)


def test_a_hub_beyond_loopback_without_a_token_warns(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "COSIM_HUB_TOKEN"}
    proc = subprocess.Popen([str(Path(sys.executable).parent / "cosim"), "hub", "--host", "0.0.0.0", "--port", "0",
                             "--runs-dir", str(tmp_path / "runs")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=tmp_path, env=env)
    try:
        assert proc.stdout is not None and "listening" in proc.stdout.readline()
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert "warning: the hub listens on 0.0.0.0 without a token" in err


# -- cosim submit writes inside -o only ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["../escaped.txt", "/tmp/absolute.txt", "a/../../escaped.txt", "..\\win.txt", ""])
def test_report_names_outside_the_folder_are_refused(tmp_path: Path, name: str) -> None:
    out = tmp_path / "out"
    with pytest.raises(ScenarioError, match="GetReport file"):
        write_report(out, {"summary.json": b"{}", name: b"x"})
    assert not out.exists() and not (tmp_path / "escaped.txt").exists()


def test_report_names_through_a_symlink_are_refused(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "plots").symlink_to(tmp_path)
    with pytest.raises(ScenarioError, match="'plots/x.png'.*symbolic link"):
        write_report(out, {"plots/x.png": b"x"})
    assert not (tmp_path / "x.png").exists()


@pytest.mark.parametrize("run_id", ["..", "../../etc", "a/b", "", "/abs"])
def test_run_ids_that_are_not_folder_names_are_refused(run_id: str) -> None:
    with pytest.raises(ScenarioError, match="is not a plain folder name"):
        check_run_id(run_id)
    assert check_run_id("20250101-000000-deadbeef") == "20250101-000000-deadbeef"


class EvilHub(HubServicer):
    """A hub whose reports name files outside the client's folder."""

    def GetReport(self, request: hub_pb.GetReportRequest, context: grpc.ServicerContext) -> hub_pb.GetReportResponse:
        return hub_pb.GetReportResponse(files={"summary.json": b"{}", "../../pwned.txt": b"owned"})


def test_submit_refuses_a_report_that_escapes_its_folder(tmp_path: Path, data_dir: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "a" / "b" / "scenario.yaml"
    config.parent.mkdir(parents=True)
    config.write_text(yaml.safe_dump(scenario({"python": LINEAR}, requests=5)))
    with HubServer(EvilHub(tmp_path / "runs", data_dir=data_dir, policy=ALLOW_PYTHON)) as hub:
        code = cli_main(["submit", str(config), "--hub", hub.address, "-o", str(tmp_path / "a" / "b" / "out"),
                         "--no-progress"])
    assert code == 1 and "GetReport file '../../pwned.txt'" in capsys.readouterr().err
    assert not list(tmp_path.rglob("pwned.txt")) and not (tmp_path / "a" / "b" / "out" / "summary.json").exists()


class EvilRunIdHub(HubServicer):
    """A hub whose run id points outside ``runs/``."""

    def Run(self, request: hub_pb.RunRequest, context: grpc.ServicerContext) -> Iterator[hub_pb.RunUpdate]:
        yield hub_pb.RunUpdate(run_id="../../escaped", summary_json="{}")

    def GetReport(self, request: hub_pb.GetReportRequest, context: grpc.ServicerContext) -> hub_pb.GetReportResponse:
        return hub_pb.GetReportResponse(files={"summary.json": b"{}"})


def test_submit_refuses_a_run_id_that_is_not_a_folder_name(tmp_path: Path, data_dir: Path,
                                                           monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    (work / "scenario.yaml").write_text(yaml.safe_dump(scenario({"python": LINEAR}, requests=5)))
    monkeypatch.chdir(work)
    with HubServer(EvilRunIdHub(tmp_path / "runs", data_dir=data_dir)) as hub:
        assert cli_main(["submit", "scenario.yaml", "--hub", hub.address, "--no-progress"]) == 2
    assert "run id '../../escaped': is not a plain folder name" in capsys.readouterr().err
    assert not (tmp_path / "escaped").exists()


# -- token and TLS ------------------------------------------------------------------------------------------------


def test_token_is_required_except_for_health_checks(tmp_path: Path, data_dir: Path,
                                                    capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("s3cret-token\n")
    assert read_token(token_file) == "s3cret-token"
    servicer = HubServicer(tmp_path / "runs", data_dir=data_dir, policy=ALLOW_PYTHON)
    with HubServer(servicer, token="s3cret-token") as hub:
        for token in (None, "wrong"):
            with hub_channel(hub.address, token=token) as channel, pytest.raises(grpc.RpcError) as err:
                hub_grpc.HubServiceStub(channel).ListBackends(hub_pb.ListBackendsRequest(), timeout=10)
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED and "needs a token" in err.value.details()
            with hub_channel(hub.address, token=token) as channel, pytest.raises(grpc.RpcError) as err:
                list(hub_grpc.HubServiceStub(channel).Run(request(scenario({"python": LINEAR})), timeout=10))
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with grpc.insecure_channel(hub.address) as channel:
            health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
        assert health.status == health_pb2.HealthCheckResponse.SERVING
        config = tmp_path / "scenario.yaml"
        config.write_text(yaml.safe_dump(scenario({"python": LINEAR}, requests=5)))
        monkeypatch.delenv("COSIM_HUB_TOKEN", raising=False)
        assert cli_main(["submit", str(config), "--hub", hub.address, "--no-progress", "-o",
                         str(tmp_path / "no")]) == 1
        assert "this hub needs a token (no token)" in capsys.readouterr().err
        assert cli_main(["submit", str(config), "--hub", hub.address, "--no-progress", "-o", str(tmp_path / "out"),
                         "--token-file", str(token_file)]) == 0
        monkeypatch.setenv("COSIM_HUB_TOKEN", "s3cret-token")
        assert cli_main(["submit", str(config), "--hub", hub.address, "--no-progress",
                         "-o", str(tmp_path / "env")]) == 0
    assert (tmp_path / "out" / "summary.json").exists() and (tmp_path / "env" / "summary.json").exists()
    assert not (tmp_path / "no").exists()


@pytest.fixture
def self_signed(tmp_path: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and localhost, and its key (openssl; skipped without it)."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=60)
    return cert, key


def test_tls_hub_serves_clients_that_trust_its_certificate(tmp_path: Path, data_dir: Path,
                                                           self_signed: tuple[Path, Path]) -> None:
    cert, key = self_signed
    servicer = HubServicer(tmp_path / "runs", data_dir=data_dir, policy=ALLOW_PYTHON)
    with HubServer(servicer, credentials=server_credentials(cert, key), token="t0k") as hub:
        assert hub.tls
        with hub_channel(hub.address, tls_ca=cert, token="t0k") as channel:
            reply = hub_grpc.HubServiceStub(channel).ListBackends(hub_pb.ListBackendsRequest(), timeout=10)
        assert list(reply.backends) == []
        with grpc.insecure_channel(hub.address) as channel, pytest.raises(grpc.RpcError) as err:
            hub_grpc.HubServiceStub(channel).ListBackends(hub_pb.ListBackendsRequest(), timeout=5)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE  # plaintext gets no answer
        assert cli_main(["health", hub.address, "--tls-ca", str(cert)]) == 0  # health checks need no token
        config = tmp_path / "scenario.yaml"
        config.write_text(yaml.safe_dump(scenario({"python": LINEAR}, requests=5)))
        token = tmp_path / "token"
        token.write_text("t0k")
        assert cli_main(["submit", str(config), "--hub", hub.address, "--no-progress", "-o", str(tmp_path / "out"),
                         "--tls-ca", str(cert), "--token-file", str(token)]) == 0
    assert (tmp_path / "out" / "summary.json").exists()


# -- containers ---------------------------------------------------------------------------------------------------


def test_the_image_runs_as_a_non_root_user() -> None:
    dockerfile = (REPO / "containers" / "Dockerfile").read_text()
    users = [line.split()[1] for line in dockerfile.splitlines() if line.startswith("USER ")]
    assert users and users[-1] not in ("root", "0", "0:0")
    compose = yaml.safe_load((REPO / "containers" / "docker-compose.yml").read_text())
    assert not compose["services"]["hub"]["user"].startswith("${COSIM_UID:-0}")

