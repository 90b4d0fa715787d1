"""Benchmark harness for wodfs: devices, file system drivers, measurement
and reports. The entry point is bench/run.py; workloads live in
bench/workloads/, one module per workload."""
