"""Declarative JSON fields for the NodeSLO and ConfigMap dataclasses, decoded the way Go's ``encoding/json`` does.

Each dataclass field carries a :class:`FieldSpec` (JSON name, parser, serialiser, doc) in its metadata, so one
generic :meth:`JsonObject.from_json` / :meth:`JsonObject.to_json` pair serves every struct:

- keys match exactly first, then case-insensitively (``encoding/json`` folds case; Koordinator's own docs spell
  ``MBAPercent`` and ``CPUEvictTimeWindowSeconds``), unknown keys are ignored, a later duplicate wins;
- ``null`` and absent keys leave the field ``None`` (Go's nil pointer), and ``None`` is left out when writing
  (``omitempty``);
- values of the wrong type or out of range raise :class:`ConfigError` naming the JSON path and the bad value.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any, Self

from koordlet.apis.duration import parse_duration
from koordlet.apis.quantity import parse_quantity
from koordlet.errors import ConfigError, ParseError

Parser = Callable[[Any, str], Any]
Dumper = Callable[[Any], Any]


@dataclasses.dataclass(frozen=True)
class FieldSpec:
    """How one dataclass field appears in JSON."""

    json: str
    """The JSON key (Koordinator's json tag)."""
    parse: Parser
    """Decode and validate a non-null JSON value; the second argument is the value's path for errors."""
    dump: Dumper
    """Encode the Python value back to JSON."""


def show(value: Any) -> str:
    """A bad value as an error message quotes it: strings quoted, everything else as JSON would print it."""
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, list | tuple):
        return "a list"
    return str(value)


def _identity(value: Any) -> Any:
    return value


def _spec(json_name: str, parse: Parser, dump: Dumper = _identity) -> Any:
    return dataclasses.field(default=None, metadata={"spec": FieldSpec(json_name, parse, dump)})


def _range_text(lo: int | None, hi: int | None) -> str:
    if lo is not None and hi is not None:
        return f"must be {lo}..{hi}"
    if lo is not None:
        return f"must be >= {lo}"
    return f"must be <= {hi}"


def int_field(json_name: str, lo: int | None = None, hi: int | None = None) -> Any:
    """An ``*int64``; ``lo``/``hi`` are the inclusive bounds of Koordinator's ``validate`` tag."""

    def parse(value: Any, path: str) -> int:
        # encoding/json refuses 60.0, "60" and true for an int64 field.
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{path}: must be an integer, got {show(value)}")
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            raise ConfigError(f"{path}: {_range_text(lo, hi)}, got {value}")
        return value

    return _spec(json_name, parse)


def float_field(json_name: str, above: float | None = None, hi: float | None = None) -> Any:
    """A ``*float64``; ``above`` is an exclusive lower bound, ``hi`` inclusive."""

    def parse(value: Any, path: str) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{path}: must be a number, got {show(value)}")
        if (above is not None and value <= above) or (hi is not None and value > hi):
            bounds = f"must be > {above}" + (f" and <= {hi}" if hi is not None else "")
            raise ConfigError(f"{path}: {bounds}, got {value}")
        return float(value)

    return _spec(json_name, parse)


def _typed_field(json_name: str, kind: type, wording: str) -> Any:
    """A field taken as decoded when it has JSON type ``kind`` (described as ``wording`` in the error)."""

    def parse(value: Any, path: str) -> Any:
        if not isinstance(value, kind):
            raise ConfigError(f"{path}: must be {wording}, got {show(value)}")
        return value

    return _spec(json_name, parse)


def bool_field(json_name: str) -> Any:
    """A ``*bool``."""
    return _typed_field(json_name, bool, "true or false")


def str_field(json_name: str) -> Any:
    """A free-form string (names, paths)."""
    return _typed_field(json_name, str, "a string")


def enum_field(json_name: str, allowed: Iterable[str]) -> Any:
    """A string enum.  ``""`` counts as unset: Go's non-pointer ``string`` with ``omitempty`` drops it."""
    choices = tuple(allowed)

    def parse(value: Any, path: str) -> str | None:
        if value == "":
            return None
        if not isinstance(value, str) or value not in choices:
            raise ConfigError(f"{path}: must be one of {', '.join(choices)}, got {show(value)}")
        return value

    return _spec(json_name, parse)


