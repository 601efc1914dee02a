"""The exactly-once stream runtime: transactions, checkpoints, co-partitioned tables restored
from their changelogs, and the shared views over them that several stages read (watchers,
grants, lifecycle).
"""
