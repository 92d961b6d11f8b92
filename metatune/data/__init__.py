"""Datasets of measured programs: specs, the record store, the builder and dataset cards."""
