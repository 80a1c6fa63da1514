"""The C parsers against expected values and against the pure-Python reference (koordlet.native_ref)."""

from __future__ import annotations

import errno

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from koordlet import native
from koordlet import native_ref as ref
from koordlet.errors import ParseError

INT, KV, CPU_MAX, CPULIST, PSI, MEMINFO, RAW, STAT_TOTAL = (k.value for k in native.Kind)


def both(kind: int, keys: str | None, data: bytes) -> tuple[int, int, int, list[int]]:
    """Parses with C and Python; asserts they agree (values only when there is no error)."""
    c = native.parse_result(kind, keys, data)
    py = ref.parse(kind, keys.split(" ") if keys is not None else None, data)
    assert c[0] == py.err, (kind, keys, data, c, py)
    if not c[0]:
        assert (c[1], c[2], c[3]) == (py.count, py.found, py.v), (kind, keys, data)
    return c


@pytest.mark.parametrize(
    ("data", "value"),
    [
        (b"123\n", 123),
        (b"-1\n", -1),
        (b"max\n", -1),
        (b"  7  ", 7),
        (b"9223372036854775807", 2**63 - 1),
        (b"-0", 0),
        (b"0\n\n", 0),
    ],
)
def test_int_values(data: bytes, value: int) -> None:
    assert both(INT, None, data)[3][0] == value
    assert native.parse(native.Kind.INT, data) == value


@pytest.mark.parametrize(
    ("data", "err"),
    [
        (b"", errno.ENODATA),
        (b" \n", errno.ENODATA),
        (b"12a", errno.EBADMSG),
        (b"1 2", errno.EBADMSG),
        (b"9223372036854775808", errno.ERANGE),
        (b"-", errno.EBADMSG),
        (b"+5", errno.EBADMSG),
        (b"maxx", errno.EBADMSG),
        (b"1\n2", errno.EBADMSG),
        (b"\x00", errno.EBADMSG),
    ],
)
def test_int_errors(data: bytes, err: int) -> None:
    assert both(INT, None, data)[0] == err
    with pytest.raises(ParseError) as info:
        native.parse(native.Kind.INT, data)
    assert info.value.errno == err


V1_CPU_STAT = b"nr_periods 31\nnr_throttled 30\nthrottled_time 2459000000\nnr_bursts 0\nburst_time 0\n"
V2_CPU_STAT = (
    b"usage_usec 2085000\nuser_usec 1000\nsystem_usec 2084000\ncore_sched.force_idle_usec 0\n"
    b"nr_periods 10\nnr_throttled 2\nthrottled_usec 500\nnr_bursts 0\nburst_usec 0\n"
)
V1_MEMORY_STAT = (
    b"cache 48021504\nrss 1490944\ninactive_anon 100\nactive_anon 200\nunevictable 0\n"
    b"hierarchical_memory_limit 9223372036854771712\ntotal_cache 5\ntotal_rss 6\n"
    b"total_inactive_anon 4096\ntotal_active_anon 8192\ntotal_unevictable 12\n"
)


def test_kv_selected_keys() -> None:
    keys = ["total_inactive_anon", "total_active_anon", "total_unevictable", "missing"]
    assert native.parse(native.Kind.KV, V1_MEMORY_STAT, keys) == {
        "total_inactive_anon": 4096,
        "total_active_anon": 8192,
        "total_unevictable": 12,
    }
    assert both(KV, " ".join(keys), V1_MEMORY_STAT)[:3] == (0, 3, 0b0111)
    assert native.parse(native.Kind.KV, V2_CPU_STAT, ["usage_usec", "nr_throttled"]) == {
        "usage_usec": 2085000,
        "nr_throttled": 2,
    }
    assert native.parse(native.Kind.KV, V1_CPU_STAT, ["nr_periods", "throttled_time"]) == {
        "nr_periods": 31,
        "throttled_time": 2459000000,
    }


@pytest.mark.parametrize(
    ("data", "err"),
    [
        (b"a\n", errno.EBADMSG),
        (b"a b\n", errno.EBADMSG),
        (b"a 1 2\n", errno.EBADMSG),
        (b"a 99999999999999999999\n", errno.ERANGE),
        (b"a 1\nbroken\n", errno.EBADMSG),
    ],
)
def test_kv_errors(data: bytes, err: int) -> None:
    assert both(KV, "a", data)[0] == err


