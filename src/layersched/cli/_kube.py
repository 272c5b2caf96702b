"""The cluster options every user command takes, as kubectl spells them.

``--kubeconfig FILE`` (default: ``$KUBECONFIG``'s files merged, else ~/.kube/config, else
the pod's service account), ``--context NAME`` and ``-n/--namespace NS``:
``estimate``, ``explain``, ``inventory show`` and ``deploy render`` take them alike.
"""

from __future__ import annotations

import argparse

from layersched.kube import KubeClient, KubeConfig, load_client_config

KUBECONFIG_HELP = (
    "kubeconfig file (default: $KUBECONFIG's files merged, else ~/.kube/config, else the "
    "pod's service account), as kubectl reads it: exec credential plugins, token files, "
    "insecure-skip-tls-verify and proxy-url included"
)


def add_cluster_options(p: argparse.ArgumentParser, *, namespace_help: str | None) -> None:
    """``--kubeconfig``, ``--context`` and (when ``namespace_help`` is given: what the
    namespace means to the command) ``-n/--namespace``."""
    p.add_argument("--kubeconfig", metavar="FILE", help=KUBECONFIG_HELP)
    p.add_argument(
        "--context",
        metavar="NAME",
        help="the kubeconfig context to use (default: its current-context)",
    )
    if namespace_help is not None:
        p.add_argument("-n", "--namespace", metavar="NS", help=namespace_help)


def client_config(args: argparse.Namespace) -> KubeConfig:
    """The credentials the options name."""
    kubeconfig = getattr(args, "kubeconfig", None)
    return load_client_config(
        str(kubeconfig) if kubeconfig is not None else None, getattr(args, "context", None)
    )


def open_client(args: argparse.Namespace) -> KubeClient:
    """A client of the cluster the options name."""
    return KubeClient(client_config(args))
