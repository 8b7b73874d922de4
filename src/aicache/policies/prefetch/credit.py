"""Prefetch credit: a stream may speculate only as far as its prefetches have been read.

A prefetcher guesses; a plain LRU cache fetches exactly the blocks the job reads. A
prefetch that is read replaces the demand fetch it saves (no extra remote bytes); one that
is never read is a remote fetch LRU would not have made. :class:`PrefetchCredit` bounds
those online, per stream, without knowing the pattern:

* every block a prefetcher names that is neither resident nor already charged costs one
  credit; a block is granted only while the stream holds a whole credit;
* a charged block that is read gives back its credit plus ``gain``, whether its prefetch
  landed first (*used*) or the read came first and fetched it (a late guess is still a
  right one, and the engine fetches it once);
* one that is evicted unread (*wasted*) gives nothing back;
* each demand miss of the stream earns ``refill`` of a credit (so a stream whose pattern
  changed can try again).

The stream starts with ``initial`` credits and holds at most ``cap``. So the blocks it
charged and never had read number at most ``initial + gain * read + refill * misses``:
a stream whose prefetches are not read (a skewed stream's neighbours, files read in random
order) stops after ``initial`` blocks and then wastes at most one block per ``1 / refill``
demand misses; one whose guesses are read at least ``1 / (1 + gain)`` of the time (94 %)
earns credit, up to a window of ``cap`` blocks charged and unread at once (a deep
sequential readahead over large blocks); in between, the credit drains and the stream
stops. A read block's credit comes back, so the bound is on waste, not on volume.
"""

from __future__ import annotations

from collections.abc import Container, Sequence

#: credits a stream starts with: what it may waste before any evidence (the deepest
#: adaptive stride window, StridePrefetcher.max_depth, so a first sequential window opens
#: whole)
DEFAULT_CREDIT_INITIAL = 32
#: the most a stream holds: its deepest window of charged, unread blocks (the simulator
#: queues up to 64 prefetches, the engine 2 x max_prefetch; a reader of large blocks
#: keeps more than that landed and unread ahead of it)
DEFAULT_CREDIT_CAP = 256
#: extra credit per charged block that was read: streams right >= 1/(1+gain) = 94 % of
#: the time grow their window, the rest drain; waste stays <= gain x reads
DEFAULT_CREDIT_GAIN = 1.0 / 16.0
#: credit earned per demand miss: after its credit is spent, a stream whose prefetches are
#: not read wastes at most one remote fetch per 64 demand misses (1.6 % of LRU's fetches)
DEFAULT_CREDIT_REFILL = 1.0 / 64.0

_EMPTY: tuple[int, ...] = ()


class PrefetchCredit:
    """One stream's prefetch budget (see the module docstring)."""

    __slots__ = ("cap", "gain", "refill", "credit", "pending", "granted", "refused", "returned")

    def __init__(self, initial: int = DEFAULT_CREDIT_INITIAL, cap: int = DEFAULT_CREDIT_CAP,
                 gain: float = DEFAULT_CREDIT_GAIN, refill: float = DEFAULT_CREDIT_REFILL) -> None:
        if not 0 <= initial <= cap or cap < 1 or not 0.0 <= refill <= 1.0 or not 0.0 <= gain <= 1.0:
            raise ValueError(f"need 0 <= initial <= cap, cap >= 1, 0 <= gain, refill <= 1 (got "
                             f"initial={initial}, cap={cap}, gain={gain}, refill={refill})")
        self.cap = cap
        self.gain = gain
        self.refill = refill
        self.credit = float(initial)
        #: blocks charged and not yet read or evicted (each holds a spent credit)
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
            c = self.credit + 1.0 + self.gain
            self.credit = c if c < self.cap else float(self.cap)

    def lost(self, block: int) -> None:
        """A charged block left unread (evicted, dropped): its credit stays spent."""
        self.pending.discard(block)

    def missed(self, block: int) -> None:
        """A demand miss of ``block``: the stream earns ``refill``. A charged block read on
        demand (its prefetch had not started, or the driver dropped it) was a right guess,
        only not a timely one: its credit comes back too (it cost no second fetch)."""
        c = self.credit + self.refill
        if block in self.pending:
            self.pending.discard(block)
            self.returned += 1
            c += 1.0 + self.gain
        self.credit = c if c < self.cap else float(self.cap)

    def accuracy(self) -> float | None:
        """Share of the charged blocks that were read (None before any)."""
        return self.returned / self.granted if self.granted else None