def test_kv_empty_and_blank_lines() -> None:
    assert both(KV, "a", b"")[:3] == (0, 0, 0)
    assert both(KV, "a b", b"\n\n a  1 \n\t\nb\t2")[:3] == (0, 2, 3)


def test_kv_all_matches_reference() -> None:
    assert native.parse_kv_all_result(KV, V1_MEMORY_STAT) == ref.parse_kv_all(KV, V1_MEMORY_STAT)
    assert native.parse_kv_all_result(KV, V1_MEMORY_STAT, names_len=20) == errno.ENOSPC
    assert ref.parse_kv_all(KV, V1_MEMORY_STAT, names_len=20) == errno.ENOSPC
    assert native.parse_kv_all_result(KV, V1_MEMORY_STAT, max_keys=3) == errno.ENOSPC


MEMINFO_SAMPLE = (
    b"MemTotal:       24684048 kB\nMemFree:        24390140 kB\nMemAvailable:   24383040 kB\n"
    b"Active(anon):      12345 kB\nHugePages_Total:       0\nHugepagesize:       2048 kB\n"
)
NODE_MEMINFO = b"Node 0 MemTotal:       16337604 kB\nNode 0 MemFree:         1000 kB\nNode 0 HugePages_Free:     0\n"


def test_meminfo() -> None:
    assert native.parse(native.Kind.MEMINFO, MEMINFO_SAMPLE, ["MemTotal", "MemAvailable", "HugePages_Total"]) == {
        "MemTotal": 24684048 * 1024,
        "MemAvailable": 24383040 * 1024,
        "HugePages_Total": 0,
    }
    assert native.parse(native.Kind.MEMINFO, NODE_MEMINFO, ["MemTotal", "MemFree"]) == {
        "MemTotal": 16337604 * 1024,
        "MemFree": 1000 * 1024,
    }
    both(MEMINFO, "MemTotal Active(anon)", MEMINFO_SAMPLE)
    assert native.parse_kv_all_result(MEMINFO, NODE_MEMINFO) == ref.parse_kv_all(MEMINFO, NODE_MEMINFO)


@pytest.mark.parametrize(
    "data",
    [
        b"MemTotal 12 kB",
        b"MemTotal: 12 MB",
        b"MemTotal: 12kB",
        b": 12",
        b"Node x MemTotal: 1 kB",
        b"Node 0",
        b"MemTotal: kB",
    ],
)
def test_meminfo_errors(data: bytes) -> None:
    assert both(MEMINFO, "MemTotal", data)[0] == errno.EBADMSG


def test_meminfo_scaling_overflow() -> None:
    assert both(MEMINFO, "MemTotal", b"MemTotal: 9007199254740992 kB")[0] == errno.ERANGE
    assert both(MEMINFO, "MemTotal", b"MemTotal: 9007199254740991 kB")[3][0] == 9007199254740991 * 1024


@pytest.mark.parametrize(
    ("data", "value"),
    [(b"max 100000\n", (-1, 100000)), (b"50000 100000", (50000, 100000)), (b"max\t100000", (-1, 100000))],
)
def test_cpu_max(data: bytes, value: tuple[int, int]) -> None:
    assert native.parse(native.Kind.CPU_MAX, data) == value
    both(CPU_MAX, None, data)


@pytest.mark.parametrize(
    ("data", "err"),
    [
        (b"", errno.ENODATA),
        (b"max", errno.EBADMSG),
        (b"100000", errno.EBADMSG),
        (b"maxx 1", errno.EBADMSG),
        (b"1 2 3", errno.EBADMSG),
        (b"1 max", errno.EBADMSG),
    ],
)
def test_cpu_max_errors(data: bytes, err: int) -> None:
    assert both(CPU_MAX, None, data)[0] == err


@pytest.mark.parametrize(
    ("data", "cpus"),
    [
        (b"0-3,8\n", [0, 1, 2, 3, 8]),
        (b"", []),
        (b"\n", []),
        (b"5", [5]),
        (b"2047", [2047]),
        (b"1,1,0-1", [0, 1]),
        (b"63-65", [63, 64, 65]),
    ],
)
def test_cpulist(data: bytes, cpus: list[int]) -> None:
    assert native.parse(native.Kind.CPULIST, data) == cpus
    assert both(CPULIST, None, data)[1] == len(cpus)


