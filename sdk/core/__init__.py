"""edgekit's ground floor (docs/architecture.md): typed errors, IR helpers, model loading and preparation,
data sets, host runtimes, metrics. It imports nothing above it."""
