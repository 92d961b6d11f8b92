"""Head-to-head tuning benchmarks: suites, references, runs, tables and curves."""