@pytest.mark.parametrize(
    ("data", "err"),
    [
        (b"3-1", errno.EBADMSG),
        (b"0,", errno.EBADMSG),
        (b",0", errno.EBADMSG),
        (b"0 - 1", errno.EBADMSG),
        (b"2048", errno.ERANGE),
        (b"0-4096", errno.ERANGE),
        (b"-1", errno.EBADMSG),
        (b"1;2", errno.EBADMSG),
        (b"99999999999999999999999", errno.ERANGE),
    ],
)
def test_cpulist_errors(data: bytes, err: int) -> None:
    assert both(CPULIST, None, data)[0] == err


PSI_SAMPLE = b"some avg10=1.23 avg60=0.46 avg300=0.27 total=1271275\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"


def test_psi() -> None:
    psi = native.parse(native.Kind.PSI, PSI_SAMPLE)
    assert psi.some == native.PsiLine(1.23, 0.46, 0.27, 1271275)
    assert psi.full == native.PsiLine(0.0, 0.0, 0.0, 0)
    only_some = native.parse(native.Kind.PSI, PSI_SAMPLE.split(b"\n")[0])
    assert only_some.full is None
    both(PSI, None, PSI_SAMPLE)


@pytest.mark.parametrize(
    ("data", "err"),
    [
        (b"", errno.ENODATA),
        (b"full avg10=0.00 avg60=0.00 avg300=0.00 total=0", errno.EBADMSG),
        (b"some avg10=1.2 avg60=0.00 avg300=0.00 total=0", errno.EBADMSG),
        (b"some avg10=1.234 avg60=0.00 avg300=0.00 total=0", errno.EBADMSG),
        (b"some avg60=0.00 avg10=0.00 avg300=0.00 total=0", errno.EBADMSG),
        (b"some avg10=0.00 avg60=0.00 avg300=0.00", errno.EBADMSG),
        (b"some avg10=0.00 avg60=0.00 avg300=0.00 total=-1", errno.EBADMSG),
        (b"some avg10=0.00 avg60=0.00 avg300=0.00 total=99999999999999999999", errno.ERANGE),
        (b"other avg10=0.00 avg60=0.00 avg300=0.00 total=0", errno.EBADMSG),
    ],
)
def test_psi_errors(data: bytes, err: int) -> None:
    assert both(PSI, None, data)[0] == err


PROC_STAT = (
    b"cpu  2737 0 1042 80026 160 0 62 2 0 0\ncpu0 444 0 349 47479 5 0 30 1 0 0\n"
    b"cpu1 2313 0 720 45102 155 0 32 0 0 0\nintr 1 2 3\nctxt 12345\nbtime 1\nprocesses 10\n"
)


def test_proc_stat() -> None:
    parsed = native.parse_proc_stat_result(PROC_STAT)
    assert parsed == ref.parse_proc_stat(PROC_STAT)
    assert parsed == [
        (-1, [2737, 0, 1042, 80026, 160, 0, 62, 2, 0, 0]),
        (0, [444, 0, 349, 47479, 5, 0, 30, 1, 0, 0]),
        (1, [2313, 0, 720, 45102, 155, 0, 32, 0, 0, 0]),
    ]
    # An old kernel's 4-field lines, and a future kernel's 11th field.
    short = b"cpu 1 2 3 4\ncpu0 1 2 3 4 5 6 7 8 9 10 11\n"
    assert native.parse_proc_stat_result(short) == ref.parse_proc_stat(short)


@pytest.mark.parametrize(
    ("data", "err"),
    [
        (b"", errno.EBADMSG),
        (b"cpu0 1 2 3 4\n", errno.EBADMSG),
        (b"cpu 1 2 3\n", errno.EBADMSG),
        (b"cpu 1 2 3 x\n", errno.EBADMSG),
        (b"cpux 1 2 3 4\ncpu 1 2 3 4", errno.EBADMSG),
    ],
)
def test_proc_stat_errors(data: bytes, err: int) -> None:
    assert native.parse_proc_stat_result(data) == err == ref.parse_proc_stat(data)


def test_proc_stat_aggregate_kind() -> None:
    assert native.parse(native.Kind.PROC_STAT, PROC_STAT) == native.CpuTimes(2737, 0, 1042, 80026, 160, 0, 62, 2, 0, 0)
    assert both(STAT_TOTAL, None, b"intr 1\ncpu  1 2 3 4\n")[:2] == (0, 4)
    for bad in (b"", b"cpu0 1 2 3 4\n", b"cpu  1 2 3\n", b"cpu  1 x 3 4\n"):
        assert both(STAT_TOTAL, None, bad)[0] == errno.EBADMSG


