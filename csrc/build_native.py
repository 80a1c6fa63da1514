"""cffi build script for koordlet's C core (out-of-line API mode).

setup.py names it in ``cffi_modules``; it builds the private module ``koordlet._native`` that only
``koordlet/native/core.py`` imports.  The public header ``kcore.h`` is the cdef, so the ABI is written once.
"""

from __future__ import annotations

import pathlib
import re

from cffi import FFI

HERE = pathlib.Path(__file__).resolve().parent
SOURCES = ["kcore.c", "kcore_chunk.c", "kcore_parse.c", "kcore_sys.c"]
# Lines cffi's cdef parser cannot take: the include guard and #include.  Integer #defines stay (cffi
# exposes them as constants).
_SKIP = re.compile(r"^\s*#\s*(ifndef|endif|include|define\s+KOORDLET_KCORE_H)\b")


def cdef_from_header(path: pathlib.Path) -> str:
    return "\n".join(line for line in path.read_text().splitlines() if not _SKIP.match(line))


ffibuilder = FFI()
ffibuilder.cdef(cdef_from_header(HERE / "kcore.h"))
ffibuilder.set_source(
    "koordlet._native",
    '#include "kcore.h"',
    sources=[str((HERE / name).relative_to(HERE.parent)) for name in SOURCES],
    include_dirs=[str(HERE.relative_to(HERE.parent))],
    extra_compile_args=["-O2", "-std=gnu11", "-Wall", "-Wextra", "-Werror=implicit-function-declaration"],
)
