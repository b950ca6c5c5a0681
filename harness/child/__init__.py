"""One LoadGen test in its own process: the entry point, both SUT adapters (worker threads for tensor backends, an event loop for streaming ones) and the record writer."""
