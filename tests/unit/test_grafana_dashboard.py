"""``manifests/grafana/koordlet-dashboard.json`` queries only what koordlet exports and is well formed.

The exported names are read from a real :class:`koordlet.metrics.KoordletMetrics` registry (with an empty
cache and no pods), so renaming a metric without updating the dashboard fails here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from koordlet.metriccache.cache import Labels
from koordlet.metrics import KoordletMetrics
from koordlet.statesinformer.framework import PodMeta

DASHBOARD = Path(__file__).resolve().parents[2] / "manifests" / "grafana" / "koordlet-dashboard.json"
DATASOURCE = "${DS_PROMETHEUS}"
# A PromQL identifier that names a series: koordlet's own, or the process collector koordlet registers.
METRIC_NAME = re.compile(r"\b(?:koordlet|process)_[a-zA-Z0-9_:]*")
# The sample names prometheus_client exposes for each family type.
SUFFIXES = {"gauge": ("",), "counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count", "_created"),
            "summary": ("", "_sum", "_count", "_created"), "unknown": ("",)}


class _EmptyCache:
    def latest(self, name: str, labels: Labels, max_age_seconds: float | None = None) -> tuple[float, float] | None:
        return None


class _NoPods:
    def pods(self) -> Sequence[PodMeta]:
        return ()


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    document = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    assert isinstance(document, dict)
    return document


@pytest.fixture(scope="module")
def exported_names() -> set[str]:
    metrics = KoordletMetrics(node_name="node-a", cache=_EmptyCache(), pods=_NoPods())
    names: set[str] = set()
    for registry in (metrics.internal, metrics.external):
        for family in registry.collect():
            names.update(family.name + suffix for suffix in SUFFIXES[family.type])
            names.update(sample.name for sample in family.samples)
    return names


def all_panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from all_panels(panel.get("panels", []))


def queries(dashboard: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(panel title, PromQL) of every target, then of every query variable."""
    for panel in all_panels(dashboard["panels"]):
        for target in panel.get("targets", []):
            yield panel["title"], target["expr"]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            yield f"variable {variable['name']}", variable["definition"]


def test_dashboard_header(dashboard: dict[str, Any]) -> None:
    assert dashboard["schemaVersion"] == 39
    assert dashboard["uid"] and dashboard["title"]
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["DS_PROMETHEUS"]["type"] == "datasource"
    assert variables["DS_PROMETHEUS"]["query"] == "prometheus"
    node = variables["node"]
    assert re.fullmatch(r"label_values\(koordlet_[a-z_]+, node\)", node["definition"])
    assert node["datasource"]["uid"] == DATASOURCE


def test_every_query_names_only_exported_metrics(dashboard: dict[str, Any], exported_names: set[str]) -> None:
    checked = 0
    for title, expr in queries(dashboard):
        used = set(METRIC_NAME.findall(expr))
        assert used, f"{title}: {expr!r} queries no koordlet metric"
        unknown = used - exported_names
        assert not unknown, f"{title}: {sorted(unknown)} are not exported by koordlet"
        checked += 1
    assert checked > 10


def test_dashboard_covers_the_feature_metrics(dashboard: dict[str, Any], exported_names: set[str]) -> None:
    used = {name for _, expr in queries(dashboard) for name in METRIC_NAME.findall(expr)}
    for family in ("koordlet_node_used_cpu_cores", "koordlet_node_used_memory_bytes", "koordlet_pod_resource_usage",
                   "koordlet_be_suppress_cpu_cores", "koordlet_pod_eviction",
                   "koordlet_resource_update_duration_milliseconds_count",
                   "koordlet_runtime_hook_invoked_duration_milliseconds_bucket",
                   "koordlet_kubelet_request_duration_seconds_bucket", "koordlet_pod_psi", "koordlet_container_cpi"):
        assert family in exported_names, f"{family} is no longer exported: update this test and the dashboard"
        assert family in used, f"no panel shows {family}"


def test_histograms_are_shown_as_quantiles(dashboard: dict[str, Any]) -> None:
    for title, expr in queries(dashboard):
        if "_bucket" in expr:
            assert "histogram_quantile(" in expr and "le" in expr, f"{title}: a bucket series outside a quantile"


def test_panels_have_unique_ids_and_a_place(dashboard: dict[str, Any]) -> None:
    panels = list(all_panels(dashboard["panels"]))
    ids = [panel["id"] for panel in panels]
    assert len(ids) == len(set(ids)), f"duplicate panel ids: {sorted(i for i in ids if ids.count(i) > 1)}"
    cells: set[tuple[int, int]] = set()
    for panel in panels:
        grid = panel["gridPos"]
        assert {"h", "w", "x", "y"} <= set(grid), panel["title"]
        assert grid["x"] + grid["w"] <= 24 and grid["h"] > 0 and grid["w"] > 0, panel["title"]
        xs, ys = range(grid["x"], grid["x"] + grid["w"]), range(grid["y"], grid["y"] + grid["h"])
        area = {(x, y) for x in xs for y in ys}
        assert not area & cells, f"{panel['title']} overlaps another panel"
        cells |= area


def test_every_query_uses_the_datasource_variable(dashboard: dict[str, Any]) -> None:
    for panel in all_panels(dashboard["panels"]):
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == DATASOURCE, panel["title"]
        assert panel["targets"], f"{panel['title']} has no query"
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == DATASOURCE, panel["title"]
    assert "DS_PROMETHEUS" in {i["name"] for i in dashboard.get("__inputs", [])}


def test_queries_filter_on_the_node_variable(dashboard: dict[str, Any]) -> None:
    for title, expr in queries(dashboard):
        if title.startswith("variable "):
            continue
        assert 'node=~"$node"' in expr, f"{title}: {expr!r} ignores the node picker"
