"""Pure estimators: numpy in, numpy out; no I/O, no printing."""
