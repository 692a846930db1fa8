"""The zoo of real architectures: manifest, data and the CLI cases (see benchmarks/zoo/README.md)."""
