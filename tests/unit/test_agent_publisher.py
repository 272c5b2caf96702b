"""The node agent's publishing half: server-side apply only on change, the CRD's limits
applied before publishing (each image left out logged once, not on every resync), the
publish loop over the merged reader against an API double that validates with the CRD's
own schema, what the agent says when the API refuses an object, and how it keeps its own
object true (another writer's change, stale stamp or deletion noticed, repaired, counted
and logged; its own applies never taken for one). The real API server is in tests/e2e."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
import tenacity

from layersched.agent import (
    REPAIR_BURST,
    ChangeSignal,
    CrioStorageReader,
    NodeImagesReader,
    NodeRead,
    Publisher,
    publish_loop,
    watch_own_object,
)
from layersched.cli.main import main as cli_main
from layersched.core.errors import KubeError
from layersched.core.layers import Layer
from layersched.core.nodeimages import NodeImage
from layersched.core.nodelayers import LIMITS, Limits, parse_document
from tests.fixtures.inventory_api import InventoryApi


def digest(n: int) -> str:
    return f"sha256:{n:064x}"


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

    def apply(
        self, path: str, document: Mapping[str, Any], field_manager: str, *, force: bool = True
    ) -> dict[str, Any]:
        if self.fail:
            raise KubeError(f"applying {path}: 503 unavailable", 503)
        assert field_manager == "layersched-agent"
        self.applied.append(dict(document))
        self.existing = dict(document)  # what a GET answers next, as the API stores it
        return dict(document)


IMG = NodeImage.held(("reg/a:1",), digest(100), (Layer(digest(1), 10),))


def test_publishes_only_when_something_changed() -> None:
    kube = RecordingKube()
    publisher = Publisher(kube, "n1", runtime="containerd://1.6.20")
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
    Publisher(kube, "n1", runtime="x").publish([IMG], "content-store")
    restarted = Publisher(RecordingKube(existing=kube.applied[0]), "n1", runtime="x")
    restarted.adopt_published()
    assert restarted.publish([IMG], "content-store") is False  # nothing re-applied


def test_a_resync_puts_right_an_object_someone_else_changed() -> None:
    kube = RecordingKube()
    publisher = Publisher(kube, "n1", runtime="x")
    publisher.publish([IMG], "content-store")
    tampered = dict(kube.applied[0], layers=[], images=[])
    kube.existing = tampered
    assert publisher.publish([IMG], "content-store") is False  # an event: trusts itself
    assert publisher.publish([IMG], "content-store", verify=True) is True  # a resync: checks
    kube.existing = kube.applied[-1]
    assert publisher.publish([IMG], "content-store", verify=True) is False  # now in step


# ------------------------------------------------------------------ keeping the object true
def _changed(obj: dict[str, Any]) -> None:
    obj["images"], obj["layers"] = [], []


def _staled(obj: dict[str, Any]) -> None:
    obj["observedAt"] = "2020-01-01T00:00:00Z"


@pytest.mark.parametrize(
    ("tamper", "cause", "said"),
    [
        # what the node holds is wiped: the extender scores the node 0 for its images
        (_changed, "changed", "changed by kubectl-edit"),
        # only observedAt set back: same content, yet the extender counts it as missing
        (_staled, "stale", "set stale by kubectl-edit"),
        # gone: the node has no layers for the scheduler at all
        (None, "deleted", "deleted behind"),
    ],
    ids=["changed", "stale", "deleted"],
)
def test_an_object_another_writer_changed_is_repaired_counted_and_logged(
    caplog: pytest.LogCaptureFixture,
    tamper: Callable[[dict[str, Any]], None] | None,
    cause: str,
    said: str,
) -> None:
    kube = RecordingKube()
    publisher = Publisher(kube, "n1", runtime="x")
    publisher.publish([IMG], "content-store")
    own = kube.applied[-1]
    # the event of the agent's own apply is no repair
    assert publisher.notice(own) is False
    assert publisher.publish([IMG], "content-store") is False
    if tamper is None:
        kube.existing = None
    else:
        kube.existing = json.loads(json.dumps(own))
        tamper(kube.existing)
        kube.existing["metadata"]["managedFields"] = [
            {"manager": "layersched-agent"},
            {"manager": "kubectl-edit"},
        ]
    # the watch's event: a repair is due, and the next publish makes it (no resync needed)
    assert publisher.notice(kube.existing) is True
    caplog.set_level(logging.WARNING, logger="layersched.agent._publisher")
    assert publisher.publish([IMG], "content-store") is True
    assert publisher.stats.repairs == {
        "changed": 0,
        "stale": 0,
        "deleted": 0,
        cause: 1,
    }
    repaired = kube.applied[-1]
    assert parse_document(repaired, "test").images == (IMG,)
    assert repaired["observedAt"] != "2020-01-01T00:00:00Z"
    [record] = caplog.records
    assert said in record.getMessage() and "n1" in record.getMessage()
    # in step again: the repaired object's event is the agent's own
    kube.existing = repaired
    assert publisher.notice(repaired) is False
    assert publisher.publish([IMG], "content-store", verify=True) is False
    assert sum(publisher.stats.repairs.values()) == 1


def test_the_same_content_stamped_later_is_adopted_not_repaired() -> None:
    # a second agent of the node (a DaemonSet rollout's overlap) applies what this one
    # would, a moment later: the object is true, and the two must not fight over stamps
    kube = RecordingKube()
    publisher = Publisher(kube, "n1", runtime="x")
    publisher.publish([IMG], "content-store")
    own = kube.applied[-1]
    later = dict(own, observedAt="2999-01-01T00:00:00Z")  # not from the far future
    assert publisher.notice(later) is True
    later["observedAt"] = own["observedAt"]  # the same second, the other agent's
    kube.existing = later
    assert publisher.notice(later) is False
    assert publisher.publish([IMG], "content-store", verify=True) is False
    assert sum(publisher.stats.repairs.values()) == 0


def test_a_change_another_agent_of_the_node_published_first_is_no_repair() -> None:
    # the node pulled an image: the other agent published it first; this one, woken by
    # that event, reads the node, finds the object already says so, and adopts it
    kube = RecordingKube()
    publisher = Publisher(kube, "n1", runtime="x")
    publisher.publish([IMG], "content-store")
    pulled = NodeImage.held(("reg/b:1",), digest(101), (Layer(digest(7), 5),))
    other_kube = RecordingKube()
    Publisher(other_kube, "n1", runtime="x").publish([IMG, pulled], "content-store")
    kube.existing = dict(other_kube.applied[-1])
    assert publisher.notice(kube.existing) is True  # not what it holds: look
    assert publisher.publish([IMG, pulled], "content-store") is False  # already true
    assert sum(publisher.stats.repairs.values()) == 0
    assert publisher.notice(kube.existing) is False  # held from now on


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_writer_that_keeps_changing_the_object_is_answered_ever_later() -> None:
    kube = RecordingKube()
    clock = Clock()
    publisher = Publisher(kube, "n1", runtime="x", clock=clock)
    publisher.publish([IMG], "content-store")

    def wipe() -> None:
        kube.existing = dict(kube.applied[-1], images=[], layers=[])
        assert publisher.notice(kube.existing) is True

    repaired_at = []
    for _ in range(REPAIR_BURST + 4):
        clock.now += 0.5  # the other writer answers half a second after each repair
        wipe()
        # held back while the hold lasts: no read, no apply, however often it is woken
        while (wait_s := publisher.repair_wait_s()) is not None and wait_s > 0:
            assert publisher.publish([IMG], "content-store") is False
            clock.now += wait_s
        assert publisher.publish([IMG], "content-store") is True
        repaired_at.append(clock.now)
    # a burst of ten repaired at once (an administrator's writes), then each a hold
    # after the last, the hold doubling from 1 s: never a busy loop
    gaps = [b - a for a, b in pairwise(repaired_at)]
    assert gaps == [0.5] * REPAIR_BURST + [1.0, 2.0, 4.0]
    assert publisher.stats.repairs["changed"] == REPAIR_BURST + 4
    # quiet for a window: the next repair is at once again
    clock.now += 60
    wipe()
    assert publisher.repair_wait_s() == 0.0


def test_a_repair_the_api_refuses_stays_due_and_is_counted_once_made() -> None:
    kube = RecordingKube()
    publisher = Publisher(kube, "n1", runtime="x")
    publisher.publish([IMG], "content-store")
    kube.existing = None
    assert publisher.notice(None) is True
    kube.fail = True
    with pytest.raises(KubeError):
        publisher.publish([IMG], "content-store")
    assert sum(publisher.stats.repairs.values()) == 0  # not made: not counted
    kube.fail = False
    assert publisher.publish([IMG], "content-store") is True  # still due: made now
    assert publisher.stats.repairs["deleted"] == 1


def test_nothing_is_repaired_before_the_agent_published() -> None:
    publisher = Publisher(RecordingKube(), "n1", runtime="x")
    assert publisher.notice(None) is False
    assert publisher.notice({"images": [], "layers": []}) is False


def test_a_restarted_agent_refreshes_an_object_stamped_long_ago() -> None:
    kube = RecordingKube()
    Publisher(kube, "n1", runtime="x").publish([IMG], "content-store")
    old = dict(kube.applied[0], observedAt="2020-01-01T00:00:00Z")
    restarted = Publisher(RecordingKube(existing=old), "n1", runtime="x")
    restarted.adopt_published()
    # same content, but older than a heartbeat: due now, not in ten minutes
    assert restarted.publish([IMG], "content-store") is True


#: The agent's repair is an event, a debounce and one apply: well under a second; a
#: loaded 2-core box gets this long.
REPAIR_TIMEOUT_S = 5.0


@contextmanager
def agent_with_own_watch(
    api: InventoryApi, images: list[NodeImage]
) -> Iterator[tuple[Publisher, ChangeSignal]]:
    """The publish loop reading ``images`` (a resync only every 10 minutes: repairs come
    from the watch) and the watch of its own object, each on a thread and connection."""

    def read() -> NodeRead:
        return NodeRead(tuple(images), "content-store", {})

    signal = ChangeSignal()
    with api.client() as kube, api.client() as watching:
        publisher = Publisher(kube, "n1", runtime="x")
        threads = [
            threading.Thread(
                target=publish_loop,
                args=(read, publisher, signal),
                kwargs={"resync_s": 600.0},
                daemon=True,
            ),
            threading.Thread(
                target=watch_own_object, args=(watching, publisher, signal), daemon=True
            ),
        ]
        for thread in threads:
            thread.start()
        try:
            yield publisher, signal
        finally:
            signal.stopped.set()
            signal.set()
            threads[0].join(REPAIR_TIMEOUT_S)


def _until(check: Callable[[], None], timeout_s: float = REPAIR_TIMEOUT_S) -> None:
    tenacity.retry(
        stop=tenacity.stop_after_delay(timeout_s),
        wait=tenacity.wait_fixed(0.02),
        retry=tenacity.retry_if_exception_type((AssertionError, KeyError)),
        reraise=True,
    )(check)()


def test_the_agent_repairs_its_object_over_the_watch_within_seconds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    images = [IMG]
    with InventoryApi() as api, agent_with_own_watch(api, images) as (publisher, signal):
        # what the watch told the publisher: each object's resourceVersion, and whether
        # it called for a repair
        noticed: list[tuple[str, bool]] = []
        notice = publisher.notice

        def recording(current: Mapping[str, Any] | None) -> bool:
            due = notice(current)
            version = (current or {}).get("metadata", {}).get("resourceVersion", "")
            noticed.append((version, due))
            return due

        monkeypatch.setattr(publisher, "notice", recording)

        def published() -> None:
            assert api.applies == 1 and publisher.stats.applies == 1

        _until(published)
        truth = parse_document(api.objects["n1"], "api").images
        tampers: list[tuple[str, Callable[[], None]]] = [
            ("changed", lambda: api.tamper("n1", _changed)),
            ("stale", lambda: api.tamper("n1", _staled)),
            ("deleted", lambda: api.remove("n1")),
        ]
        for n, (cause, tamper) in enumerate(tampers, start=1):
            applies = api.applies
            started = time.monotonic()
            tamper()

            def repaired(n: int = n, applies: int = applies) -> None:
                stored = api.objects["n1"]
                assert api.applies == applies + 1, "not republished yet"
                assert parse_document(stored, "api").images == truth
                assert stored["observedAt"] != "2020-01-01T00:00:00Z"
                assert sum(publisher.stats.repairs.values()) == n

            _until(repaired)
            print(f"{cause}: repaired in {time.monotonic() - started:.3f} s")
            assert publisher.stats.repairs[cause] == 1
        # the agent's own change (a pull) is published, and its event is no repair
        pulled = NodeImage.held(("reg/b:1",), digest(101), (Layer(digest(7), 5),))
        images.append(pulled)
        signal.set()

        def followed() -> None:
            assert parse_document(api.objects["n1"], "api").images == (IMG, pulled)

        _until(followed)
        applied = api.objects["n1"]["metadata"]["resourceVersion"]

        def seen() -> None:
            assert any(version == applied for version, _ in noticed), "no event yet"

        _until(seen)  # the apply's own event reached the publisher: no repair is due
        assert (applied, False) in noticed
        assert sum(publisher.stats.repairs.values()) == 3
        assert publisher.notice(api.objects["n1"]) is False  # in step with the API


def test_api_failures_surface_as_kube_errors() -> None:
    publisher = Publisher(RecordingKube(fail=True), "n1", runtime="x")
    with pytest.raises(KubeError, match="503"):
        publisher.publish([IMG], "content-store")
    assert publisher.stats.last_hash == ""  # so the next attempt applies again


# ------------------------------------------------------------------ the CRD's limits
def deep_image(n: int) -> NodeImage:
    """An image of one layer more than the CRD allows."""
    layers = tuple(Layer(digest(100_000 + i), 1) for i in range(LIMITS.max_layers_per_image + 1))
    return NodeImage.held((f"reg/deep{n}:1",), digest(200 + n), layers)


def test_images_past_the_limits_are_left_out_and_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    kube = RecordingKube()
    publisher = Publisher(kube, "n1", runtime="x")
    huge = NodeImage.held(("reg/huge:1",), digest(300), (Layer(digest(2), 2**62),))
    caplog.set_level(logging.WARNING, logger="layersched.agent._publisher")
    for verify in (False, True, True):  # the first read, then two resyncs
        publisher.publish([IMG, deep_image(1), huge], "content-store", verify=verify)
    # the same node again: the object with its omissions is stable, nothing is sent
    assert publisher.publish([IMG, deep_image(1), huge], "content-store") is False
    document = kube.applied[-1]
    # the honest image is published; the two others are counted, by reason
    assert [i["names"] for i in document["images"]] == [["reg/a:1"]]
    assert document["truncated"] is True
    assert document["omittedImages"] == 2
    assert document["omittedByReason"] == {"layerCount": 1, "layerSize": 1}
    warnings = sorted(r.getMessage() for r in caplog.records)
    # one line per image over three publishes, saying which limit
    assert len(warnings) == 2
    assert "reg/deep1:1" in warnings[0] and "1001 layers, more than 1000" in warnings[0]
    assert "reg/huge:1" in warnings[1] and f"{2**62} bytes, outside 0..{2**40}" in warnings[1]
    # gone from the node, then back: said again
    publisher.publish([IMG], "content-store")
    publisher.publish([IMG, deep_image(1)], "content-store")
    assert len(caplog.records) == 3


def write_chain_storage(root: Path, images: list[tuple[str, list[tuple[str, int]]]]) -> None:
    """CRI-O's storage metadata: each image a chain of its (digest, size) layers."""
    layers: list[dict[str, Any]] = []
    records: list[dict[str, Any]] = []
    for n, (name, chain) in enumerate(images):
        parent = None
        for m, (layer_digest, size) in enumerate(chain):
            layer_id = f"i{n}l{m}"
            layers.append(
                {
                    "id": layer_id,
                    "parent": parent,
                    "compressed-diff-digest": layer_digest,
                    "compressed-size": size,
                }
            )
            parent = layer_id
        records.append({"id": f"{n:064x}", "names": [name], "layer": parent, "digest": digest(n)})
    (root / "overlay-layers").mkdir(parents=True)
    (root / "overlay-images").mkdir(parents=True)
    (root / "overlay-layers" / "layers.json").write_text(json.dumps(layers))
    (root / "overlay-images" / "images.json").write_text(json.dumps(records))


