"""The Ray Serve app's request router: each synthesis to the model replica with the least audio still to make.

A module of its own because Serve ships a custom router's module to every handle by value (cloudpickle):
whatever it holds at module level travels too. So it holds the router class alone, and finds the ingress's
registry of live routers (what /metrics reads) by importing this module by name when a router starts.
"""

from __future__ import annotations

import importlib
import random
import weakref
from collections import defaultdict
from typing import Any, Optional

from ray.serve.request_router import FIFOMixin, PendingRequest, ReplicaID, RequestRouter, RunningReplica

__all__ = ["LeastQueuedAudio", "router_of"]

# deployment id -> its live router in this process (the ingress's handle makes one)
ROUTERS: "weakref.WeakValueDictionary[Any, RequestRouter]" = weakref.WeakValueDictionary()


def router_of(deployment_id) -> Optional["LeastQueuedAudio"]:
    """The live router of `deployment_id` in this process, if its handle has made one."""
    return ROUTERS.get(deployment_id)


class LeastQueuedAudio(FIFOMixin, RequestRouter):
    """Serve request router: a synthesis goes to the replica with the least queued audio, in seconds: the larger
    of what this router sent it that has not finished (exact, at once) and the replica's own figure (its
    routing stats' `queued_audio_s`, a second old at most: it also counts other ingress replicas' requests).
    Replicas within 0.1 s of each other form one rank, in which Serve takes the one with the fewest ongoing
    requests. A call's `audio_s` keyword is what it adds (other calls add nothing)."""

    def initialize_state(self, **kwargs) -> None:
        self._sent: dict[ReplicaID, dict[str, float]] = defaultdict(dict)
        # by name: this class's own module globals are a by-value copy (see the module's docstring)
        importlib.import_module("omnivoice.server.ray_router").ROUTERS[self._deployment_id] = self

    def queued_audio(self, replica: RunningReplica) -> float:
        mine = sum(self._sent.get(replica.replica_id, {}).values())
        return max(mine, float((replica.routing_stats or {}).get("queued_audio_s", 0.0)))

    async def choose_replicas(self, candidate_replicas: list[RunningReplica],
                              pending_request: Optional[PendingRequest] = None) -> list[list[RunningReplica]]:
        ranks: dict[float, list[RunningReplica]] = defaultdict(list)
        for r in candidate_replicas:
            ranks[round(self.queued_audio(r), 1)].append(r)
        out = []
        for load in sorted(ranks):
            random.shuffle(ranks[load])
            out.append(ranks[load])
        return out

    def on_request_routed(self, pending_request: PendingRequest, replica_id: ReplicaID, result) -> None:
        audio_s = pending_request.kwargs.get("audio_s") if pending_request is not None else None
        if audio_s:
            self._sent[replica_id][pending_request.metadata.internal_request_id] = float(audio_s)

    def on_request_completed(self, replica_id: ReplicaID, internal_request_id: str) -> None:
        sent = self._sent.get(replica_id)
        if sent is not None:
            sent.pop(internal_request_id, None)
            if not sent:
                del self._sent[replica_id]

    def replica_stats(self) -> list[tuple[str, dict]]:
        """(replica id, its last routing stats) of the replicas this router sends to now, by id."""
        return [(rid.unique_id, dict(r.routing_stats or {}))
                for rid, r in sorted(self.curr_replicas.items(), key=lambda x: x[0].unique_id)]
