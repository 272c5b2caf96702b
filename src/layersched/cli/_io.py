"""Reading user files with errors that name the file and say how to fix it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from layersched.core.errors import InputError


def read_document(path: str, expected: str = "document") -> Any:
    """Parse a JSON or YAML file (YAML when the name ends in .yaml/.yml).

    ``expected`` names what the file should hold (``"Pod"``) for the message
    when a YAML file holds several documents.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as err:
        raise InputError(f"{path}: cannot read it ({err.strerror}): check the path") from None
    except UnicodeDecodeError:
        raise InputError(f"{path}: not UTF-8 text: expected JSON or YAML") from None
    if p.suffix.lower() in (".yaml", ".yml"):
        try:
            # an empty document (a trailing '---') is no document
            documents = [d for d in yaml.safe_load_all(text) if d is not None]
        except yaml.YAMLError as err:
            mark = getattr(err, "problem_mark", None)
            at = f" at line {mark.line + 1}" if mark is not None else ""
            raise InputError(f"{path}: invalid YAML{at}: fix the syntax") from None
        if len(documents) > 1:
            raise InputError(
                f"{path}: contains {len(documents)} YAML documents; give exactly one {expected}"
            )
        return documents[0] if documents else None
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise InputError(
            f"{path}: invalid JSON at line {err.lineno} column {err.colno}: {err.msg}"
        ) from None


def read_bytes(path: str) -> bytes:
    """A file's bytes; InputError naming it when it cannot be read."""
    try:
        return Path(path).read_bytes()
    except OSError as err:
        raise InputError(f"{path}: cannot read it ({err.strerror}): check the path") from None