def quantity_field(json_name: str) -> Any:
    """A ``resource.Quantity`` kept as its text ("600M"); a JSON number is accepted as Kubernetes does."""

    def parse(value: Any, path: str) -> str:
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise ConfigError(f"{path}: must be a Kubernetes quantity such as '600M', got {show(value)}")
        text = value if isinstance(value, str) else str(value)
        try:
            parse_quantity(text)
        except ParseError:
            raise ConfigError(f"{path}: must be a Kubernetes quantity such as '600M', got {show(value)}") from None
        return text

    return _spec(json_name, parse)


def percent_or_quantity_field(json_name: str) -> Any:
    """An ``intstr.IntOrString`` bandwidth: an integer is a percentage of the total (0..100), a string an
    absolute quantity in bytes per second ("50M")."""

    def parse(value: Any, path: str) -> int | str:
        if isinstance(value, int) and not isinstance(value, bool):
            if not 0 <= value <= 100:
                raise ConfigError(f"{path}: a percentage must be 0..100, got {value}")
            return value
        if isinstance(value, str):
            try:
                if parse_quantity(value) < 0:
                    raise ParseError("negative")
            except ParseError:
                raise ConfigError(
                    f"{path}: must be a percentage 0..100 or a non-negative Kubernetes quantity such as '50M', "
                    f"got {show(value)}") from None
            return value
        raise ConfigError(f"{path}: must be an integer percentage or a quantity string, got {show(value)}")

    return _spec(json_name, parse)


def bool_map_field(json_name: str) -> Any:
    """A ``map[string]bool`` (``schedFeatures``), held read-only."""

    def parse(value: Any, path: str) -> Mapping[str, bool]:
        if not isinstance(value, Mapping):
            raise ConfigError(f"{path}: must be an object, got {show(value)}")
        for key, item in value.items():
            if not isinstance(item, bool):
                raise ConfigError(f"{path}.{key}: must be true or false, got {show(item)}")
        return MappingProxyType(dict(value))

    return _spec(json_name, parse, lambda value: dict(value))


def object_field(json_name: str) -> Any:
    """A free-form JSON object (``extensions``), held read-only; its content is the plugin's business."""

    def parse(value: Any, path: str) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            raise ConfigError(f"{path}: must be an object, got {show(value)}")
        return MappingProxyType(copy.deepcopy(dict(value)))

    return _spec(json_name, parse, lambda value: copy.deepcopy(dict(value)))


def nested(json_name: str, cls: type[JsonObject]) -> Mapping[str, FieldSpec]:
    """Metadata of a pointer to a nested struct, for ``field(default=None, metadata=nested(...))`` (spelled
    out so linters see a ``field()`` call rather than a shared mutable default)."""

    def parse(value: Any, path: str) -> JsonObject:
        return cls.from_json(value, path)

    return {"spec": FieldSpec(json_name, parse, lambda value: value.to_json())}


def list_field(json_name: str, cls: type[JsonObject]) -> Any:
    """A list of structs, held as a tuple."""

    def parse(value: Any, path: str) -> tuple[JsonObject, ...]:
        if not isinstance(value, list):
            raise ConfigError(f"{path}: must be a list, got {show(value)}")
        return tuple(cls.from_json(item, f"{path}[{index}]") for index, item in enumerate(value))

    return _spec(json_name, parse, lambda value: [item.to_json() for item in value])


def map_field(json_name: str, cls: type[JsonObject]) -> Any:
    """A ``map[string]Struct`` (``ratioModel``), held read-only."""

    def parse(value: Any, path: str) -> Mapping[str, JsonObject]:
        if not isinstance(value, Mapping):
            raise ConfigError(f"{path}: must be an object, got {show(value)}")
        return MappingProxyType({str(key): cls.from_json(item, f"{path}[{key!r}]") for key, item in value.items()})

    return _spec(json_name, parse, lambda value: {key: item.to_json() for key, item in value.items()})


