"""Tuning with MetaSchedule: metatune's cost model, the BatchBO search strategy, and the tuner."""
