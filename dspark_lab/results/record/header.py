"""A run file's header, typed: what the code that starts a run states about it, checked before it is written.

`run_kind` is required and must be a kind of results.facts.run_kinds: a typo is refused when the run
starts, never recorded (a header's shape is guessed into a kind only for files older than the field,
results.query.kinds.derive_kind). The rest (fingerprint, sweep, extra fields) is written as given.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from dspark_lab.results.facts.run_kinds import KINDS, check_kind
from dspark_lab.results.record import schema

# Fields the header type writes itself; `extra` may not set them.
OWN_FIELDS = ("kind", "schema_version", "run_id", "created_at", "fingerprint", "sweep", "run_kind")


@dataclass(frozen=True)
class RunHeader:
    run_kind: Optional[str]
    run_id: str
    created_at: str
    fingerprint: Mapping[str, Any]
    sweep: Mapping[str, Any]
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.run_kind is None:
            raise ValueError("run_kind is required: the code that starts a run says what it is; allowed: "
                             + ", ".join(KINDS))
        check_kind(self.run_kind)
        for name in ("fingerprint", "sweep"):
            if not isinstance(getattr(self, name), Mapping):
                raise ValueError(f"{name} must be a mapping; got {type(getattr(self, name)).__name__}")
        taken = [k for k in self.extra if k in OWN_FIELDS]
        if taken:
            raise ValueError(f"header field {', '.join(map(repr, taken))} is set by the header itself; "
                             f"extra fields may be anything but {', '.join(OWN_FIELDS)}")

    def record(self) -> dict:
        """The header record as the file holds it (its first line)."""
        return {"kind": "header", "schema_version": schema.SCHEMA_VERSION, "run_id": self.run_id,
                "created_at": self.created_at, "fingerprint": dict(self.fingerprint), "sweep": dict(self.sweep),
                "run_kind": self.run_kind, **self.extra}
