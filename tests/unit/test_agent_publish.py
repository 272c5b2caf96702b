"""The node agent's publishing half: readers of CRI-O's storage and CRI annotations,
server-side apply only on change, and the Kubernetes credentials it loads. The real
containerd path is in tests/integration/test_containerd_content.py, the real API in
tests/e2e."""

from __future__ import annotations

import base64
import json
import ssl
import tempfile
from pathlib import Path
from typing import Any

import pytest

from layersched.agent import CrioStorageReader, Publisher, cri_images
from layersched.cli.main import main as cli_main
from layersched.core.errors import InputError, KubeError
from layersched.core.layers import Layer, StaticLayerSource
from layersched.core.nodelayers import HeldImage, parse_document
from layersched.cri import CRIImage
from layersched.kube import in_cluster_config, load_kubeconfig
from tests.fixtures.extender import make_pki


def digest(n: int) -> str:
    return f"sha256:{n:064x}"


# ------------------------------------------------------------------ CRI-O storage
def write_storage(root: Path, layers: list[dict[str, Any]], images: list[dict[str, Any]]) -> None:
    (root / "overlay-layers").mkdir(parents=True)
    (root / "overlay-images").mkdir(parents=True)
    (root / "overlay-layers" / "layers.json").write_text(json.dumps(layers))
    (root / "overlay-images" / "images.json").write_text(json.dumps(images))


def test_crio_storage_walks_the_parent_chain(tmp_path: Path) -> None:
    # containers/storage records: base <- py <- app, with compressed digests and sizes
    write_storage(
        tmp_path,
        [
            {"id": "base", "compressed-diff-digest": digest(1), "compressed-size": 300},
            {
                "id": "py",
                "parent": "base",
                "compressed-diff-digest": digest(2),
                "compressed-size": 20,
            },
            {
                "id": "app",
                "parent": "py",
                "compressed-diff-digest": digest(3),
                "compressed-size": 1,
            },
        ],
        [
            {"id": "f" * 64, "names": ["reg/app:1"], "layer": "app", "digest": digest(9)},
            {"id": "e" * 64, "names": ["reg/local:1"], "layer": "local"},
        ],
    )
    reader = CrioStorageReader(tmp_path)
    images = reader.images()
    # base first, as in the manifest
    assert images == [
        HeldImage(
            ("reg/app:1",),
            digest(9),
            (Layer(digest(1), 300), Layer(digest(2), 20), Layer(digest(3), 1)),
        )
    ]
    # an image whose top layer is unknown is left out, and why is said
    assert "layer local is not in layers.json" in reader.problems["reg/local:1"]


def test_crio_storage_missing_says_what_to_mount(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="graphroot"):
        CrioStorageReader(tmp_path / "absent").images()


# ------------------------------------------------------------------ CRI annotations
def cri_image(name: str, annotations: dict[str, str] | None = None) -> CRIImage:
    return CRIImage(
        id=f"sha256:{abs(hash(name)):064x}"[:71],
        repo_tags=(name,),
        repo_digests=(),
        size_bytes=1,
        annotations=annotations or {},
        pinned=False,
    )


def test_cri_images_use_annotations_then_the_registry() -> None:
    ryax = cri_image("reg/ryax:1", {f"imageLayer.{digest(5)}": "500"})
    plain = cri_image("reg/plain:1")
    unknown = cri_image("reg/unknown:1")
    known = [HeldImage(("reg/known:1",), digest(8), ())]
    fallback = StaticLayerSource({"reg/plain:1": (Layer(digest(6), 60),)})
    held, problems, used = cri_images(
        [ryax, plain, unknown, cri_image("reg/known:1")], fallback, known
    )
    assert [(h.names, h.layers) for h in held] == [
        (("reg/ryax:1",), (Layer(digest(5), 500),)),
        (("reg/plain:1",), (Layer(digest(6), 60),)),
    ]
    assert used == {"annotations", "registry"}
    assert set(problems) == {"reg/unknown:1"}


# ------------------------------------------------------------------ publishing
class RecordingKube:
    """What the publisher sends to the API (apply) and what it reads (get)."""

    def __init__(self, existing: dict[str, Any] | None = None, fail: bool = False) -> None:
        self.applied: list[dict[str, Any]] = []
        self.existing = existing
        self.fail = fail

    def get(self, path: str) -> dict[str, Any]:
        if path.startswith("/api/v1/nodes/"):
            return {"metadata": {"name": path.rsplit("/", 1)[1], "uid": "uid-1"}}
        if self.existing is None:
            raise KubeError(f"reading {path}: 404 not found", 404)
        return self.existing

    def apply(self, path: str, document: dict[str, Any], field_manager: str) -> dict[str, Any]:
        if self.fail:
            raise KubeError(f"applying {path}: 503 unavailable", 503)
        assert field_manager == "layersched-agent"
        self.applied.append(document)
        return document


IMG = HeldImage(("reg/a:1",), digest(100), (Layer(digest(1), 10),))


