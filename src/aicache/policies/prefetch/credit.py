"""Prefetch credit: a stream may speculate only as far as its prefetches have been read.

A prefetcher guesses; a plain LRU cache fetches exactly the blocks the job reads. A
prefetch that is read replaces the demand fetch it saves (no extra remote bytes); one that
is never read is a remote fetch LRU would not have made. :class:`PrefetchCredit` bounds
those online, per stream, without knowing the pattern:

* every block a prefetcher names that is neither resident nor already charged costs one
  credit; a block is granted only while the stream holds a whole credit;
* a charged block that is read (*used*) gives its credit back;
* one that is evicted unread (*wasted*), or that the job reads on demand before the
  prefetch landed, gives nothing back;
* each demand miss of the stream earns ``refill`` of a credit (so a stream whose pattern
  changed can try again), up to ``cap``.

Invariant: the stream's charged-but-not-returned blocks number at most
``cap + refill * misses`` over its life. So a stream whose prefetches are never read (a
skewed stream's neighbours, files read in random order) stops prefetching after ``cap``
blocks and then wastes at most one block per ``1 / refill`` demand misses, while a stream
whose prefetches are read (a sequential pass, the rest of a sample) keeps its whole window:
every block it reads returns the credit it cost. ``cap`` is also the most a stream may have
charged and unread at once, so it is sized to the deepest window a prefetcher opens
(:class:`~aicache.policies.prefetch.stride.StridePrefetcher`'s ``max_depth``).
"""

from __future__ import annotations

from collections.abc import Container, Sequence

#: the deepest adaptive stride window (StridePrefetcher.max_depth): a steady sequential
#: stream never waits for credit
DEFAULT_CREDIT_CAP = 32
#: credit earned per demand miss: after its credit is spent, a stream whose prefetches are
#: not read wastes at most one remote fetch per 64 demand misses (1.6 % of LRU's fetches)
DEFAULT_CREDIT_REFILL = 1.0 / 64.0

_EMPTY: tuple[int, ...] = ()


class PrefetchCredit:
    """One stream's prefetch budget (see the module docstring)."""

    __slots__ = ("cap", "refill", "credit", "pending", "granted", "refused", "returned")

    def __init__(self, cap: int = DEFAULT_CREDIT_CAP, refill: float = DEFAULT_CREDIT_REFILL) -> None:
        if cap < 1 or not 0.0 <= refill <= 1.0:
            raise ValueError(f"need cap >= 1 and 0 <= refill <= 1 (got cap={cap}, refill={refill})")
        self.cap = cap
        self.refill = refill
        self.credit = float(cap)
        #: blocks charged and not yet read, evicted or demand-fetched (at most ``cap`` +
        #: the refills: each one holds a credit)
        self.pending: set[int] = set()
        self.granted = 0  # blocks charged
        self.refused = 0  # blocks named but not granted for want of credit
        self.returned = 0  # charged blocks that were read (credit given back)

    def grant(self, blocks: Sequence[int], resident: Container[int]) -> Sequence[int]:
        """The part of ``blocks`` (a prefetcher's answer, in its order) this stream may
        fetch: already charged ones pass free (they are in flight, or a fetch the driver
        dropped), resident ones are left out, the rest while credit lasts."""
        if not blocks:
            return blocks
        pending = self.pending
        out: list[int] | None = None
        for i, b in enumerate(blocks):
            if b in resident:
                keep = False
            elif b in pending:
                keep = True
            elif self.credit >= 1.0:
                self.credit -= 1.0
                pending.add(b)
                self.granted += 1
                keep = True
            else:
                self.refused += 1
                keep = False
            if not keep and out is None:
                out = list(blocks[:i])
            elif keep and out is not None:
                out.append(b)
        if out is None:
            return blocks
        return out if out else _EMPTY

    def used(self, block: int) -> None:
        """A prefetched block was read: its credit comes back."""
        if block in self.pending:
            self.pending.discard(block)
            self.returned += 1
            c = self.credit + 1.0
            self.credit = c if c < self.cap else float(self.cap)

    def lost(self, block: int) -> None:
        """A charged block left unread (evicted, dropped): its credit stays spent."""
        self.pending.discard(block)

    def missed(self, block: int) -> None:
        """A demand miss of ``block``: the stream earns ``refill``; a charged block read on
        demand (its prefetch came too late or was dropped) stays spent."""
        self.pending.discard(block)
        c = self.credit + self.refill
        self.credit = c if c < self.cap else float(self.cap)

    def accuracy(self) -> float | None:
        """Share of the charged blocks that were read (None before any)."""
        return self.returned / self.granted if self.granted else None
