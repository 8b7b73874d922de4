"""Online session-continuation predictor and log-normal gap estimator.

The published design's predictor (``docs/design/saecache.md``) is a 3-layer MLP over the
serving model's last hidden states. Where no
model runs we use what any server has at request time: prompt length, request type, how
much of the prompt matched cached template blocks, the turn number and the arrival gap. The
classifier is an online logistic regression in numpy (one SGD step per label); a
:class:`HiddenStateSource` may append model features when a model does run.

Labels arrive late and are inferred without an oracle: a session's next request is a
positive for its previous request; a request whose session stays silent longer than a
horizon (a high quantile of the learned gap distribution) becomes a negative.
"""

from __future__ import annotations

import math
import operator
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from aicache.compiled_abc import own_abc_caches

N_BASE_FEATURES = 8


class HiddenStateSource(Protocol):
    """Adapter that supplies extra features (e.g. pooled last hidden states) per request."""

    dim: int

    def features(self, request: object) -> np.ndarray: ...


@dataclass(slots=True)
class RequestFeatures:
    """What the server knows when a request arrives (the predictor's raw inputs)."""

    input_tokens: int
    tool_request: bool
    template_match: float  # fraction of prompt blocks found in the cache at arrival
    system_match: bool  # the first block was cached (a known system prompt/template)
    turn: int  # 1 for a session's first request
    gap_s: float  # seconds since this session's previous request (0 for the first)
    hit_tokens: int

    def vector(self) -> list[float]:
        return [
            1.0,
            math.log1p(self.input_tokens) / 10.0,
            1.0 if self.tool_request else 0.0,
            self.template_match,
            1.0 if self.system_match else 0.0,
            # a trace that numbers turns from 0 (the agent generators) has turn 0 first
            math.log1p(max(0, self.turn - 1)) / 3.0,
            math.log1p(self.gap_s) / 5.0,
            math.log1p(self.hit_tokens) / 10.0,
        ]


class LogNormalGaps:
    """Online maximum-likelihood fit of a log-normal (Welford on log gaps).

    The MLE of a log-normal is the mean and (population) standard deviation of the log
    samples; Welford's update keeps them exact and stable in one pass. After ``window``
    samples the weight of a new sample stays at ``1/window`` (exponential forgetting), so a
    shifting workload is tracked instead of averaged away.
    """

    __slots__ = ("n", "mean", "m2", "window", "prior_mu", "prior_sigma")

    def __init__(self, prior_mu: float = math.log(60.0), prior_sigma: float = 1.0,
                 window: int = 2000) -> None:
        self.n = 0
        self.mean = 0.0
        self.m2 = 0.0
        self.window = window
        self.prior_mu = prior_mu
        self.prior_sigma = prior_sigma

    def add(self, gap_s: float) -> None:
        x = math.log(max(gap_s, 1e-3))
        if self.n < self.window:
            self.n += 1
            d = x - self.mean
            self.mean += d / self.n
            self.m2 += d * (x - self.mean)
        else:  # exponentially weighted with weight 1/window
            a = 1.0 / self.window
            d = x - self.mean
            self.mean += a * d
            var = (1 - a) * (self.m2 / self.n + a * d * d)
            self.m2 = var * self.n

    @property
    def mu(self) -> float:
        return self.mean if self.n >= 2 else self.prior_mu

    @property
    def sigma(self) -> float:
        if self.n < 2:
            return self.prior_sigma
        return max(1e-3, math.sqrt(self.m2 / self.n))

    def quantile(self, z: float = 1.645) -> float:
        """Gap at the standard-normal quantile ``z`` (1.645 ≈ 95%)."""
        return math.exp(self.mu + z * self.sigma)


