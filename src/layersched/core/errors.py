"""The one error hierarchy of layersched.

Every message says what was being done and how to fix it. Entry points catch
:class:`LayerschedError` and print its message as one line, never a traceback.
"""

from __future__ import annotations


class LayerschedError(Exception):
    """Root of every error layersched raises on purpose."""


class InputError(LayerschedError):
    """A user-supplied file or field is missing or malformed."""


class ImageReferenceError(InputError):
    """An image reference cannot be parsed."""


class ManifestError(LayerschedError):
    """A manifest or index is malformed, too large, or has no matching platform."""


class RegistryError(LayerschedError):
    """A registry could not be reached or refused a request."""


class RegistryNotAllowedError(RegistryError):
    """An image names a registry outside the operator's allowlist; nothing was sent to it."""


class LayerResolutionError(LayerschedError):
    """An image's layers could not be resolved from any layer source."""


class CRIError(LayerschedError):
    """A CRI runtime call failed."""


class KubeError(LayerschedError):
    """A Kubernetes API call failed, or no credentials to make one were found."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        #: The HTTP status of the API's answer (0: no answer).
        self.status = status


class ImageBuildError(LayerschedError):
    """An image could not be built: a command it runs failed, or a package it fetches was
    refused or is not the one locked."""
