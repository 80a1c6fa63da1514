"""cgroup v1's CFS quota hierarchy rule, worked out on a plain directory tree: caps to the nearest limited
ancestor, and the descendants to cap (deepest first) before a group is lowered."""

from __future__ import annotations

from pathlib import Path

from koordlet.resourceexecutor import cfsquota
from koordlet.resourceexecutor.update import CgroupUpdate
from koordlet.system import resources as r


def group(root: Path, rel: str, quota: int, period: int = 100_000) -> None:
    directory = root / rel
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "cpu.cfs_quota_us").write_text(f"{quota}\n")
    (directory / "cpu.cfs_period_us").write_text(f"{period}\n")


def read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def test_a_quota_is_capped_to_the_nearest_limited_ancestor(tmp_path: Path) -> None:
    group(tmp_path, "be", 30_000)
    group(tmp_path, "be/pod", -1)  # unlimited: inherits be's limit
    group(tmp_path, "be/pod/c", -1, period=50_000)
    update = CgroupUpdate(r.CPU_CFS_QUOTA, "be/pod/c", 100_000, "batchresource")
    fitted = cfsquota.fit_to_parent(update, str(tmp_path / "be/pod/c"), str(tmp_path), read)
    assert fitted.value == 15_000 and "capped" in fitted.owner  # 30% of its 50 ms period
    assert cfsquota.fit_to_parent(CgroupUpdate(r.CPU_CFS_QUOTA, "be/pod/c", 10_000, "x"),
                                  str(tmp_path / "be/pod/c"), str(tmp_path), read).value == 10_000
    assert cfsquota.binding_limit(str(tmp_path / "be/pod"), str(tmp_path), read) == (30_000, 100_000)
    assert cfsquota.binding_limit(str(tmp_path), str(tmp_path), read) is None  # the root is never a limit
    assert cfsquota.capped(5_000, 100_000, (100, 100_000)) == cfsquota.MIN_QUOTA_US
    assert cfsquota.capped(-1, 100_000, (100, 100_000)) == -1


def test_lowering_a_group_caps_its_descendants_deepest_first(tmp_path: Path) -> None:
    group(tmp_path, "be", -1)
    group(tmp_path, "be/pod-a", 100_000)
    group(tmp_path, "be/pod-a/c1", 100_000)
    group(tmp_path, "be/pod-a/c2", 10_000)  # already below: left alone
    group(tmp_path, "be/pod-b", -1)
    group(tmp_path, "be/pod-b/c3", 80_000)
    (tmp_path / "be/not-a-group").mkdir()  # no quota file: skipped
    update = CgroupUpdate(r.CPU_CFS_QUOTA, "be", 27_400, "cpusuppress")
    caps = cfsquota.descendants_above(update, str(tmp_path / "be"), read)
    assert [(c.rel_dir, c.value) for c in caps] == [
        ("be/pod-a/c1", 27_400), ("be/pod-a", 27_400), ("be/pod-b/c3", 27_400)]
    assert cfsquota.descendants_above(CgroupUpdate(r.CPU_CFS_QUOTA, "be", -1, "x"), str(tmp_path / "be"), read) == []
