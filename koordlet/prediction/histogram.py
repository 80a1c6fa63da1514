"""Exponentially bucketed histograms whose samples decay with a half-life, and their checkpoint form.

A port of Koordinator's ``pkg/util/histogram`` (itself taken from the Kubernetes vertical-pod-autoscaler):
``histogram_options.go`` (``NewExponentialHistogramOptions``), ``histogram.go`` (``Percentile`` returns the
*end* of the bucket holding the percentile, weights below epsilon count as empty), ``decaying_histogram.go``
(a sample at time t weighs ``2^((t - reference) / halfLife)``; the reference moves forward in whole half-lives
once the exponent passes 100, rescaling the weights) and ``histogram_checkpoint.go`` (bucket weights scaled so
the heaviest is 10000, stored as integers, plus the total weight and the reference timestamp).

The arithmetic follows the Go code step for step (same float operations, ``int()`` truncation where Go
converts), so a percentile here equals upstream's for the same samples.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Final

from koordlet.apis.nodemetric import format_time, parse_time
from koordlet.errors import ParseError

MAX_CHECKPOINT_WEIGHT: Final = 10000
"""The heaviest bucket's weight in a checkpoint (``MaxCheckpointWeight``)."""
MAX_DECAY_EXPONENT: Final = 100
"""Past 2^100 the reference timestamp is moved forward (``maxDecayExponent``)."""
GO_ZERO_TIME_OFFSET_SECONDS: Final = 62135596800
"""Seconds from Go's zero time (0001-01-01 UTC) to the Unix epoch: Go's ``Time.Round`` rounds to multiples
of the duration counted from the zero time, not from the epoch."""


@dataclass(frozen=True, slots=True)
class ExponentialOptions:
    """Buckets growing by ``ratio``: bucket n >= 1 starts at ``first_bucket_size * (ratio^n - 1) / (ratio - 1)``
    and the last bucket starts at or above ``max_value``."""

    max_value: float
    first_bucket_size: float
    ratio: float
    epsilon: float
    num_buckets: int = field(init=False)

    def __post_init__(self) -> None:
        if self.max_value <= 0 or self.first_bucket_size <= 0 or self.ratio <= 1.0 or self.epsilon <= 0:
            raise ValueError("histogram options: max_value, first_bucket_size and epsilon must be > 0, "
                             f"ratio > 1, got {self.max_value}, {self.first_bucket_size}, {self.ratio}, "
                             f"{self.epsilon}")
        count = math.ceil(_log(self.ratio, self.max_value * (self.ratio - 1) / self.first_bucket_size + 1)) + 1
        object.__setattr__(self, "num_buckets", count)

    def find_bucket(self, value: float) -> int:
        if value < self.first_bucket_size:
            return 0
        bucket = int(_log(self.ratio, value * (self.ratio - 1) / self.first_bucket_size + 1))
        return min(bucket, self.num_buckets - 1)

    def bucket_start(self, bucket: int) -> float:
        if bucket < 0 or bucket >= self.num_buckets:
            raise IndexError(f"bucket {bucket} out of range [0..{self.num_buckets - 1}]")
        if bucket == 0:
            return 0.0
        return self.first_bucket_size * (math.pow(self.ratio, bucket) - 1) / (self.ratio - 1)


def _log(base: float, x: float) -> float:
    return math.log(x) / math.log(base)


def _go_round(x: float) -> int:
    # pkg/util/histogram's round(): floor(x + 0.5).
    return math.floor(x + 0.5)


@dataclass(slots=True)
class HistogramCheckpoint:
    """``HistogramCheckpoint``: JSON ``{"referenceTimestamp", "bucketWeights", "totalWeight"}``."""

    reference_timestamp: float | None
    """Epoch seconds; None for a histogram that never took a sample (Go's zero time)."""
    bucket_weights: dict[int, int]
    total_weight: float

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.reference_timestamp is not None:
            out["referenceTimestamp"] = format_time(self.reference_timestamp)
        if self.bucket_weights:
            out["bucketWeights"] = {str(k): v for k, v in sorted(self.bucket_weights.items())}
        if self.total_weight:
            out["totalWeight"] = self.total_weight
        return out

    @classmethod
    def from_json(cls, obj: Any, where: str) -> HistogramCheckpoint:
        if not isinstance(obj, dict):
            raise ParseError(f"{where}: expected an object, got {type(obj).__name__}")
        try:
            ref = obj.get("referenceTimestamp")
            reference = parse_time(ref) if ref else None
            if reference is not None and reference <= -GO_ZERO_TIME_OFFSET_SECONDS + 1:
                reference = None  # Go's zero time written out
            weights = {int(k): int(v) for k, v in (obj.get("bucketWeights") or {}).items()}
            total = float(obj.get("totalWeight") or 0.0)
        except (TypeError, ValueError, AttributeError, ParseError) as exc:
            raise ParseError(f"{where}: {exc}") from None
        if any(v < 0 for v in weights.values()):
            raise ParseError(f"{where}.bucketWeights: weights must be non-negative")
        if not math.isfinite(total) or total < 0:
            raise ParseError(f"{where}.totalWeight: must be a finite non-negative number, got {total}")
        return cls(reference, weights, total)