def test_hostile_runtime_contents_publish_an_object_the_api_accepts(tmp_path: Path) -> None:
    # a node's CRI-O storage as a hostile tenant (or a broken runtime) could leave it
    long_name = "reg/" + "x" * LIMITS.max_name_chars
    write_chain_storage(
        tmp_path,
        [
            ("reg/honest:1", [(digest(1), 30_000_000), (digest(2), 1_000)]),
            ("reg/deep:1", [(digest(10_000 + i), 10) for i in range(1_001)]),
            (long_name, [(digest(3), 10)]),
            ("reg/huge:1", [(digest(4), 2**62)]),
            ("reg/newline:1", [(digest(5) + "\n", 10)]),
        ],
    )
    reader = NodeImagesReader([CrioStorageReader(tmp_path)])
    with InventoryApi() as api, api.client() as kube:
        publisher = Publisher(kube, "n1", runtime="cri-o://1.23.2")
        publish_loop(reader.read, publisher, ChangeSignal(), once=True)
    # the API (validating with the CRD's own schema) took it at once: no 422
    assert api.refused == []
    stored = api.objects["n1"]
    assert [i.names for i in parse_document(stored, "test").images] == [("reg/honest:1",)]
    # the two the CRD would refuse are counted; the digest with a newline and the 2^62-byte
    # layer never got past the reader (digests and sizes are checked where they are read)
    assert stored["omittedByReason"] == {"layerCount": 1, "nameLength": 1}
    problems = reader.read().problems
    assert "not a digest" in problems["reg/newline:1"]
    assert "1099511627776-byte cap" in problems["reg/huge:1"]


