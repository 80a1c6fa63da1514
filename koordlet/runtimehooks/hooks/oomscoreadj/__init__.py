"""``oomscoreadj`` (Koordinator ``runtimehooks/hooks/oomscoreadj``, feature gate ``OOMScoreAdj``): a
container's ``oom_score_adj`` from its pod's annotations (``apis/extension``):

* ``koordinator.sh/oom-score-adj-spec``: per container, JSON ``{"<container>": <int>, ...}``; wins;
* ``koordinator.sh/oom-score-adj``: the pod-level default, a decimal integer.

Both are *annotations*, read for every pod whatever its QoS class (upstream registers its reconciler
with ``NoneFilter``, SYSTEM pods included).  The value must lie in [-1000, 1000] (the kernel's
``OOM_SCORE_ADJ_MIN``/``MAX``).  Without either annotation (or a spec naming another container and no
default) the container is left alone.  Garbage (not JSON, not an integer, out of range) raises
:class:`KoordletError` naming the pod and the annotation; upstream only logs and skips, the runner here
records the error instead.

The annotations are tenant input: outside the namespaces ``tenant.oomScoreAdjNamespaces`` allows, a value
below the one kubelet gives the container (-997 Guaranteed, 3..999 Burstable by memory request, 1000
BestEffort) makes the runner's tenant gate drop both annotations before this hook runs
(:mod:`koordlet.apis.tenantpolicy`); the reconciler runs this hook too, so running processes get the same
bound.

Upstream writes ``/proc/<pid>/oom_score_adj`` of the container's processes from its reconciler; this hook
puts the value into the container's creation request instead (``LinuxContainerResources.oom_score_adj``
/ NRI ``oom_score_adj``), so the first process starts with it.  Pod sandboxes are not touched (the
runtime manages the pause container's value), which the container-only stage ensures.
"""

from __future__ import annotations

import re

from koordlet.apis.pod import Pod
from koordlet.config import gates
from koordlet.errors import KoordletError
from koordlet.plugins import Plugin
from koordlet.runtimehooks.deps import HookDeps
from koordlet.runtimehooks.framework import Hook, HookContext, Stage, load_json

NAME = "oomscoreadj"
STAGES = frozenset({Stage.PRE_CREATE_CONTAINER})
ANNOTATION_OOM_SCORE_ADJ = "koordinator.sh/oom-score-adj"
ANNOTATION_OOM_SCORE_ADJ_SPEC = "koordinator.sh/oom-score-adj-spec"
OOM_SCORE_ADJ_MIN = -1000
OOM_SCORE_ADJ_MAX = 1000

_DECIMAL = re.compile(r"[+-]?[0-9]+")
"""What Go's ``strconv.ParseInt(s, 10, 64)`` accepts (no spaces, no ``_``, unlike Python's ``int``)."""


def _in_range(value: int, where: str) -> int:
    if not OOM_SCORE_ADJ_MIN <= value <= OOM_SCORE_ADJ_MAX:
        raise KoordletError(f"{where}: {value} is outside [{OOM_SCORE_ADJ_MIN}, {OOM_SCORE_ADJ_MAX}]")
    return value


def oom_score_adj(pod: Pod, container: str) -> int | None:
    """The value for ``container`` of ``pod``, None when the annotations set none."""
    spec = pod.annotations.get(ANNOTATION_OOM_SCORE_ADJ_SPEC)
    if spec:
        where = f"pod {pod.key}: annotation {ANNOTATION_OOM_SCORE_ADJ_SPEC}"
        values = load_json(spec, where)
        if not isinstance(values, dict):
            raise KoordletError(f"{where}: expected a JSON object of container name to integer")
        if container in values:
            value = values[container]
            if isinstance(value, bool) or not isinstance(value, int):
                raise KoordletError(f"{where}: {container}: expected an integer, got {value!r}")
            return _in_range(value, f"{where}: {container}")
    default = pod.annotations.get(ANNOTATION_OOM_SCORE_ADJ)
    if default:
        where = f"pod {pod.key}: annotation {ANNOTATION_OOM_SCORE_ADJ}"
        if not _DECIMAL.fullmatch(default):
            raise KoordletError(f"{where}: not an integer: {default!r}")
        if len(default.lstrip("+-").lstrip("0")) > 4:  # out of range, and int() refuses 4300+ digits
            raise KoordletError(f"{where}: {default[:16]}{'...' if len(default) > 16 else ''} is outside "
                                f"[{OOM_SCORE_ADJ_MIN}, {OOM_SCORE_ADJ_MAX}]")
        return _in_range(int(default), where)
    return None


def run(ctx: HookContext) -> None:
    container = ctx.request.container
    if container is None:
        return
    value = oom_score_adj(ctx.request.pod, container.name)
    if value is not None:
        ctx.set("oom_score_adj", value)


def new(deps: HookDeps) -> Hook:
    return Hook(NAME, "container oom_score_adj from the koordinator.sh/oom-score-adj(-spec) annotations", STAGES, run)


PLUGIN: Plugin[HookDeps, Hook] = Plugin(NAME, new, gate=gates.OOM_SCORE_ADJ)
