"""The pilot that sets a real-server test's load (tests/support/calibrate.py), against the
truth server whose speed is injected: it must measure that speed, offer the stated fraction
of it, and call a server too slow (a failure under CI, naming the speed and the CPU)
instead of waiting for it or passing."""

from __future__ import annotations

import pytest

from tests.support.calibrate import cpu_description, offered_rate, openai_pilot
from tests.support.http_servers import ServerThread, Timing, openai_app

DATASET = "synthetic:isl=8,osl=5,n=8"


def test_the_pilot_measures_the_injected_speed():
    # 4 in flight, each request 40 ms to its first token then 4 x 20 ms: 120 ms a request
    t = Timing(ttft_ms=40, tpot_ms=20)
    with ServerThread(openai_app(t)) as srv:
        pilot = openai_pilot(srv.url + "/v1", DATASET, in_flight=4, requests=8)
    assert pilot.requests == 8 and not pilot.failures
    assert pilot.output_tokens == 8 * 5
    assert min(pilot.ttft_s) >= 0.040 and min(pilot.e2e_s) >= 0.120
    # the server keeps absolute deadlines: a late first token is followed by quicker ones, so
    # TPOT is checked as what it is, the rest of each request over its 4 gaps
    for ttft, tpot, e2e in zip(pilot.ttft_s, pilot.tpot_s, pilot.e2e_s):
        assert ttft + 4 * tpot == pytest.approx(e2e)
    # two rounds of 4 concurrent 120 ms requests: at most 8 / 0.24 s
    assert pilot.requests_per_s <= 8 / 0.240
    rate = offered_rate(pilot, 0.5, queries=4, within_s=60)
    assert rate == pytest.approx(0.5 * pilot.requests_per_s)
    assert "4 in flight" in pilot.describe() and cpu_description() in pilot.describe()


def test_a_server_too_slow_for_the_test_fails_under_ci_and_skips_elsewhere(monkeypatch):
    t = Timing(ttft_ms=300, tpot_ms=100)  # 700 ms a request: 16 requests at half rate take ~22 s
    with ServerThread(openai_app(t)) as srv:
        pilot = openai_pilot(srv.url + "/v1", DATASET, in_flight=2, requests=2)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match=r"too slow to test: 16 requests at 50% .* over the test's 5 s"):
        offered_rate(pilot, 0.5, queries=16, within_s=5)
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="output tokens/s"):
        offered_rate(pilot, 0.5, queries=16, within_s=5)


def test_a_request_that_times_out_is_measured_not_waited_for(monkeypatch):
    t = Timing(ttft_ms=50, tpot_ms=400)  # tokens 400 ms apart: the 0.3 s read timeout fires after the first
    with ServerThread(openai_app(t)) as srv:
        pilot = openai_pilot(srv.url + "/v1", DATASET, in_flight=1, requests=1, timeout_s=0.3)
    assert pilot.requests == 0 and pilot.output_tokens == 1 and pilot.failures[0].startswith("TimeoutError")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="1 pilot requests timed out"):
        offered_rate(pilot, 0.5, queries=16, within_s=120)