def test_an_object_the_api_refuses_says_which_crd_to_apply(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # the cluster runs an older CRD that allows one image; this agent publishes two
    older = Limits(max_images=1)
    two = (IMG, NodeImage.held(("reg/b:1",), digest(101), (Layer(digest(7), 5),)))

    def read() -> NodeRead:
        return NodeRead(two, "content-store", {})

    with InventoryApi(limits=older) as api, api.client() as kube:
        publisher = Publisher(kube, "n1", runtime="x")
        with pytest.raises(KubeError) as refused:
            publish_loop(read, publisher, ChangeSignal(), once=True)
    assert refused.value.status == 422
    # the API's own reasons reach the log, with the fix
    [record] = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert "images: " in record.getMessage()
    assert "apply this version's install/kustomize/crd.yaml" in record.getMessage()
    assert publisher.stats.api_failures == 1


# ------------------------------------------------------------------ the CLI
@pytest.mark.parametrize(
    ("argv", "message"),
    [
        # nothing to read
        ([], "--containerd SOCKET"),
        # a port that is not one
        (["--crio-storage", "/nonexistent", "--health-port", "70000"], "--health-port 70000"),
    ],
    ids=["no-runtime", "bad-health-port"],
)
def test_publish_flags_fail_with_one_clear_line(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code = cli_main(["agent", "--publish", "--node-name", "n1", *argv])
    assert code != 0
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
