"""Tuning: wires a workload or a whole Relax model to MetaSchedule with the chosen search strategy, cost
model and runner, and reports verified results."""
