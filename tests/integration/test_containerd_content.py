"""The node agent's containerd reader against a REAL containerd and docker-registry.

The layers must come from containerd's own content store, equal to what the registry
serves, with no registry call of the agent's; image events must arrive for a pull and a
removal; and the manifests must still be readable once containerd has discarded the
layer blobs (``discard_unpacked_layers``, what the CRI does on a real node).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
import tenacity

from layersched.agent import ChangeSignal, watch_events
from layersched.containerd import ContainerdClient, ContentStoreReader
from layersched.core.nodelayers import build_document, parse_document
from layersched.cri import CRIClient
from tests.fixtures.containerd import ContainerdProcess
from tests.fixtures.registry import RegistryProcess
from tests.integration.test_cri import IMG1, IMG2, Pushed, cri, pushed

pytestmark = pytest.mark.integration
__all__ = ["cri", "pushed"]  # the fixtures, shared with test_cri

EVENT_TIMEOUT_S = 10.0
POLL_S = 0.05


@pytest.fixture
def content(containerd: ContainerdProcess) -> Iterator[ContainerdClient]:
    with ContainerdClient(containerd.endpoint) as client:
        yield client


def test_layers_come_from_the_content_store(
    cri: CRIClient, pushed: Pushed, content: ContainerdClient, registry: RegistryProcess
) -> None:
    cri.pull_image(pushed.img1)
    cri.pull_image(pushed.img2)
    log_lines = len(registry.log_text().splitlines())
    images = {image.digest: image for image in ContentStoreReader(content).images()}
    # one entry per manifest, named by its tag and digest reference (not the ID record)
    assert set(images) == {IMG1.digest, IMG2.digest}
    assert images[IMG1.digest].names == tuple(
        sorted((pushed.img1, pushed.digest_ref(pushed.img1, IMG1)))
    )
    # the layers are the manifest's, base first, with their compressed sizes
    for built in (IMG1, IMG2):
        assert images[built.digest].layers == built.layers
    # and nothing was asked of the registry to find them
    assert len(registry.log_text().splitlines()) == log_lines


def test_document_round_trips_and_dedupes(
    cri: CRIClient, pushed: Pushed, content: ContainerdClient
) -> None:
    cri.pull_image(pushed.img1)
    cri.pull_image(pushed.img2)
    document = build_document(
        "n1", ContentStoreReader(content).images(), runtime="containerd", source="content-store"
    )
    # Img1 = L1+L2+L3 and Img2 = L1+L2+L4 share two layers: four distinct ones are listed
    assert len(document["layers"]) == 4
    parsed = parse_document(document, "test")
    assert {i.digest: i.layers for i in parsed.images} == {
        i.digest: i.layers for i in ContentStoreReader(content).images()
    }


def test_events_follow_pulls_and_removals(
    cri: CRIClient, pushed: Pushed, containerd: ContainerdProcess
) -> None:
    events = ContainerdClient(containerd.endpoint)
    signal = ChangeSignal()
    topics: list[str] = []

    def recorded() -> Iterator[str]:
        for topic in events.events():
            topics.append(topic)
            yield topic

    watcher = threading.Thread(target=watch_events, args=(recorded, signal, 60.0), daemon=True)
    watcher.start()

    @tenacity.retry(
        stop=tenacity.stop_after_delay(EVENT_TIMEOUT_S),
        wait=tenacity.wait_fixed(POLL_S),
        reraise=True,
    )
    def assert_topic(topic: str) -> None:
        assert topic in topics

    try:
        cri.pull_image(pushed.img1)
        assert_topic("/images/create")
        cri.remove_image(pushed.img1)
        assert_topic("/images/delete")
    finally:
        signal.stopped.set()
        events.close()
        watcher.join(timeout=5)
