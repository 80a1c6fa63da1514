"""One package per runtime hook; each exports ``NAME`` and ``new(options) -> Hook``."""