class DecayingHistogram:
    """``decayingHistogram``: newer samples weigh more; a sample loses half its weight every half-life."""

    def __init__(self, options: ExponentialOptions, half_life_seconds: float) -> None:
        if half_life_seconds <= 0:
            raise ValueError(f"half_life_seconds must be > 0, got {half_life_seconds}")
        self.options = options
        self.half_life = float(half_life_seconds)
        self.reference: float | None = None
        self.weights = [0.0] * options.num_buckets
        self.total = 0.0
        self.min_bucket = options.num_buckets - 1
        self.max_bucket = 0

    # ---------------------------------------------------------------------------------- plain histogram

    def is_empty(self) -> bool:
        return self.weights[self.min_bucket] < self.options.epsilon

    def percentile(self, p: float) -> float:
        """The end of the bucket in which the cumulative weight reaches ``p`` of the total; 0 when empty."""
        if self.is_empty():
            return 0.0
        threshold = p * self.total
        partial = 0.0
        bucket = self.min_bucket
        while bucket < self.max_bucket:
            partial += self.weights[bucket]
            if partial >= threshold:
                break
            bucket += 1
        if bucket < self.options.num_buckets - 1:
            return self.options.bucket_start(bucket + 1)
        return self.options.bucket_start(bucket)  # the last bucket has no end

    def _add_weight(self, value: float, weight: float) -> None:
        if weight < 0:
            raise ValueError("sample weight must be non-negative")
        bucket = self.options.find_bucket(value)
        self.weights[bucket] += weight
        self.total += weight
        if bucket < self.min_bucket and self.weights[bucket] >= self.options.epsilon:
            self.min_bucket = bucket
        if bucket > self.max_bucket and self.weights[bucket] >= self.options.epsilon:
            self.max_bucket = bucket

    def _update_min_max(self) -> None:
        eps = self.options.epsilon
        last = self.options.num_buckets - 1
        while self.weights[self.min_bucket] < eps and self.min_bucket < last:
            self.min_bucket += 1
        while self.weights[self.max_bucket] < eps and self.max_bucket > 0:
            self.max_bucket -= 1

    def _scale(self, factor: float) -> None:
        for bucket in range(self.min_bucket, self.max_bucket + 1):
            self.weights[bucket] *= factor
        self.total *= factor
        self._update_min_max()

    # ---------------------------------------------------------------------------------- decay

    def add_sample(self, value: float, weight: float, when: float) -> None:
        """Adds ``value`` with ``weight`` at epoch second ``when``."""
        self._add_weight(value, weight * self._decay_factor(when))

    def _round_to_half_life(self, when: float) -> float:
        # Go's Time.Round(halfLife): nearest multiple counted from year 1, halfway rounds up.
        since_zero = when + GO_ZERO_TIME_OFFSET_SECONDS
        return math.floor(since_zero / self.half_life + 0.5) * self.half_life - GO_ZERO_TIME_OFFSET_SECONDS

    def _shift_reference(self, new_reference: float) -> None:
        new_reference = self._round_to_half_life(new_reference)
        if self.reference is None:
            # From Go's zero time the exponent is some -2^17: every weight scales to zero.
            self._scale(0.0)
        else:
            self._scale(math.ldexp(1.0, _go_round((self.reference - new_reference) / self.half_life)))
        self.reference = new_reference

    def _decay_factor(self, when: float) -> float:
        if self.reference is None or when > self.reference + self.half_life * MAX_DECAY_EXPONENT:
            self._shift_reference(when)
        assert self.reference is not None
        return math.pow(2.0, (when - self.reference) / self.half_life)

    # ---------------------------------------------------------------------------------- checkpoint

    def save(self) -> HistogramCheckpoint:
        heaviest = max((self.weights[b] for b in range(self.min_bucket, self.max_bucket + 1)), default=0.0)
        weights: dict[int, int] = {}
        if heaviest > 0:
            ratio = MAX_CHECKPOINT_WEIGHT / heaviest
            for bucket in range(self.min_bucket, self.max_bucket + 1):
                scaled = _go_round(self.weights[bucket] * ratio)
                if scaled > 0:
                    weights[bucket] = scaled
        return HistogramCheckpoint(self.reference, weights, self.total)

    def load(self, checkpoint: HistogramCheckpoint) -> None:
        """Adds the checkpoint's samples (``LoadFromCheckpoint``); raises ValueError on a checkpoint that does
        not fit these buckets, leaving the histogram unchanged."""
        if checkpoint.total_weight < 0:
            raise ValueError(f"checkpoint total weight is negative: {checkpoint.total_weight}")
        for bucket in checkpoint.bucket_weights:
            if not 0 <= bucket < self.options.num_buckets:
                raise ValueError(f"checkpoint bucket {bucket} outside [0..{self.options.num_buckets - 1}]")
        total = sum(checkpoint.bucket_weights.values())
        if total == 0:
            return
        ratio = checkpoint.total_weight / total
        for bucket, weight in checkpoint.bucket_weights.items():
            self.min_bucket = min(self.min_bucket, bucket)
            self.max_bucket = max(self.max_bucket, bucket)
            self.weights[bucket] += weight * ratio
        self.total += checkpoint.total_weight
        self.reference = checkpoint.reference_timestamp
