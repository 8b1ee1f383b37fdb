"""The library: one typed entry point per estimator (re-exported from ``aicalc``)."""