def test_publishes_only_when_something_changed() -> None:
    kube = RecordingKube()
    publisher = Publisher(kube, "n1", runtime="containerd://1.6.20")  # type: ignore[arg-type]
    assert publisher.publish([IMG], "content-store") is True
    assert publisher.publish([IMG], "content-store") is False  # the same: nothing sent
    assert publisher.publish([], "content-store") is True  # the image was removed
    assert len(kube.applied) == 2
    first = kube.applied[0]
    # owned by the Node: deleting the Node deletes its layers
    assert first["metadata"]["ownerReferences"][0] == {
        "apiVersion": "v1",
        "kind": "Node",
        "name": "n1",
        "uid": "uid-1",
    }
    assert parse_document(first, "test").images == (IMG,)


def test_a_restarted_agent_adopts_what_is_published() -> None:
    kube = RecordingKube()
    Publisher(kube, "n1", runtime="x").publish([IMG], "content-store")  # type: ignore[arg-type]
    restarted = Publisher(RecordingKube(existing=kube.applied[0]), "n1", runtime="x")  # type: ignore[arg-type]
    restarted.adopt_published()
    assert restarted.publish([IMG], "content-store") is False  # nothing re-applied


def test_a_resync_puts_right_an_object_someone_else_changed() -> None:
    kube = RecordingKube()
    publisher = Publisher(kube, "n1", runtime="x")  # type: ignore[arg-type]
    publisher.publish([IMG], "content-store")
    tampered = dict(kube.applied[0], layers=[], images=[])
    kube.existing = tampered
    assert publisher.publish([IMG], "content-store") is False  # an event: trusts itself
    assert publisher.publish([IMG], "content-store", verify=True) is True  # a resync: checks
    kube.existing = kube.applied[-1]
    assert publisher.publish([IMG], "content-store", verify=True) is False  # now in step


def test_api_failures_surface_as_kube_errors() -> None:
    publisher = Publisher(RecordingKube(fail=True), "n1", runtime="x")  # type: ignore[arg-type]
    with pytest.raises(KubeError, match="503"):
        publisher.publish([IMG], "content-store")
    assert publisher.stats.last_hash == ""  # so the next attempt applies again


# ------------------------------------------------------------------ credentials
def test_kubeconfig_with_inline_data(tmp_path: Path) -> None:
    pem = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    config = {
        "current-context": "c",
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
        "clusters": [
            {
                "name": "k",
                "cluster": {
                    "server": "https://10.0.0.1:6443",
                    "certificate-authority-data": base64.b64encode(pem).decode(),
                },
            }
        ],
        "users": [{"name": "u", "user": {"token": "secret"}}],
    }
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps(config))
    loaded = load_kubeconfig(str(path))
    assert loaded.server == "https://10.0.0.1:6443"
    assert loaded.bearer() == "secret"
    # inline data stay in memory: no credential file is written
    assert loaded.ca_file is None and loaded.ca_data == pem


@pytest.mark.parametrize(
    ("user", "message"),
    [
        ({"exec": {"command": "aws"}}, "exec/auth-provider plugin"),
    ],
    ids=["exec-plugin"],
)
def test_kubeconfig_refusals_say_what_to_use(
    tmp_path: Path, user: dict[str, Any], message: str
) -> None:
    config = {
        "current-context": "c",
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
        "clusters": [{"name": "k", "cluster": {"server": "https://x:6443"}}],
        "users": [{"name": "u", "user": user}],
    }
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps(config))
    with pytest.raises(KubeError, match=message):
        load_kubeconfig(str(path))


def test_outside_a_pod_without_kubeconfig() -> None:
    with pytest.raises(KubeError, match="pass --kubeconfig FILE"):
        in_cluster_config({})


def test_publish_without_a_runtime_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli_main(["agent", "--publish", "--node-name", "n1"])
    assert code != 0
    err = capsys.readouterr().err
    assert "--containerd SOCKET" in err and "Traceback" not in err


def test_inline_client_credentials_load_without_leaving_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "pki").mkdir()
    pki = make_pki(tmp_path / "pki")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))

    def data(path: Path) -> str:
        return base64.b64encode(path.read_bytes()).decode()

    def kubeconfig(key: Path) -> str:
        user = {"client-certificate-data": data(pki.client_cert), "client-key-data": data(key)}
        config = {
            "current-context": "c",
            "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
            "clusters": [
                {
                    "name": "k",
                    "cluster": {
                        "server": "https://127.0.0.1:6443",
                        "certificate-authority-data": data(pki.ca_cert),
                    },
                }
            ],
            "users": [{"name": "u", "user": user}],
        }
        path = tmp_path / f"kubeconfig-{key.stem}"
        path.write_text(json.dumps(config))
        return str(path)

    loaded = load_kubeconfig(kubeconfig(pki.client_key))
    context = loaded.ssl_context()
    assert context.verify_mode == ssl.CERT_REQUIRED
    # the CA and the client's certificate and key were loaded; nothing is left on disk
    assert loaded.cert_file is None and loaded.cert_data is not None
    assert list(scratch.iterdir()) == []
    # a key that is not the certificate's: one line naming the kubeconfig, still no file
    mismatched = load_kubeconfig(kubeconfig(pki.other_client_key))
    with pytest.raises(KubeError, match="kubeconfig-stranger: cannot load the TLS files"):
        mismatched.ssl_context()
    assert list(scratch.iterdir()) == []
