"""How far the cluster snapshot trails the API server, timed on Phalanx's own bindings.

A binding's answer says the API server holds the pod bound. The pod watch shows it bound
later: by however long the API server takes to deliver watch events (it grows with the
API server's load, and every watcher waits alike), then the informer's decode and the
loop's turn. Every decision made meanwhile sees the pod pending. A binding is the one
change whose moment Phalanx knows exactly, so each is timed from its answer to the update
that shows it bound. `phalanx_watch_delay_seconds` exports the delays.

Loop side only: bindings are answered, and informer updates applied, on the event loop.
"""

from __future__ import annotations

from collections.abc import Callable

_SEEN = -1.0  # a clock reading no binding is answered at


class BindingSightings:
    """Bindings answered and not yet seen bound on the watch, by pod UID.

    An entry lives from a binding's send until the watch shows the pod bound, the binding
    fails, or the pod is deleted: at most the bindings the watch has not caught up with."""

    def __init__(self, observe: Callable[[float], None], clock: Callable[[], float]) -> None:
        self._observe = observe
        self._clock = clock
        # None: sent, not yet answered; _SEEN: shown bound before the answer, which decides
        # whether that was this binding (answered: a delay of 0) or not (refused: none).
        self._answered: dict[str, float | None] = {}

    def __len__(self) -> int:
        return len(self._answered)

    def sent(self, uid: str) -> None:
        self._answered[uid] = None

    def answered(self, uid: str) -> None:
        if self._answered.get(uid) == _SEEN:
            del self._answered[uid]
            self._observe(0.0)
        elif uid in self._answered:  # not already seen bound
            self._answered[uid] = self._clock()

    def failed(self, uid: str) -> None:
        self._answered.pop(uid, None)

    def seen_bound(self, uid: str) -> None:
        """The watch shows the pod bound: its delay, once. Seen before the answer: 0, once
        the answer says the binding landed (a pod already bound when a binding was sent is
        shown bound too, and that binding is refused)."""
        if uid not in self._answered:
            return
        at = self._answered[uid]
        if at is None:
            self._answered[uid] = _SEEN
        elif at != _SEEN:
            del self._answered[uid]
            self._observe(max(0.0, self._clock() - at))

    def forget(self, uid: str) -> None:
        """The pod is gone: a binding the watch never showed bound is not a delay."""
        self._answered.pop(uid, None)
