"""Benchmark scripts (run as ``python benchmarks/<name>.py``); a package so they share ``_timing``."""
