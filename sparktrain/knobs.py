"""What a step knob is to the rest of the project, declared once on its own schema field
(params.py StepConfig: `Field(..., json_schema_extra=role(...))`), and every list of knobs
derived from those declarations: checkpoint.json's record, the resume fingerprint, the
training recipe, the model card's table, the optimizers that read it (docs/outputs.md
"A knob's role").

A field that declares nothing has the role of a knob added later: recorded and
fingerprinted only off its default (so every earlier run keeps its bytes and its saved
state), part of the recipe, on the card, read by every optimizer.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

ALWAYS, CHANGED, NEVER = "always", "changed", "never"  # when a record carries a knob


@dataclasses.dataclass(frozen=True)
class Role:
    """What one knob is to the records, the resume, the recipe, the card and the optimizers
    (the defaults: a knob added later)."""
    record: str = CHANGED       # checkpoint.json (and failed.json's `step`)
    fingerprint: str = CHANGED  # what a saved state must match to resume (train/resume.py)
    recipe: bool = True         # chosen for the job, not a stamp or a place (stages/job.py)
    card: bool = True           # a row of the model card's knob table when recorded
    readers: Optional[tuple[str, ...]] = None  # the optimizers that read it; None = all

    def __post_init__(self):
        for when in (self.record, self.fingerprint):
            if when not in (ALWAYS, CHANGED, NEVER):
                raise ValueError(f"a knob is recorded {ALWAYS}, {CHANGED} or {NEVER}, "
                                 f"not {when!r}")


def role(**declared) -> dict:
    """A field's json_schema_extra: its Role's entries (a typo is refused here)."""
    return {"role": dataclasses.asdict(Role(**declared))}


def roles(schema) -> dict[str, Role]:
    """Each field of a pydantic dataclass (or an instance of one) by name, with its Role."""
    return {name: Role(**(info.json_schema_extra or {}).get("role", {}))
            for name, info in schema.__pydantic_fields__.items()}


def defaults(schema) -> dict:
    """Each field's default, as its Field holds it (the one place it is typed)."""
    return {name: info.default for name, info in schema.__pydantic_fields__.items()}


def _carried(knobs, which: str) -> dict:
    """The knobs whose Role's `which` (record, fingerprint) carries them at these values:
    ALWAYS, or CHANGED and off the default (absent means the default)."""
    default = defaults(knobs)
    return {name: getattr(knobs, name) for name, r in roles(knobs).items()
            if getattr(r, which) == ALWAYS
            or (getattr(r, which) == CHANGED and getattr(knobs, name) != default[name])}


def recorded(knobs) -> dict:
    """The knobs as checkpoint.json records them."""
    return _carried(knobs, "record")


def fingerprinted(knobs) -> dict:
    """The knobs a saved state must match to resume."""
    return _carried(knobs, "fingerprint")


def recipe(schema) -> tuple[str, ...]:
    """The knobs that make the training recipe (those a user chooses for a job)."""
    return tuple(name for name, r in roles(schema).items() if r.recipe)


def card(schema) -> tuple[str, ...]:
    """The knobs the model card shows, when the checkpoint records them."""
    return tuple(name for name, r in roles(schema).items() if r.card and r.record != NEVER)


def unread(knobs, optimizer: str) -> dict[str, tuple[str, ...]]:
    """The knobs set off their defaults that `optimizer` does not read, with their readers."""
    default = defaults(knobs)
    return {name: r.readers for name, r in roles(knobs).items()
            if r.readers is not None and optimizer not in r.readers
            and getattr(knobs, name) != default[name]}


def read_only_by_others(schema, optimizer: str) -> dict:
    """The knobs `optimizer` does not read, at their defaults (`spark bench --optimizer`)."""
    default = defaults(schema)
    return {name: default[name] for name, r in roles(schema).items()
            if r.readers is not None and optimizer not in r.readers}