def float_map_field(json_name: str) -> Any:
    """A ``map[string]float64`` (``resourceAmplificationRatio``), held read-only.

    Go decodes a ``null`` member into the float's zero value (the key stays, at 0) and refuses a number out
    of float64's range (``1e999``, which Python would read as infinity)."""

    def parse(value: Any, path: str) -> Mapping[str, float]:
        if not isinstance(value, Mapping):
            raise ConfigError(f"{path}: must be an object, got {show(value)}")
        out: dict[str, float] = {}
        for key, item in value.items():
            if item is None:
                out[str(key)] = 0.0
                continue
            try:
                number = float(item) if not isinstance(item, bool) and isinstance(item, int | float) else math.nan
            except OverflowError:  # an integer literal past float64's range
                number = math.nan
            if not math.isfinite(number):
                raise ConfigError(f"{path}[{key!r}]: must be a finite number, got {show(item)}")
            out[str(key)] = number
        return MappingProxyType(out)

    return _spec(json_name, parse, lambda value: dict(value))


def duration_list_field(json_name: str) -> Any:
    """A list of Go duration strings (``metav1.Duration``: "5m", "1h30m"), held as a tuple of the texts."""
    def parse(value: Any, path: str) -> tuple[str, ...]:
        if not isinstance(value, list):
            raise ConfigError(f"{path}: must be a list, got {show(value)}")
        for index, item in enumerate(value):
            try:
                if not isinstance(item, str) or parse_duration(item) <= 0:
                    raise ValueError(item)
            except ValueError:
                raise ConfigError(f"{path}[{index}]: must be a positive duration such as '5m', "
                                  f"got {show(item)}") from None
        return tuple(value)

    return _spec(json_name, parse, lambda value: list(value))


def str_list_field(json_name: str) -> Any:
    """A ``[]string``, held as a tuple."""

    def parse(value: Any, path: str) -> tuple[str, ...]:
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise ConfigError(f"{path}: must be a list of strings, got {show(value)}")
        return tuple(value)

    return _spec(json_name, parse, lambda value: list(value))


def str_map_field(json_name: str) -> Any:
    """A ``map[string]string``, held read-only."""

    def parse(value: Any, path: str) -> Mapping[str, str]:
        if not isinstance(value, Mapping) or not all(isinstance(item, str) for item in value.values()):
            raise ConfigError(f"{path}: must be an object of strings, got {show(value)}")
        return MappingProxyType(dict(value))

    return _spec(json_name, parse, lambda value: dict(value))




class JsonObject:
    """Base of the API dataclasses: decoding, encoding and a hook for cross-field checks."""

    @classmethod
    def _specs(cls) -> tuple[tuple[str, FieldSpec], ...]:
        return tuple((f.name, f.metadata["spec"]) for f in dataclasses.fields(cls)  # type: ignore[arg-type]
                     if "spec" in f.metadata)

    @classmethod
    def from_json(cls, obj: Any, where: str = "spec") -> Self:
        """Decode and validate ``obj``; errors name the path starting at ``where``."""
        if not isinstance(obj, Mapping):
            raise ConfigError(f"{where}: must be an object, got {show(obj)}")
        specs = cls._specs()
        exact = {spec.json: (attr, spec) for attr, spec in specs}
        folded = {spec.json.casefold(): (attr, spec) for attr, spec in specs}
        values: dict[str, Any] = {}
        for key, raw in obj.items():
            if not isinstance(key, str):
                continue
            hit = exact.get(key) or folded.get(key.casefold())
            if hit is None:
                continue
            attr, spec = hit
            if raw is None:
                values.pop(attr, None)
                continue
            values[attr] = spec.parse(raw, f"{where}.{spec.json}")
        instance = cls(**values)
        instance.check(where)
        return instance

    def to_json(self) -> dict[str, Any]:
        """The JSON object Koordinator would write: unset (``None``) fields are left out."""
        out: dict[str, Any] = {}
        for attr, spec in self._specs():
            value = getattr(self, attr)
            if value is not None:
                out[spec.json] = spec.dump(value)
        return out

    def check(self, where: str) -> None:
        """Cross-field rules (Go's ``ltfield``/``gtfield``); fields are already individually valid."""


def check_less(where: str, low_name: str, low: int | None, high_name: str, high: int | None) -> None:
    """``low < high`` when both are set (Go validator ``ltfield``)."""
    if low is not None and high is not None and not low < high:
        raise ConfigError(f"{where}.{low_name}: must be less than {high_name} ({high}), got {low}")


def merge_json(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """``override`` laid over ``base`` as Koordinator's ``MergeCfg`` does (marshal the new value, unmarshal it
    into a copy of the old): objects merge key by key, lists and scalars replace."""
    out = copy.deepcopy(dict(base))
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge_json(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out
