"""The benchmarks themselves, one module per benchmark; each registers with the harness."""
