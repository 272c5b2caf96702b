"""The extender's live watch of NodeLayerInventory objects, Nodes and pending pods: the
list/watch loop, the parser, the store, the warm-up, the timers and their metrics (Go:
``pkg/inventorywatch``). :class:`~layersched.extender.WatchLayerIndexProvider` wires them."""