def test_proc_stat_capacity() -> None:
    assert native.parse_proc_stat_result(PROC_STAT, cap=2) == errno.ENOSPC == ref.parse_proc_stat(PROC_STAT, cap=2)


def test_bad_calls_are_rejected_not_crashed() -> None:
    with pytest.raises(ValueError, match="take no keys"):
        native.parse(native.Kind.INT, b"1", ["a"])
    with pytest.raises(ValueError, match="at least one key"):
        native.parse(native.Kind.KV, b"a 1")
    with pytest.raises(ValueError, match="invalid key"):
        native.parse(native.Kind.KV, b"a 1", ["a b"])
    with pytest.raises(ValueError, match="at most"):
        native.parse(native.Kind.KV, b"a 1", [f"k{i}" for i in range(33)])
    assert native.parse_result(99, None, b"1")[0] == errno.EINVAL
    assert native.parse_result(KV, "x" * 64, b"1")[0] == errno.EINVAL


# ------------------------------------------------------------------------------------------ properties

KINDS = [
    (INT, None),
    (KV, "a b nr_periods"),
    (CPU_MAX, None),
    (CPULIST, None),
    (PSI, None),
    (MEMINFO, "MemTotal Node"),
    (RAW, None),
]
ALPHABET = b" \t\n0123456789-.,=:abmxkBNodesomefulltavg"


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(kind=st.sampled_from(KINDS), data=st.binary(max_size=300))
def test_random_bytes_agree(kind: tuple[int, str | None], data: bytes) -> None:
    both(kind[0], kind[1], data)


@settings(max_examples=600, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(kind=st.sampled_from(KINDS), data=st.lists(st.sampled_from(list(ALPHABET)), max_size=120).map(bytes))
def test_near_valid_bytes_agree(kind: tuple[int, str | None], data: bytes) -> None:
    both(kind[0], kind[1], data)


PROC_STAT_SAMPLE = b"cpu  2737 0 1042 80026 160 0 62 2 0 0\ncpu0 444 0 349 47479 5 0 30 1 0 0\nctxt 1\n"
VALID_SAMPLES = [
    (INT, None, b"12345\n"),
    (KV, "nr_periods nr_throttled", V1_CPU_STAT),
    (KV, "usage_usec", V2_CPU_STAT),
    (CPU_MAX, None, b"max 100000\n"),
    (CPULIST, None, b"0-3,8,10-12\n"),
    (PSI, None, PSI_SAMPLE),
    (MEMINFO, "MemTotal HugePages_Total", MEMINFO_SAMPLE),
]


@settings(max_examples=600, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(
    sample=st.sampled_from(VALID_SAMPLES), cut=st.integers(0, 400), junk=st.binary(max_size=8), at=st.integers(0, 400)
)
def test_truncated_and_spliced_files_agree(
    sample: tuple[int, str | None, bytes], cut: int, junk: bytes, at: int
) -> None:
    kind, keys, data = sample
    truncated = data[: cut % (len(data) + 1)]
    both(kind, keys, truncated)
    pos = at % (len(data) + 1)
    both(kind, keys, data[:pos] + junk + data[pos:])


@settings(max_examples=50, deadline=None)
@given(data=st.binary(min_size=1, max_size=64))
def test_proc_stat_and_kv_all_random_agree(data: bytes) -> None:
    body = PROC_STAT + data
    assert native.parse_proc_stat_result(body) == ref.parse_proc_stat(body)
    assert native.parse_kv_all_result(KV, V1_CPU_STAT + data) == ref.parse_kv_all(KV, V1_CPU_STAT + data)


def test_oversized_content_is_an_entry_error(tmp_path: pytest.TempPathFactory) -> None:
    big = tmp_path / "memory.stat"  # type: ignore[operator]
    big.write_bytes(b"a 1\n" * (native.MAX_FILE_BYTES // 4 + 1))
    assert ref.read_file(big, KV, ["a"]).err == errno.EFBIG
    with pytest.raises(ParseError) as info:
        native.read_kv(big, ["a"])
    assert info.value.errno == errno.EFBIG
    fs = native.FileSet()
    slot = fs.add(big, native.Kind.KV, ["a"])
    assert fs.read().error(slot) == errno.EFBIG
