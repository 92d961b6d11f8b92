"""Timing candidates: the local measurer with NumPy reference checks, runners (local or RPC through a
TVM tracker) and the RPC server that reports its device fingerprint."""
