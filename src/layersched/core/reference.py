"""Image references: parsing, and the two normalisations layersched needs.

* :func:`normalized_image_name` is kube-scheduler's own rule (ImageLocality):
  append ``:latest`` when the last path component has no tag, nothing else.
  It is the key that ``status.images[*].names`` are matched by.
* :meth:`ImageReference.canonical` is the registry form
  (``docker.io/library/debian:latest``) used to talk to a registry.
* :meth:`ImageReference.identity` is the form that names the content: the
  canonical form, without the tag when a digest pins it.
* :func:`lookup_key` is how a pod's image and the images nodes publish are matched
  (the extender's votes, and the Go plugin's ``LookupKey``): as kubelet pulls them.

Two kinds of value cross modules. An :class:`ImageReference` is parsed and valid. An
:data:`ImageName` is an image as a pod writes it or a runtime lists it, which is not
always a reference: kubelet lists ``<none>@<none>``, the API server accepts any non-empty
``image``, and the extender prefixes a node image's names with its platform. Layer sources,
the layer cache and the deadline resolver are keyed by names (matched as text, as
upstream's ImageLocality matches them); what needs a reference parses the name once, at
that edge (the registry source, the cache's digest check), and a name that does not parse
is an error naming it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import NewType

from layersched.core.errors import ImageReferenceError

DEFAULT_DOMAIN = "docker.io"
LEGACY_DEFAULT_DOMAIN = "index.docker.io"
OFFICIAL_REPO_PREFIX = "library/"
DEFAULT_TAG = "latest"

_PATH_COMPONENT = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$")
_TAG = re.compile(r"^[\w][\w.-]{0,127}$", re.ASCII)
_DIGEST = re.compile(r"^[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[0-9a-fA-F]{32,}$")
_DOMAIN = re.compile(r"^(?:[a-zA-Z0-9-]+(?:\.[a-zA-Z0-9-]+)*|\[[0-9a-fA-F:]+\])(?::[0-9]+)?$")

#: An image as a pod's ``image`` field writes it or a runtime lists it
#: (``status.images[*].names``): text, not always a reference (see the module docstring).
#: A distinct type for the checker only (``ImageName(text)`` is ``text`` at run time): a
#: name is made one where it is born (a pod's decoding, a node's listed images, a layer
#: source's keys, the CRI listing), so no plain string passes for one unnoticed.
ImageName = NewType("ImageName", str)


def normalized_image_name(name: str) -> ImageName:
    """Upstream ImageLocality's rule: add ``:latest`` if the name carries no tag.

    A tag is present when the last ``:`` comes after the last ``/`` (so a
    registry port such as ``host:5000/app`` is not mistaken for a tag).
    """
    if name.rfind(":") <= name.rfind("/"):
        return ImageName(name + ":" + DEFAULT_TAG)
    return ImageName(name)


@dataclass(frozen=True, slots=True)
class ImageReference:
    """A parsed ``[domain/]path[:tag][@digest]`` reference."""

    domain: str
    path: str
    tag: str | None
    digest: str | None

    @classmethod
    def parse(cls, text: str) -> ImageReference:
        """Parse a reference the way container runtimes do (docker/distribution rules)."""
        original = text
        if not text or text != text.strip():
            raise ImageReferenceError(
                f"image reference {original!r} is empty or has surrounding spaces: "
                "write it like 'debian:12' or 'registry:5000/app@sha256:…'"
            )
        digest: str | None = None
        if "@" in text:
            text, digest = text.split("@", 1)
            if not _DIGEST.match(digest):
                raise ImageReferenceError(
                    f"image reference {original!r} has a malformed digest {digest!r}: "
                    "expected 'algorithm:hex', e.g. 'sha256:' followed by 64 hex digits"
                )
        tag: str | None = None
        slash = text.rfind("/")
        colon = text.rfind(":")
        if colon > slash:
            text, tag = text[:colon], text[colon + 1 :]
            if not _TAG.match(tag):
                raise ImageReferenceError(
                    f"image reference {original!r} has an invalid tag {tag!r}: tags are "
                    "up to 128 letters, digits, '_', '.' or '-'"
                )
        first, sep, rest = text.partition("/")
        if sep and ("." in first or ":" in first or first == "localhost" or first != first.lower()):
            domain, path = first, rest
            if not _DOMAIN.match(domain):
                raise ImageReferenceError(
                    f"image reference {original!r} has an invalid registry host {domain!r}"
                )
        else:
            domain, path = DEFAULT_DOMAIN, text
        if domain == LEGACY_DEFAULT_DOMAIN:
            domain = DEFAULT_DOMAIN
        if domain == DEFAULT_DOMAIN and "/" not in path:
            path = OFFICIAL_REPO_PREFIX + path
        components = path.split("/")
        if not path or not all(_PATH_COMPONENT.match(c) for c in components):
            raise ImageReferenceError(
                f"image reference {original!r} has an invalid repository {path!r}: "
                "repository names are lowercase letters, digits and separators ('.', '_', '-')"
            )
        return cls(domain=domain, path=path, tag=tag, digest=digest)

    @property
    def reference(self) -> str:
        """What to ask the registry for: the digest if pinned, else the tag (default ``latest``)."""
        return self.digest or self.tag or DEFAULT_TAG

    def canonical(self) -> str:
        """The fully qualified form, e.g. ``docker.io/library/debian:latest``."""
        name = f"{self.domain}/{self.path}"
        if self.digest:
            return f"{name}:{self.tag}@{self.digest}" if self.tag else f"{name}@{self.digest}"
        return f"{name}:{self.tag or DEFAULT_TAG}"

    def identity(self) -> str:
        """The canonical form naming the content: a digest drops the tag.

        kubelet reports ``docker.io/library/nginx@sha256:…`` for a pod's
        ``nginx:1.25@sha256:…``; both pin the same content, so both are that.
        """
        if self.digest:
            return f"{self.domain}/{self.path}@{self.digest}"
        return self.canonical()

    def with_digest(self, digest: str) -> ImageReference:
        """The same repository pinned to ``digest``."""
        return ImageReference(self.domain, self.path, self.tag, digest)

    def suffix(self) -> str:
        """What follows the repository in the reference as written: ``:tag``,
        ``@digest``, both, or nothing (``text.removesuffix(ref.suffix())`` is the
        repository as the user wrote it, with no ``docker.io/library/`` added)."""
        tag = f":{self.tag}" if self.tag is not None else ""
        return tag + (f"@{self.digest}" if self.digest is not None else "")


def parse_or_none(text: str) -> ImageReference | None:
    """``ImageReference.parse(text)``, or None when ``text`` is no reference.

    For names that come from a runtime rather than a user: kubelet may list
    names no reference parser accepts (``<none>@<none>``), which match nothing.
    """
    try:
        return ImageReference.parse(text)
    except ImageReferenceError:
        return None


def is_pinned(name: str) -> bool:
    """Whether ``name`` names its content by digest (``repo@sha256:…``): immutable. A
    name no parser accepts (``<none>@<none>``) pins nothing."""
    reference = parse_or_none(name)
    return reference is not None and reference.digest is not None


def lookup_key(name: str) -> str:
    """The one key ``name`` is matched by between a pod and the images nodes publish, as
    kubelet and the runtime normalise it (the Go plugin's ``layers.LookupKey``, the same
    for the same name).

    A digest reference is its digest alone: ``nginx:1.25@sha256:…`` and the runtime's
    ``docker.io/library/nginx@sha256:…`` are one content. Any other is its canonical
    form: ``nginx:1.25`` is ``docker.io/library/nginx:1.25``, ``busybox`` is
    ``docker.io/library/busybox:latest``. A name that is no reference is matched as
    upstream's ImageLocality matches it (:func:`normalized_image_name`).
    """
    reference = parse_or_none(name)
    if reference is None:
        return normalized_image_name(name)
    return reference.digest or reference.canonical()


def listed_name_matches(name: str, wanted: ImageReference) -> bool:
    """Whether ``name``, as a runtime lists an image (``status.images[*].names``), names
    the image ``wanted`` refers to.

    Names compare as references, so ``debian:12`` matches CRI-O's
    ``docker.io/library/debian:12``. A reference pinned by digest matches the
    listed ``repo@digest`` name; otherwise the tag (default ``latest``) must match.
    A name no parser accepts (``<none>@<none>``) matches nothing.
    """
    have = parse_or_none(name)
    if have is None or (have.domain, have.path) != (wanted.domain, wanted.path):
        return False
    if wanted.digest is not None:
        return have.digest == wanted.digest
    return have.digest is None and have.tag == (wanted.tag or DEFAULT_TAG)
