"""loadgen-harness: MLPerf LoadGen runs over pluggable inference backends."""

__version__ = "0.1.0"
