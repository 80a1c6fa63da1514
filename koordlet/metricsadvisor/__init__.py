"""Metrics advisor: collectors that turn cgroup, proc, PSI and perf reads into metric-cache samples."""
