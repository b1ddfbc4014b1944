"""`cosim submit` carries the local files a config names (traces, presets, hf_config) to a hub that lacks
them, within a size limit the hub enforces."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import yaml

from cosim.hub.cli import main as cli_main
from cosim.hub.service.server import HubServer, HubServicer
from cosim.hub.service.uploads import DEFAULT_MAX_UPLOAD_FILES, TooManyUploads, place_uploads
from cosim.v1 import hub_service_pb2 as hub_pb
from cosim.v1 import hub_service_pb2_grpc as hub_grpc
from tests.contract.test_hub_service import ALLOW_PYTHON, LINEAR, scenario
from tests.unit.config.test_presets_user import HF_CONFIGS, PRESETS_FILE

ROWS = 40


def write_config(folder: Path) -> Path:
    """A scenario reading a local trace, a local presets file and a local HF config.json, all beside it."""
    folder.mkdir(parents=True)
    (folder / "traces").mkdir()
    (folder / "traces" / "mine.csv").write_text(
        "arrival_s,input,output\n" + "".join(f"{i * 0.01:.2f},{50 + 7 * i},{4 + i % 5}\n" for i in range(ROWS)))
    (folder / "lab.yaml").write_text(yaml.safe_dump(PRESETS_FILE))
    (folder / "config.json").write_text(json.dumps({**HF_CONFIGS["llama3.3-70b"], "num_hidden_layers": 4}))
    config = scenario({"python": LINEAR})
    config["presets"] = "lab.yaml"
    config["models"] = {"m": {"hf_config": "config.json"}}
    config["hardware"] = {"h100": {"preset": "LabChip"}}
    config["workload"] = {"trace": {"path": "traces/mine.csv", "format": "csv", "arrival_column": "arrival_s",
                                    "input_column": "input", "output_column": "output"},
                          "arrival": {"process": "trace"}, "input_tokens": {"dist": "trace"},
                          "output_tokens": {"dist": "trace"}}
    path = folder / "scenario.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[HubServer]:
    """A hub whose data folder holds none of the submitter's files."""
    (tmp_path / "hub-data").mkdir()
    servicer = HubServicer(tmp_path / "runs", data_dir=tmp_path / "hub-data", max_upload_bytes=64 << 10,
                           policy=ALLOW_PYTHON)
    with HubServer(servicer) as server:
        yield server


def test_submit_uploads_the_files_a_config_names(hub: HubServer, tmp_path: Path) -> None:
    config = write_config(tmp_path / "mine")
    local, remote = tmp_path / "local", tmp_path / "remote"
    assert cli_main(["run", str(config), "-o", str(local), "--no-progress"]) == 0
    assert cli_main(["submit", str(config), "--hub", hub.address, "-o", str(remote), "--no-progress"]) == 0
    assert (local / "requests.csv").read_bytes() == (remote / "requests.csv").read_bytes()
    summary = json.loads((remote / "summary.json").read_text())
    assert summary["requests"]["completed"] == ROWS and summary["clients"]["c0"]["device"] == "LabChip"
    assert not list(Path(hub.servicer.runs_dir).glob(".uploads*"))  # uploads live in a temporary folder


def test_without_upload_the_hub_looks_in_its_data_folder(hub: HubServer, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path / "mine")
    assert cli_main(["submit", str(config), "--hub", hub.address, "--no-upload", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "presets: cannot read" in err and "hub-data/lab.yaml" in err


def test_the_hub_refuses_uploads_over_its_limit(hub: HubServer, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path / "mine")
    (config.parent / "traces" / "mine.csv").write_text("arrival_s,input,output\n" + "0.1,100,10\n" * 10_000)
    assert cli_main(["submit", str(config), "--hub", hub.address, "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "exceed this hub's limit of 0.1 MiB (cosim hub --max-upload-mb)" in err and "traces/mine.csv" in err
    request = hub_pb.RunRequest(config_yaml=config.read_text(), files={"traces/mine.csv": b"x" * (65 << 10)})
    with grpc.insecure_channel(hub.address) as channel, pytest.raises(grpc.RpcError) as failure:
        list(hub_grpc.HubServiceStub(channel).Run(request, timeout=30))
    assert failure.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


def test_the_hub_refuses_more_files_than_its_limit(hub: HubServer, tmp_path: Path) -> None:
    config = write_config(tmp_path / "mine")
    many = {f"empty-{i}.csv": b"" for i in range(DEFAULT_MAX_UPLOAD_FILES + 1)}  # far under the byte limit
    request = hub_pb.RunRequest(config_yaml=config.read_text(), files=many)
    with grpc.insecure_channel(hub.address) as channel, pytest.raises(grpc.RpcError) as failure:
        list(hub_grpc.HubServiceStub(channel).Run(request, timeout=30))
    assert failure.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert failure.value.details() == (f"RunRequest.files: {DEFAULT_MAX_UPLOAD_FILES + 1} uploaded files exceed this "
                                       f"hub's limit of {DEFAULT_MAX_UPLOAD_FILES} (cosim hub --max-upload-files); a "
                                       "config names a presets file, a hf_config per model and its traces")
    with pytest.raises(TooManyUploads):  # nothing written
        place_uploads({}, many, tmp_path / "up")
    assert not (tmp_path / "up").exists()


def test_uploaded_names_cannot_point_outside_the_upload_folder(tmp_path: Path) -> None:
    data = {"workload": {"trace": {"path": "../../../etc/evil.csv"}}}
    place_uploads(data, {"../../../etc/evil.csv": b"a,b\n"}, tmp_path / "up")
    placed = Path(data["workload"]["trace"]["path"])
    assert placed.parent == (tmp_path / "up").resolve() and placed.read_bytes() == b"a,b\n"


def test_run_request_keeps_its_v1_field_numbers() -> None:
    """Uploads came as a new field: a v1 client without it sends the same bytes as before."""
    assert {f.name: f.number for f in hub_pb.RunRequest.DESCRIPTOR.fields} == \
        {"config_yaml": 1, "overrides": 2, "files": 3}
    old = hub_pb.RunRequest(config_yaml="seed: 1", overrides=["a=1"])
    assert old.SerializeToString() == b"\n\x07seed: 1\x12\x03a=1"
