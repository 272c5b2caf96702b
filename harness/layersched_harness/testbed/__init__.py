"""Testbeds: the seed's scenario, its drivers (``local``: real registry + containerd
nodes in network namespaces; ``kind``: kind + CRI-O clusters) and their reports."""