class ContinuationPredictor:
    """Online logistic regression: P(this session sends another request).

    ``w`` is a numpy vector. With only the 8 base features the arithmetic runs on a
    Python list (numpy's per-call overhead is larger than an 8-term dot product; this runs
    once per first request); with a hidden-state source it runs in numpy.
    """

    __slots__ = ("_w", "lr", "l2", "hidden", "updates")

    def __init__(self, lr: float = 0.05, l2: float = 1e-4,
                 hidden: HiddenStateSource | None = None) -> None:
        dim = N_BASE_FEATURES + (hidden.dim if hidden is not None else 0)
        self._w: list[float] | np.ndarray = [0.0] * dim if hidden is None else np.zeros(dim)
        self.lr = lr
        self.l2 = l2
        self.hidden = hidden
        self.updates = 0

    @property
    def w(self) -> np.ndarray:
        return np.array(self._w, dtype=float)

    @w.setter
    def w(self, value: np.ndarray | list[float]) -> None:
        arr = np.asarray(value, dtype=float)
        self._w = [float(x) for x in arr] if self.hidden is None else arr.copy()

    def vector(self, f: RequestFeatures, request: object = None) -> list[float] | np.ndarray:
        x = f.vector()
        if self.hidden is not None:
            full: np.ndarray = np.concatenate(
                [np.asarray(x), np.asarray(self.hidden.features(request), dtype=float)])
            return full
        return x

    def predict(self, x: list[float] | np.ndarray) -> float:
        if self.hidden is not None:
            z = float(np.asarray(self._w) @ np.asarray(x))  # _w is an array here
        else:
            z = sum(map(operator.mul, self._w, x))  # in C; same summation order
        return 1.0 / (1.0 + math.exp(-max(-30.0, min(30.0, z))))

    def update(self, x: list[float] | np.ndarray, label: float) -> None:
        g = label - self.predict(x)
        lr, l2 = self.lr, self.l2
        if self.hidden is not None:
            w = np.asarray(self._w)  # an array here: asarray is the identity
            self._w = w + lr * (g * np.asarray(x) - l2 * w)
        else:
            self._w = [wi + lr * (g * xi - l2 * wi) for wi, xi in zip(self._w, x)]
        self.updates += 1


class SessionTracker:
    """Per-session last-request time plus the predictor's delayed labels.

    ``observe`` returns (gap since the session's previous request or None, previous
    request's route tag). Pending first-request feature vectors wait in arrival order; a
    session's next request labels its pending vector 1, and ``expire(now, horizon)`` labels
    vectors older than ``horizon`` 0. Memory is bounded by sessions active within the
    horizon (older entries are dropped by ``expire``).
    """

    __slots__ = ("predictor", "_last", "_pending")

    def __init__(self, predictor: ContinuationPredictor) -> None:
        self.predictor = predictor
        self._last: OrderedDict[Hashable, tuple[float, int]] = OrderedDict()
        self._pending: OrderedDict[Hashable, tuple[float, Any]] = OrderedDict()

    def observe(self, sid: Hashable, now: float, tag: int, learn: bool) -> tuple[float | None, int]:
        prev = self._last.pop(sid, None)
        pend = self._pending.pop(sid, None)
        if pend is not None and learn:
            self.predictor.update(pend[1], 1.0)
        if prev is None:
            return None, tag
        self._last[sid] = prev
        return now - prev[0], prev[1]

    def record(self, sid: Hashable, now: float, tag: int, x: Any) -> None:
        self._last.pop(sid, None)
        self._last[sid] = (now, tag)
        if x is not None:
            self._pending[sid] = (now, x)

    def expire(self, now: float, horizon: float, learn: bool) -> None:
        while self._pending:
            sid, (t, x) = next(iter(self._pending.items()))
            if now - t <= horizon:
                break
            self._pending.popitem(last=False)
            if learn:
                self.predictor.update(x, 0.0)
        limit = 4 * horizon
        while self._last:
            sid, (t, _) = next(iter(self._last.items()))
            if now - t <= limit:
                break
            self._last.popitem(last=False)


# compiled classes share one ABC cache unless given their own (aicache.compiled_abc)
own_abc_caches(HiddenStateSource)
