"""Queueing theory as ground truth for capacity: the M/D/1 queue.

The synthetic backend with a fixed service time D and one worker, fed by LoadGen's Poisson
arrivals at rate λ, is an M/D/1 queue. Its waiting time W has a closed-form distribution
(Erlang 1909, Crommelin 1932), for ρ = λD < 1:

    P(W <= t) = (1 - ρ) Σ_{k=0}^{⌊t/D⌋} [λ(kD - t)]^k / k! · e^{-λ(kD - t)}

A request's latency is W + D, so the p-quantile of latency is at most L exactly when
P(W <= L - D) >= p. That is monotone in λ, so the highest such λ (the capacity λ*) is
found by bisection. For D = 1 ms and L = 10 ms at p99, λ* ≈ 773/s.
"""

from __future__ import annotations

import math

import numpy as np


def md1_wait_cdf(t_s: float, rate: float, service_s: float) -> float:
    """P(W <= t) of an M/D/1 queue (arrival `rate` per second, service time `service_s`)."""
    rho = rate * service_s
    if rho >= 1:
        return 0.0
    if t_s < 0:
        return 0.0
    total = 0.0
    for k in range(int(math.floor(t_s / service_s)) + 1):
        x = rate * (k * service_s - t_s)  # <= 0: the alternating terms stay small for t/D of tens
        total += x**k / math.factorial(k) * math.exp(-x)
    return (1 - rho) * total


def md1_capacity(service_s: float, bound_s: float, percentile: float = 0.99) -> float:
    """The highest arrival rate whose `percentile` latency (wait + service) is within `bound_s`."""
    lo, hi = 0.0, 1.0 / service_s
    for _ in range(60):
        mid = (lo + hi) / 2
        if md1_wait_cdf(bound_s - service_s, mid, service_s) >= percentile:
            lo = mid
        else:
            hi = mid
    return lo


def md1_run_percentiles(rate: float, service_s: float, queries: int, percentile: float, runs: int,
                        seed: int = 0) -> np.ndarray:
    """The `percentile` latency each of `runs` runs of `queries` Poisson arrivals measures
    on an M/D/1 queue (Lindley's recursion W' = max(0, W + D - A), all runs at once).

    λ* is where the true percentile meets the bound; a run of a thousand queries estimates
    that percentile from a handful of its slowest, so a single run at λ* passes or fails by
    luck, and a search that keeps the rates that passed lands above λ*. This says how far."""
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(1 / rate, (runs, queries))
    latency = np.empty((runs, queries))
    wait = np.zeros(runs)
    latency[:, 0] = service_s
    for i in range(1, queries):
        wait = np.maximum(0.0, wait + service_s - gaps[:, i])
        latency[:, i] = wait + service_s
    return np.percentile(latency, percentile * 100, axis=1)
