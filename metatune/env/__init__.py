"""The machine and TVM: device fingerprints, compilation targets, TVM process set-up and the helper that
turns plain Python logic into MetaSchedule `Py*` plug-in classes."""
