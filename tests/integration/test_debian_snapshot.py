"""The Docker-free builder when the mirrors no longer carry a pinned Debian version: the
real apt-get refuses it, and the exact file comes from Debian's snapshot archive, checked
against the lock's sha256.

snapshot.debian.org is not reachable from this project's machines, so a local server
answers with the two requests of its machine-readable API the builder makes
(``/mr/binary/NAME/VERSION/binfiles?fileinfo=1`` and ``/file/SHA1``, in the shapes its API
documentation gives); everything else (apt-get's refusal, the download, the checks) is real.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import shutil
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from layersched.core.errors import ImageBuildError
from layersched.images.debian import fetch_debs
from layersched.images.locks import Pin
from tests.fixtures import prereq
from tests.fixtures.serving import serving

#: No Debian package has this name: apt-get download refuses it, as it refuses a version
#: the mirrors dropped.
NAME = "layersched-test-gone"
VERSION = "1:2.0-1+deb12u9"
CONTENT = b"!<arch>\nnot really a package, but bytes with a sha256\n"
FILENAME = "layersched-test-gone_2.0-1+deb12u9_amd64.deb"


def _server(content: bytes, requests: list[str]) -> http.server.ThreadingHTTPServer:
    sha1 = hashlib.sha1(content).hexdigest()  # snapshot names files by their SHA-1

    class Snapshot(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = unquote(urlsplit(self.path).path)
            requests.append(path)
            if path == f"/mr/binary/{NAME}/{VERSION}/binfiles":
                body = json.dumps(
                    {
                        "binary": NAME,
                        "version": VERSION,
                        "result": [{"architecture": "amd64", "hash": sha1}],
                        "fileinfo": {
                            sha1: [
                                {
                                    "archive_name": "debian",
                                    "name": FILENAME,
                                    "path": "/pool/main/l/layersched-test",
                                    "size": len(content),
                                }
                            ]
                        },
                    }
                ).encode()
            elif path == f"/file/{sha1}":
                body = content
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    return http.server.ThreadingHTTPServer(("127.0.0.1", 0), Snapshot)


@pytest.fixture
def apt_get() -> None:
    if shutil.which("apt-get") is None:
        prereq.missing("apt-get is needed to build the image from Debian packages")


def test_a_version_the_mirrors_dropped_comes_from_the_snapshot_archive(
    apt_get: None, tmp_path: Path
) -> None:
    pin = Pin(NAME, VERSION, hashlib.sha256(CONTENT).hexdigest())
    requests: list[str] = []
    with serving(_server(CONTENT, requests), "snapshot") as server:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        [path] = fetch_debs([pin], tmp_path, snapshot=base)
    assert path == tmp_path / FILENAME
    assert path.read_bytes() == CONTENT
    assert requests[0] == f"/mr/binary/{NAME}/{VERSION}/binfiles"
    # a second build finds it in the directory: nothing is fetched
    assert fetch_debs([pin], tmp_path, snapshot="http://127.0.0.1:9") == [path]


def test_a_file_that_is_not_the_locked_one_is_refused(apt_get: None, tmp_path: Path) -> None:
    pin = Pin(NAME, VERSION, hashlib.sha256(b"what the lock says").hexdigest())
    with serving(_server(CONTENT, []), "snapshot") as server:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        with pytest.raises(ImageBuildError) as caught:
            fetch_debs([pin], tmp_path, snapshot=base)
    message = str(caught.value)
    assert "apt-get download" in message  # the mirrors' refusal comes first
    assert "sha256 is not the one in debian.lock" in message
    assert not list(tmp_path.glob("*.deb"))  # nothing unchecked is written
