"""``layersched estimate`` in process against a stand-in API server (tests/fixtures/kube_api)
and an offline layer file: what it asks the API, what it prints, and its errors.

The cluster is the testbed after an image-locality trial of the seed scenario (see
tests/unit/test_estimate.py): P1-again pulled all of Img1 on n3 while n2 held L1+L2.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from layersched.cli.main import main
from tests.fixtures import prereq
from tests.fixtures.kube_api import StandInApi, items, ok

MB = 1024 * 1024
REG = "reg:5000/scenario"
IMG1, IMG2 = f"{REG}/img1:v1", f"{REG}/img2:v1"
L = {k: "sha256:" + k.encode().hex().ljust(64, "0") for k in ("L1", "L2", "L3", "L4")}
SIZES = {"L1": 24 * MB, "L2": 16 * MB, "L3": 4 * MB, "L4": 4 * MB}
WHOLE = {"cpu": "2", "memory": "4Gi"}
#: A node name as clouds write them: the table must shorten it, keeping its end.
LONG = "ip-10-0-113-42.eu-west-3.compute.internal-pool-a-"


def _stamp(ago_s: float) -> str:
    return datetime.fromtimestamp(time.time() - ago_s, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _node(name: str, *images: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "status": {
            "allocatable": {**WHOLE, "pods": "110"},
            "images": [{"names": [image], "sizeBytes": 44 * MB} for image in images],
        },
    }


def _pod(name: str, node: str, ago_s: float, image: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "scenario", "uid": f"uid-{name}"},
        "spec": {
            "nodeName": node,
            "schedulerName": "image-locality",
            "containers": [{"name": "main", "image": image, "resources": {"requests": WHOLE}}],
        },
        "status": {"phase": "Running", "startTime": _stamp(ago_s)},
    }


def _pulled(pod: str, node: str, ago_s: float, image: str, seconds: float) -> dict[str, Any]:
    return {
        "metadata": {"name": f"{pod}.1", "namespace": "scenario"},
        "involvedObject": {"kind": "Pod", "name": pod, "uid": f"uid-{pod}"},
        "reason": "Pulled",
        "message": f'Successfully pulled image "{image}" in {seconds}s',
        "source": {"component": "kubelet", "host": node},
        "firstTimestamp": _stamp(ago_s),
        "lastTimestamp": _stamp(ago_s),
    }


def _cluster(api: StandInApi, prefix: str = "") -> None:
    n1, n2, n3 = (f"{prefix}n{i}" for i in (1, 2, 3))
    api.route("GET", "/api/v1/nodes", items([_node(n1, IMG1), _node(n2, IMG2), _node(n3, IMG1)]))
    api.route(
        "GET",
        "/api/v1/pods",
        items([_pod("p1", n1, 120, IMG1), _pod("p1-again", n3, 60, IMG1)]),
    )
    api.route(
        "GET",
        "/api/v1/events",
        items(
            [
                _pulled("p1", n1, 100, IMG1, 20.0),
                _pulled("p2", n2, 80, IMG2, 20.0),  # deleted since: its node and time count
                _pulled("p1-again", n3, 40, IMG1, 20.0),
                # hostile: odd messages and fields are no pull
                {**_pulled("x", n2, 10, IMG1, 1.0), "message": "Successfully pulled [b]"},
                {"reason": "Pulled", "message": 7, "involvedObject": "nope"},
            ]
        ),
    )


@pytest.fixture
def layers(tmp_path: Path) -> str:
    path = tmp_path / "layers.json"
    path.write_text(
        json.dumps(
            {
                image: [{"digest": L[x], "size": SIZES[x]} for x in labels]
                for image, labels in ((IMG1, ("L1", "L2", "L3")), (IMG2, ("L1", "L2", "L4")))
            }
        )
    )
    return str(path)


def _estimate(
    capsys: pytest.CaptureFixture[str], api: StandInApi, layers: str, *extra: str
) -> tuple[int, str, str]:
    code = main(["estimate", "--kubeconfig", str(api.kubeconfig), "--layers", layers, *extra])
    out, err = capsys.readouterr()
    return code, out, err


def test_json_has_exact_bytes_and_reads_only_what_it_needs(
    kube_api: StandInApi, layers: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _cluster(kube_api)
    code, out, _ = _estimate(capsys, kube_api, layers, "-o", "json")
    assert code == 0
    document = json.loads(out)
    again = next(p for p in document["pods"] if p["pod"] == "scenario/p1-again")
    assert again["best_node"] == "n2"
    assert again["avoidable_bytes"] == SIZES["L1"] + SIZES["L2"]  # exact bytes
    assert document["totals"]["pods_affected"] == 1
    assert document["totals"]["avoidable_bytes"] == SIZES["L1"] + SIZES["L2"]
    # the waits in flight, next to layer-locality's picks: nothing was in flight when
    # P1-again started (P1's pull had ended), so both picks wait what n2's L3 takes
    assert again["in_flight_node"] == "n2"
    assert again["in_flight_wait_s"] == again["layer_locality_wait_s"] < again["wait_s"]
    assert {"wait_s", "in_flight_wait_s", "pods_in_flight_moved"} <= set(document["totals"])
    # bound pods only, Pulled events only, in pages; nothing written
    pods = kube_api.sent("GET", "/api/v1/pods")[0]
    assert pods.query["fieldSelector"] == "spec.nodeName!=" and pods.query["limit"] == "500"
    assert kube_api.sent("GET", "/api/v1/events")[0].query["fieldSelector"] == "reason=Pulled"
    assert {r.method for r in kube_api.sent()} == {"GET"}


def test_the_table_fits_80_columns(
    kube_api: StandInApi,
    layers: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _cluster(kube_api, prefix=LONG)
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = _estimate(capsys, kube_api, layers)
    assert code == 0
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 80, out
    rows = [line for line in lines if line.startswith("│")]
    assert len(rows) == 2, out  # one line per pod: nothing wrapped
    again = rows[0]  # the pod that would have saved most comes first
    # 40.0 MiB avoidable, on a node whose long name kept its end; names cut in the middle
    assert again.startswith("│ scenar…again │") and "40.0 MiB" in again
    assert again.count("…l-a-n") == 2 and "n3 │" in again and "n2 │" in again
    assert "1 of 2 pods (50%) would have pulled less" in " ".join(out.split())
    assert "on in-flight's picks" in " ".join(out.split())
    assert "approximated:" in out


def test_pages_are_followed(
    kube_api: StandInApi, layers: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _cluster(kube_api)
    nodes = [_node("n1", IMG1), _node("n2", IMG2), _node("n3", IMG1)]

    def paged(request: Any) -> Any:
        # two pages: the continue token of the first brings the second
        if request.query.get("continue") == "page-2":
            return items(nodes[1:])
        return ok({"metadata": {"continue": "page-2"}, "items": nodes[:1]})

    kube_api.route("GET", "/api/v1/nodes", paged)
    code, out, _ = _estimate(capsys, kube_api, layers, "-o", "json")
    assert code == 0 and json.loads(out)["nodes"] == 3
    assert [r.query.get("continue") for r in kube_api.sent("GET", "/api/v1/nodes")] == [
        None,
        "page-2",
    ]


def test_plot(
    kube_api: StandInApi, layers: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    if importlib.util.find_spec("matplotlib") is None:
        # make venv installs the sim extra: a missing matplotlib fails under CI
        prereq.missing("the sim extra (matplotlib) is not installed: make venv installs it")
    _cluster(kube_api)
    png = tmp_path / "estimate.png"
    code, _, err = _estimate(capsys, kube_api, layers, "--plot", str(png))
    assert code == 0 and f"plot: {png}" in err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_without_matplotlib_is_a_clear_error(
    kube_api: StandInApi,
    layers: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name)
    )
    code, _, err = _estimate(capsys, kube_api, layers, "--plot", str(tmp_path / "x.png"))
    assert code == 2
    assert "--plot needs matplotlib" in err and "layersched[sim]" in err
    assert kube_api.sent() == []  # refused before any API call


def test_the_product_imports_no_matplotlib(tmp_path: Path) -> None:
    # the production image has no matplotlib: estimate (without --plot) must not need it
    code = (
        "import sys; from layersched.cli.main import build_parser; build_parser(); "
        "import layersched.cli.estimate; print('matplotlib' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--since", "yesterday"), "--since 'yesterday': expected a positive duration"),
        (("--since", "0h"), "--since '0h'"),
        (("--top", "-1"), "--top -1: must be 0 or more"),
        (("--default-bandwidth-bits-per-s", "0"), "must be > 0"),
    ],
    ids=["since-word", "since-zero", "top", "bandwidth"],
)
def test_bad_options_are_one_line(
    kube_api: StandInApi,
    layers: str,
    capsys: pytest.CaptureFixture[str],
    extra: tuple[str, ...],
    message: str,
) -> None:
    code, out, err = _estimate(capsys, kube_api, layers, *extra)
    assert code == 2 and out == ""
    assert message in err and len(err.strip().splitlines()) == 1
    assert kube_api.sent() == []


def test_an_api_refusal_is_one_line(
    kube_api: StandInApi, layers: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _estimate(capsys, kube_api, layers)  # no routes: 404 everywhere
    assert code == 1
    assert err.startswith("layersched: error: listing /api/v1/nodes") and "404" in err
    assert "Traceback" not in err


def test_fewer_than_half_weighed_says_so_first_and_fails(
    kube_api: StandInApi, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # the layer file knows IMG2 only: p1 and p1-again (both IMG1) cannot be weighed,
    # 0 of 2 < half: the cause and the fix come first, and the exit status says it
    _cluster(kube_api)
    partial = tmp_path / "img2-only.json"
    partial.write_text(json.dumps({IMG2: [{"digest": L["L1"], "size": SIZES["L1"]}]}))
    code, out, err = _estimate(capsys, kube_api, str(partial))
    assert code == 3
    assert "only 0 of 2 pods could be weighed" in err
    assert "--registry-config FILE" in err and "--layers FILE" in err and "--partial" in err
    assert out.lstrip().startswith("incomplete: only 0 of 2 pods")
    # --partial: the same warning, the result, exit 0; JSON says how complete it is
    code, out, err = _estimate(capsys, kube_api, str(partial), "--partial", "-o", "json")
    assert code == 0 and "only 0 of 2 pods" in err
    assert json.loads(out)["coverage"] == {"weighed": 0, "weighable": 2, "complete": False}


def test_a_complete_estimate_says_nothing_of_coverage(
    kube_api: StandInApi, capsys: pytest.CaptureFixture[str], layers: str
) -> None:
    _cluster(kube_api)
    code, out, err = _estimate(capsys, kube_api, layers, "-o", "yaml")
    assert code == 0 and "could be weighed" not in err
    assert "complete: true" in out and "weighed: 2" in out


def test_old_format_flag_still_works_with_a_warning(
    kube_api: StandInApi, capsys: pytest.CaptureFixture[str], layers: str
) -> None:
    _cluster(kube_api)
    code, out, err = _estimate(capsys, kube_api, layers, "--format", "json")
    assert code == 0 and json.loads(out)["nodes"] == 3
    assert "--format is deprecated: use -o json" in err
