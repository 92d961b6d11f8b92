"""Knob spaces: MetaSchedule design spaces as discrete knobs, with configuration ↔ schedule ↔ record
round trips."""
