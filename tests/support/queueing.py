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
