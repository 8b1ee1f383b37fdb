"""aicalc: sizing calculator for AI hardware (memory, chips, time, cost)."""

__version__ = "0.1.0"
