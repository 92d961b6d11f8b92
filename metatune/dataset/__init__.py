"""Datasets of measured programs: the spec, the builder, crash-safe sharded storage in TVM's database
format, and the dataset card."""
