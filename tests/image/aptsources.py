"""The machine's own Debian mirror, read from its apt sources at run time (never written into the repository).

deb822 files (``/etc/apt/sources.list.d/*.sources``) and one-line files (``/etc/apt/sources.list``,
``sources.list.d/*.list``) are both read; every enabled ``deb`` entry becomes one one-line source for mmdebstrap,
so the base image gets the same suites (release, updates, security) the host installs from.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

APT_ETC = Path("/etc/apt")
# apt options the host sets that a base made from the same mirror needs too: a snapshot mirror's Release files are
# past their Valid-Until date, and apt refuses them unless told not to check (the host's apt.conf.d says so).
FORWARDED_APT_OPTIONS = ("Acquire::Check-Valid-Until", "Acquire::Check-Date")


class NoAptSources(RuntimeError):
    """The machine's apt sources name no usable Debian mirror."""


@dataclass(frozen=True)
class Source:
    uri: str
    suite: str
    components: tuple[str, ...]
    signed_by: str | None
    origin: Path

    def one_line(self) -> str:
        """The source in sources.list's one-line format, as mmdebstrap takes a mirror argument."""
        options = f"[signed-by={self.signed_by}] " if self.signed_by else ""
        return f"deb {options}{self.uri} {self.suite} {' '.join(self.components)}"


def _deb822_paragraphs(text: str) -> list[dict[str, str]]:
    paragraphs: list[dict[str, str]] = []
    fields: dict[str, str] = {}
    key = ""
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        if not line.strip():
            if fields:
                paragraphs.append(fields)
            fields, key = {}, ""
        elif line[0] in " \t" and key:
            fields[key] += "\n" + line.strip()  # a continuation line (e.g. an inline Signed-By key)
        elif ":" in line:
            key, value = line.split(":", 1)
            key = key.strip().lower()
            fields[key] = value.strip()
    if fields:
        paragraphs.append(fields)
    return paragraphs


def _signed_by(value: str | None, origin: Path) -> str | None:
    if not value:
        return None
    if "\n" in value or value.startswith("-----BEGIN"):
        raise NoAptSources(f"{origin}: Signed-By holds an inline key; mmdebstrap needs a keyring file path there")
    return value.split()[0]


def parse_deb822(text: str, origin: Path) -> list[Source]:
    sources = []
    for fields in _deb822_paragraphs(text):
        if fields.get("enabled", "yes").lower() == "no" or "deb" not in fields.get("types", "").split():
            continue
        signed_by = _signed_by(fields.get("signed-by"), origin)
        components = tuple(fields.get("components", "").split())
        for uri in fields.get("uris", "").split():
            for suite in fields.get("suites", "").split():
                sources.append(Source(uri, suite, components, signed_by, origin))
    return sources


_ONE_LINE = re.compile(
    r"^deb\s+(?:\[(?P<options>[^\]]*)\]\s+)?(?P<uri>\S+)\s+(?P<suite>\S+)(?P<components>(?:\s+\S+)*)"
)


def parse_one_line(text: str, origin: Path) -> list[Source]:
    sources = []
    for raw in text.splitlines():
        match = _ONE_LINE.match(raw.split("#", 1)[0].strip())
        if not match:
            continue
        options = dict(
            option.split("=", 1) for option in (match.group("options") or "").split() if "=" in option
        )
        signed_by = _signed_by(options.get("signed-by"), origin)
        components = tuple(match.group("components").split())
        sources.append(Source(match.group("uri"), match.group("suite"), components, signed_by, origin))
    return sources


def host_sources(etc: Path = APT_ETC) -> list[Source]:
    """Every enabled ``deb`` source of this machine, in apt's reading order."""
    sources: list[Source] = []
    files = [etc / "sources.list", *sorted((etc / "sources.list.d").glob("*"))]
    for path in files:
        if not path.is_file():
            continue
        if path.suffix == ".sources":
            sources += parse_deb822(path.read_text(), path)
        elif path.suffix == ".list" or path.name == "sources.list":
            sources += parse_one_line(path.read_text(), path)
    if not sources:
        raise NoAptSources(f"no enabled 'deb' source in {etc}/sources.list or {etc}/sources.list.d/")
    return sources


def release_suite(sources: list[Source]) -> str:
    """The distribution's release suite (bookworm), not one of its -updates/-security/-backports suites."""
    for source in sources:
        if "-" not in source.suite and "/" not in source.suite:
            return source.suite
    raise NoAptSources(f"no release suite among the apt sources' suites {sorted({s.suite for s in sources})}")


def forwarded_apt_options() -> list[str]:
    """The host's settings of :data:`FORWARDED_APT_OPTIONS`, as ``--aptopt`` values (``apt-config dump`` lines)."""
    dump = subprocess.run(["apt-config", "dump"], capture_output=True, text=True, check=True, timeout=30).stdout
    wanted = {f"{name} " for name in FORWARDED_APT_OPTIONS}
    return [line.strip() for line in dump.splitlines() if any(line.startswith(prefix) for prefix in wanted)]
