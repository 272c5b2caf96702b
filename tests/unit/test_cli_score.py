"""``layersched score`` end to end in-process: files in, one JSON object or a table out."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from layersched.cli._sources import open_layer_source
from layersched.cli.main import build_parser, main
from layersched.registry import RegistryLayerSource

MB = 1024 * 1024
L = {k: "sha256:" + k.encode().hex().ljust(64, "0") for k in ("L1", "L2", "L3", "L4")}
SIZES = {"L1": 30 * MB, "L2": 10 * MB, "L3": 4 * MB, "L4": 4 * MB}


def _layers(*labels: str) -> list[dict]:
    return [{"digest": L[x], "size": SIZES[x]} for x in labels]


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    def node(name: str, images: list[tuple[str, int]]) -> dict:
        return {
            "metadata": {"name": name},
            "status": {"images": [{"names": [n], "sizeBytes": s} for n, s in images]},
        }

    nodes = {
        "kind": "NodeList",
        "items": [
            node("n1", [("reg:5000/img1:v1", 44 * MB)]),
            node("n2", [("reg:5000/img2:v1", 44 * MB)]),
            node("n3", []),
        ],
    }
    paths = {
        "nodes": tmp_path / "nodes.json",
        "pod": tmp_path / "pod.yaml",
        "layers": tmp_path / "layers.json",
    }
    paths["nodes"].write_text(json.dumps(nodes))
    paths["pod"].write_text(
        "kind: Pod\nmetadata: {name: p1}\n"
        "spec:\n  containers:\n  - {name: c, image: reg:5000/img1:v1}\n"
    )
    paths["layers"].write_text(
        json.dumps(
            {
                "reg:5000/img1:v1": _layers("L1", "L2", "L3"),
                "reg:5000/img2:v1": _layers("L1", "L2", "L4"),
            }
        )
    )
    return {k: str(v) for k, v in paths.items()}


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    ("strategy", "flags", "expected"),
    [
        # spread on, the default (as installed): L1 and L2 on 2 of 3 nodes count 2/3, L3
        # on 1 of 3 counts 1/3: n1 (40 * 2/3 + 4/3) / 44 -> 63; n2 (40 * 2/3) / 44 -> 60
        ("layer-locality", (), {"n1": 63, "n2": 60, "n3": 0}),
        # spread off: n2 holds L1+L2 = 40M of 44M -> floor(100 * 40/44) = 90
        ("layer-locality", ("--no-spread",), {"n1": 100, "n2": 90, "n3": 0}),
        # only n1 holds img1 by name: 44M * 1/3 = 14.7M < 23M threshold -> 0 everywhere
        ("image-locality", (), {"n1": 0, "n2": 0, "n3": 0}),
    ],
    ids=["layer-locality", "layer-locality-no-spread", "image-locality"],
)
def test_json_output_is_one_object(
    files: dict[str, str],
    capsys: pytest.CaptureFixture[str],
    strategy: str,
    flags: tuple[str, ...],
    expected: dict,
) -> None:
    code, out, _ = run(
        capsys, "score", "--nodes", files["nodes"], "--pod", files["pod"],
        "--strategy", strategy, *flags, "--layers", files["layers"], "-o", "json",
    )  # fmt: skip
    assert code == 0
    assert json.loads(out) == expected


def test_table_explains_present_and_total(
    files: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(
        capsys,
        "score",
        "--nodes",
        files["nodes"],
        "--pod",
        files["pod"],
        "--layers",
        files["layers"],
    )
    assert code == 0
    row = next(line for line in out.splitlines() if "n2" in line)
    # compact units in the table (exact bytes: --format json): 40 of 44 MiB held, the
    # score spread (the default): 40 * 2/3 of 44 -> 60
    assert "40.0 MiB" in row and "44.0 MiB" in row and row.rstrip(" │|").endswith("60")


def test_the_table_fits_80_columns(
    files: dict[str, str],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # nodes named as cloud providers name them: every row stays one line of at most 80
    # characters, and a long name keeps its start and its end
    nodes = json.loads(Path(files["nodes"]).read_text())
    for item in nodes["items"]:
        item["metadata"]["name"] = (
            f"ip-10-0-113-42.eu-west-3.compute.internal-pool-a-{item['metadata']['name']}"
        )
    long_nodes = tmp_path / "long-nodes.json"
    long_nodes.write_text(json.dumps(nodes))
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = run(
        capsys, "score", "--nodes", str(long_nodes), "--pod", files["pod"],
        "--layers", files["layers"],
    )  # fmt: skip
    assert code == 0
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 80, out
    rows = [line for line in lines if "ip-10-0" in line]
    assert len(rows) == len(nodes["items"]), out  # no row wrapped onto a second line
    for row, item in zip(rows, nodes["items"], strict=True):
        assert "…" in row and item["metadata"]["name"][-6:] in row  # the end survives


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"nodes": "/nonexistent/nodes.json"}, "/nonexistent/nodes.json: cannot read it"),
        ({"pod": "BADJSON"}, "invalid JSON at line 1"),
        ({"layers": "EMPTY_LAYERS"}, "is not in the offline layer file"),
    ],
    ids=["missing-file", "bad-json", "unresolvable-pod-image"],
)
def test_errors_are_one_line(
    files: dict[str, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    override: dict,
    message: str,
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    empty = tmp_path / "empty.json"
    empty.write_text("{}")
    args = dict(files)
    for key, value in override.items():
        args[key] = {"BADJSON": str(bad), "EMPTY_LAYERS": str(empty)}.get(value, value)
    code, out, err = run(
        capsys, "score", "--nodes", args["nodes"], "--pod", args["pod"], "--layers", args["layers"]
    )
    assert code != 0
    assert out == ""
    assert message in err
    assert len(err.strip().splitlines()) == 1
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        # defaults: estimate = missing bytes * 8 / 1e8 + 1 s. n1 misses nothing: 1 s.
        # n2 misses L3 = 4 MiB: 33554432 / 1e8 + 1 = 1.336 s -> floor(100 * 1 / 1.336) = 74.
        # n3 misses 44 MiB: 3.691 + 1 = 4.691 s -> floor(21.3) = 21.
        ((), {"n1": 100, "n2": 74, "n3": 21}),
        # 4 MiB/s (33554432 bit/s) and 0.5 s: n2 1 + 0.5 = 1.5 s -> floor(100 * 0.5 / 1.5) = 33;
        # n3 11 + 0.5 = 11.5 s -> floor(4.35) = 4
        (
            ("--default-bandwidth-bits-per-s", "33554432", "--pull-overhead-s", "0.5"),
            {"n1": 100, "n2": 33, "n3": 4},
        ),
    ],
    ids=["defaults", "flags"],
)
def test_pull_time_options(
    files: dict[str, str], capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], expected: dict
) -> None:
    code, out, err = run(
        capsys, "score", "--nodes", files["nodes"], "--pod", files["pod"], "--strategy",
        "pull-time", "--layers", files["layers"], "-o", "json", *argv,
    )  # fmt: skip
    assert (code, err) == (0, "")
    assert json.loads(out) == expected


def test_the_pull_time_table_explains_its_score(
    files: dict[str, str],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # n3 pulls 44 MiB over a labelled 10 Mbit/s: 46137344 * 8 / 1e7 + 1 s = 37.9 s; n2
    # pulls 4 MiB at the default 100 Mbit/s: 0.34 + 1 = 1.34 s; n1 nothing: 1 s
    nodes = json.loads(Path(files["nodes"]).read_text())
    nodes["items"][2]["metadata"]["labels"] = {"layersched.io/bandwidth-bits-per-s": "1e7"}
    labelled = tmp_path / "labelled.json"
    labelled.write_text(json.dumps(nodes))
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = run(
        capsys, "score", "--nodes", str(labelled), "--pod", files["pod"], "--strategy",
        "pull-time", "--layers", files["layers"],
    )  # fmt: skip
    assert code == 0 and max(len(line) for line in out.splitlines()) <= 80, out
    assert "Mbit/s" in out and "est. pull" in out
    row = {line.split()[1]: line for line in out.splitlines() if line.startswith("│ n")}
    # floor(100 * 1 / 37.9) = 2; floor(100 * 1 / 1.34) = 74
    assert "10" in row["n3"] and "37.9 s" in row["n3"] and row["n3"].rstrip(" │").endswith("2")
    assert "100" in row["n2"] and "1.3 s" in row["n2"] and row["n2"].rstrip(" │").endswith("74")
    assert "1.0 s" in row["n1"] and row["n1"].rstrip(" │").endswith("100")


@pytest.mark.parametrize(
    ("columns", "output", "left_out"),
    [
        ("60", None, ("needed",)),  # the total (the same on every row) goes first
        ("44", None, ("held", "needed", "Mbit/s")),  # named in the header's order
        ("44", "wide", ()),  # -o wide: every column, whatever the terminal
    ],
    ids=["60-columns", "44-columns", "wide"],
)
def test_a_narrow_terminal_drops_columns_never_digits(
    files: dict[str, str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    columns: str,
    output: str | None,
    left_out: tuple[str, ...],
) -> None:
    # at COLUMNS=60 the score column once printed n1's 100 as "10"
    monkeypatch.setenv("COLUMNS", columns)
    argv = ["score", "--nodes", files["nodes"], "--pod", files["pod"], "--strategy", "pull-time"]
    code, out, _ = run(
        capsys, *argv, "--layers", files["layers"], *(["-o", output] if output else [])
    )
    assert code == 0
    lines = out.splitlines()
    if output is None:
        assert max(len(line) for line in lines) <= int(columns), out
    row = {line.split()[1]: line for line in lines if line.startswith("│ n")}
    assert row["n1"].rstrip(" │").endswith(" 100") and row["n2"].rstrip(" │").endswith(" 74")
    header = next(line for line in lines if "score 0-100" in line)
    for column in ("needed", "Mbit/s", "held"):
        assert (column in header) is (column not in left_out), out
    if left_out:
        assert f"{', '.join(left_out)} left out; -o wide shows all" in " ".join(out.split())


def test_image_locality_resolves_no_layers_and_warns_about_none(
    files: dict[str, str], capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    # image-locality reads status.images names and sizes only: no layer source, no
    # "layers unknown" warnings and no footer, even though no --layers is given
    caplog.set_level(logging.INFO)
    code, out, _ = run(
        capsys, "score", "--nodes", files["nodes"], "--pod", files["pod"],
        "--strategy", "image-locality",
    )  # fmt: skip
    assert code == 0
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert "ignored" not in out


def test_unresolvable_node_images_are_named_then_counted(
    files: dict[str, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # the layers file lacks img2 (n2's image): one warning names it, the footer counts it
    layers = json.loads(Path(files["layers"]).read_text())
    del layers["reg:5000/img2:v1"]
    partial = tmp_path / "partial.json"
    partial.write_text(json.dumps(layers))
    code, out, _ = run(
        capsys, "score", "--nodes", files["nodes"], "--pod", files["pod"], "--layers", str(partial)
    )
    assert code == 0
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "'reg:5000/img2:v1'" in warnings[0]
    assert "1 node image(s) ignored: their layers are unknown (each is named in a warning" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        # image-locality always applies upstream's spread: the flag would change nothing
        (("--strategy", "image-locality", "--spread"), "--spread applies to layer-locality only"),
        (("--strategy", "pull-time", "--spread"), "--spread applies to layer-locality only"),
        # pull-time options with another strategy would be silently ignored
        (
            ("--default-bandwidth-bits-per-s", "1e9"),
            "--default-bandwidth-bits-per-s applies to --strategy in-flight and pull-time only",
        ),
        (
            ("--strategy", "image-locality", "--pull-overhead-s", "2"),
            "--pull-overhead-s applies to --strategy in-flight and pull-time only",
        ),
        # in-flight's own options
        (
            ("--strategy", "pull-time", "--pull-mode", "parallel"),
            "--pull-mode applies to --strategy in-flight only",
        ),
        (
            ("--strategy", "in-flight", "--new-bytes-weight", "-1"),
            "--new-bytes-weight: in-flight: new_bytes_weight=-1.0 must be a finite number >= 0",
        ),
        (
            ("--strategy", "pull-time", "--default-bandwidth-bits-per-s", "0"),
            "--default-bandwidth-bits-per-s: pull-time: default_bandwidth_bits_per_s=0.0 must be "
            "a finite number of bits per second > 0",
        ),
        (
            ("--strategy", "pull-time", "--pull-overhead-s", "-1"),
            "--pull-overhead-s: pull-time: overhead_s=-1.0 must be a finite number of seconds >= 0",
        ),
        # the release setting belongs to the upstream port alone
        (
            ("--strategy", "layer-locality", "--kubernetes-version", "1.20"),
            "--kubernetes-version applies to --strategy image-locality only",
        ),
        # before 1.20 the port is unchecked: refused, with the oldest it reproduces
        (
            ("--strategy", "image-locality", "--kubernetes-version", "1.19"),
            "--kubernetes-version: Kubernetes 1.19: the image-locality port reproduces",
        ),
    ],
    ids=["spread-image-locality", "spread-pull-time", "bandwidth-layer-locality",
         "overhead-image-locality", "pull-mode-pull-time", "negative-weight", "zero-bandwidth",
         "negative-overhead",
         "version-layer-locality", "version-too-old"],
)  # fmt: skip
def test_options_of_another_strategy_are_refused(
    files: dict[str, str], capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], message: str
) -> None:
    code, out, err = run(
        capsys, "score", "--nodes", files["nodes"], "--pod", files["pod"],
        "--layers", files["layers"], *argv,
    )  # fmt: skip
    assert (code, out) == (2, "")
    assert message in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        # two Pods in one YAML file: valid YAML, but which pod?
        (
            "pods.yaml",
            "kind: Pod\nspec: {containers: [{name: a, image: x:1}]}\n---\n"
            "kind: Pod\nspec: {containers: [{name: b, image: y:1}]}\n",
            "pods.yaml: contains 2 YAML documents; give exactly one Pod",
        ),
        # a trailing '---' is not a second document
        ("pod.yaml", "kind: Pod\nspec: {containers: [{name: a, image: x:1}]}\n---\n", None),
        # broken YAML still says where
        ("bad.yaml", "kind: Pod\nspec: [\n", "bad.yaml: invalid YAML at line 3"),
    ],
    ids=["two-documents", "trailing-separator", "invalid"],
)
def test_pod_yaml_documents(
    files: dict[str, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    name: str,
    text: str,
    message: str | None,
) -> None:
    pod = tmp_path / name
    pod.write_text(text)
    code, _, err = run(
        capsys, "score", "--nodes", files["nodes"], "--pod", str(pod), "--layers", files["layers"]
    )
    if message is None:
        # x:1 is not in the layers file: past parsing, the pod's image is what fails
        assert "'x:1' is not in the offline layer file" in err
    else:
        assert code == 2
        assert message in err
        assert "Traceback" not in err


def test_nodes_file_holding_pods_is_refused(
    files: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 'kubectl get pods -o json' prints a List of Pods: it must not be scored as nodes
    pods = tmp_path / "pods.json"
    pods.write_text(
        json.dumps({"kind": "List", "items": [{"kind": "Pod", "metadata": {"name": "p"}}]})
    )
    code, out, err = run(
        capsys, "score", "--nodes", str(pods), "--pod", files["pod"], "--layers", files["layers"]
    )
    assert (code, out) == (2, "")
    assert f"{pods}: items[0]: kind is 'Pod', expected 'Node'" in err


@pytest.mark.parametrize(
    ("command", "argv", "timeout_s", "retries", "deadline_s"),
    [
        # the extender must not hold a worker on a dead registry: small defaults
        ("extender", (), 2.0, 1, 5.0),
        # layersched score is offline and interactive: it may wait (the client's defaults)
        ("score", (), 10.0, 3, 30.0),
        # all are configurable
        ("score", ("--registry-timeout-s", "0.5", "--registry-retries", "0",
                   "--registry-deadline-s", "1.5"), 0.5, 0, 1.5),
    ],
    ids=["extender-defaults", "score-defaults", "flags"],
)  # fmt: skip
def test_registry_client_options(
    command: str, argv: tuple[str, ...], timeout_s: float, retries: int, deadline_s: float
) -> None:
    required = {"extender": ("--port", "1"), "score": ("--nodes", "n", "--pod", "p")}[command]
    args = build_parser().parse_args([command, *required, *argv])
    source = open_layer_source(args)
    assert isinstance(source, RegistryLayerSource)
    with source.client as client:
        assert (client.timeout_s, client.retries, client.deadline_s) == (
            timeout_s,
            retries,
            deadline_s,
        )
        # by default every registry may be contacted
        assert client.allowed_registries is None


def test_registry_trust_options(tmp_path: Path) -> None:
    # --registry-config replaces the default files; --registry-token-host adds to the
    # built-in token hosts; --allow-registry turns the allowlist on.
    config = tmp_path / "config.json"
    config.write_text('{"auths": {"reg.lan:5000": {"username": "u", "password": "p"}}}')
    args = build_parser().parse_args(
        ["extender", "--port", "1", "--registry-config", str(config),
         "--registry-token-host", "reg.lan:5000=auth.lan", "--allow-registry", "reg.lan:5000",
         "--allow-registry", "docker.io"]
    )  # fmt: skip
    source = open_layer_source(args)
    assert isinstance(source, RegistryLayerSource)
    with source.client as client:
        assert client.auth.credentials_for("reg.lan:5000") == ("u", "p")
        assert client.token_hosts["reg.lan:5000"] == {"auth.lan"}
        assert client.token_hosts["registry-1.docker.io"] == {"auth.docker.io"}
        assert client.allowed_registries == ("reg.lan:5000", "docker.io")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--registry-timeout-s", "0"), "--registry-timeout-s 0.0: must be > 0 seconds"),
        (("--registry-retries", "-1"), "--registry-retries -1: must be 0 or more"),
        (("--registry-deadline-s", "-1"), "--registry-deadline-s -1.0: must be > 0 seconds"),
        (("--registry-token-host", "auth.lan"),
         "--registry-token-host 'auth.lan': expected REGISTRY=HOST"),
        (("--registry-token-host", "reg=https://auth.lan/token"), "expected REGISTRY=HOST"),
        (("--registry-config", "/nonexistent/config.json"),
         "--registry-config /nonexistent/config.json: no such file – mount the dockerconfigjson"),
    ],
    ids=["zero-timeout", "negative-retries", "negative-deadline", "token-host-no-registry",
         "token-host-url", "missing-config"],
)  # fmt: skip
def test_bad_registry_options(
    files: dict[str, str], capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], message: str
) -> None:
    code, _, err = run(capsys, "score", "--nodes", files["nodes"], "--pod", files["pod"], *argv)
    assert code == 2
    assert message in err


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        # 1.20 counts containers only: reg/b:1 at 500M * 1/2 = 250M, 1 container
        # -> 100 * (250M - 23M) / (1000M - 23M) = 23
        (("--kubernetes-version", "1.20"), {"n1": 23, "n2": 0}),
        # 1.30 adds the init container: 250M + 250M = 500M over 2 containers
        # -> 100 * (500M - 23M) / (2000M - 23M) = 24
        (("--kubernetes-version", "v1.30.1"), {"n1": 24, "n2": 0}),
        # the default is the newest behaviour: as 1.30
        ((), {"n1": 24, "n2": 0}),
    ],
    ids=["1.20", "1.30", "default"],
)
def test_kubernetes_version_chooses_the_image_locality_release(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], expected: dict
) -> None:
    images = [{"names": [f"reg/{n}:1"], "sizeBytes": 500 * MB} for n in ("a", "b")]
    nodes = {
        "kind": "NodeList",
        "items": [
            {"metadata": {"name": "n1"}, "status": {"images": images}},
            {"metadata": {"name": "n2"}, "status": {"images": []}},
        ],
    }
    pod = {
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {
            "initContainers": [{"name": "i", "image": "reg/a:1"}],
            "containers": [{"name": "c", "image": "reg/b:1"}],
        },
    }
    (tmp_path / "nodes.json").write_text(json.dumps(nodes))
    (tmp_path / "pod.json").write_text(json.dumps(pod))
    code, out, err = run(
        capsys, "score", "--nodes", str(tmp_path / "nodes.json"), "--pod",
        str(tmp_path / "pod.json"), "--strategy", "image-locality", "-o", "json", *argv,
    )  # fmt: skip
    assert (code, err) == (0, "")
    assert json.loads(out) == expected
