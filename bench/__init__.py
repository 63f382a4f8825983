"""Benchmarks for omstream; run them as modules, e.g. `python -m bench.fold_bench`."""
