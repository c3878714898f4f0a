"""Each run's tamper-evident evidence: the hash-chained log and the signed summary."""
