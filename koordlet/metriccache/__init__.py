"""Metric cache: in-memory rings for recent samples, SQLite for history and a small KV store."""

from koordlet.metriccache.aggregate import Aggregate, aggregate, percentile
from koordlet.metriccache.cache import CacheSettings, Labels, MetricCache, labels_of, pod_labels, series_key

__all__ = ["Aggregate", "CacheSettings", "Labels", "MetricCache", "aggregate", "labels_of", "percentile", "pod_labels",
           "series_key"]
