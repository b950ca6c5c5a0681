"""The HTML reports of an Offline, a Server, an LLM and a sweep run, opened in headless Chromium.

Four small real runs (the synthetic backend; the HTTP backend against the in-process
OpenAI server; `harness sweep` over three target rates), each report rendered by the CLI
and loaded by Debian's Chromium. A test fails when an expected plot is missing from the
page, is not decoded or laid out by the browser, is one flat colour or has no data drawn
(no coloured pixel: axes, grid and text are grey), or when the screenshot is blank where
a plot should be.

Chromium is `chromium-headless-shell` or `chromium` on PATH (`make install-test` installs
it where it can). Without one the tests skip on a workstation and fail under CI (the
variable CI set), so CI never passes by skipping.
"""

from __future__ import annotations

import base64
import io
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

from harness.cli import main
from harness.report import write_report
from harness.config.run_config import RunConfig
from harness.run import runner
from tests.support.http_servers import ServerThread, Timing, openai_app

pytestmark = pytest.mark.parallel  # its verdicts do not depend on speed (tests/conftest.py)

RUN_PLOTS = ["latency CDF", "latency histogram", "latency over time", "throughput over time",
             "queue vs service breakdown"]
EXPECTED = {
    "offline": RUN_PLOTS,
    "server": RUN_PLOTS,
    # input lengths vary, every request has 12 output tokens: TPOT's distribution, not a strip
    "llm": RUN_PLOTS + ["TTFT distribution", "ITL distribution", "TTFT vs input length", "TPOT distribution"],
    "sweep": ["throughput vs latency (p50, p99)", "achieved vs target rate", "success rate and goodput vs load",
              "queue share of latency vs load"],
}
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--no-first-run", "--hide-scrollbars", "--force-device-scale-factor=1"]
WIDTH = 1200
#: a pixel whose channels differ by more than this is colour (data), not grey (axes, grid,
#: text); a half-transparent purple dot on white differs by 43
SATURATED = 30
#: share of an image's pixels in colour below which nothing was drawn on its axes; the
#: sparsest plot here (50 dots of latency over time) has 0.2 %, a legend's swatch alone 0.02 %
DRAWN = 0.0005

# Run after load: where each image ended up and whether it decoded, as attributes that
# --dump-dom prints. Added to a copy of the page only; the report itself has no script.
PROBE = """<script>addEventListener('load', () => {
  for (const img of document.images) {
    const r = img.getBoundingClientRect();
    img.dataset.probe = [img.complete, img.naturalWidth, img.naturalHeight,
                         r.left + scrollX, r.top + scrollY, r.width, r.height].join(' ');
  }
  document.body.dataset.height = document.documentElement.scrollHeight;
});</script>"""


def chromium() -> str:
    found = shutil.which("chromium-headless-shell") or shutil.which("chromium")
    if found:
        return found
    if "CI" in os.environ:
        pytest.fail("no chromium-headless-shell or chromium on PATH under CI: `make install-test` installs it (apt)")
    pytest.skip("no chromium-headless-shell or chromium on PATH (apt-get install chromium-headless-shell)")


def _browse(browser: str, page: Path, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([browser, *FLAGS, f"--user-data-dir={profile}", *args, page.as_uri()],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def _runs(root: Path) -> dict[str, Path]:
    out = {
        "offline": runner.run(RunConfig(backend="synthetic", scenario="Offline", backend_options={"service_time_ms": 2.0},
                                        min_duration_s=0.5, offline_expected_qps=700), root).run_dir,
        "server": runner.run(RunConfig(backend="synthetic", scenario="Server", backend_options={"service_time_ms": 2.0},
                                       target_qps=200, min_duration_s=0.5, min_query_count=100), root).run_dir,
    }
    # prefill grows with the prompt: TTFT = 2 + 5 + 0.05 ms per input token
    timing = Timing(queue_ms=2, ttft_ms=5, ttft_ms_per_prompt_token=0.05, tpot_ms=2, tokens=12)
    with ServerThread(openai_app(timing)) as srv:
        out["llm"] = runner.run(RunConfig(
            backend="http", scenario="Server", dataset="synthetic:isl=uniform(16,256),osl=12,n=32",
            backend_options={"protocol": "openai-chat", "url": srv.url + "/v1"}, target_qps=50,
            min_duration_s=1.0, min_query_count=50, use_token_latencies=True,
            ttft_latency_ms=5000, tpot_latency_ms=1000), root).run_dir
    sweep = subprocess.run(
        [sys.executable, "-m", "harness", "sweep", "--scenario", "Server", "--backend", "synthetic",
         "--set", "service_time_ms=2", "--set", "min_duration_s=0.5", "--set", "min_query_count=50",
         "--set", "target_latency_ms=20", "--vary", "target_qps=100,300,700", "--output-dir", str(root / "sweep")],
        capture_output=True, text=True, timeout=300)
    assert sweep.returncode == 0, sweep.stderr
    (out["sweep"],) = (root / "sweep").iterdir()
    return out


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, object]]:
    """Per kind: the report, Chromium's DOM of it after load, and a screenshot of all of it."""
    browser = chromium()
    root = tmp_path_factory.mktemp("browser")
    shots = {}
    for kind, run_dir in _runs(root).items():
        report = root / f"{kind}.html"
        result = CliRunner().invoke(main, ["report", str(run_dir), "--format", "html", "-o", str(report)])
        assert result.exit_code == 0, result.output
        probe = root / f"{kind}-probe.html"
        probe.write_text(report.read_text().replace("</body>", PROBE + "</body>"))
        # the same width as the screenshot, so the layout measured is the one photographed
        dom = _browse(browser, probe, root / "profile", "--dump-dom", f"--window-size={WIDTH},2000").stdout
        height = int(re.search(r'data-height="(\d+)"', dom).group(1))  # type: ignore[union-attr]
        shot = root / f"{kind}.png"
        _browse(browser, report, root / "profile", f"--screenshot={shot}", f"--window-size={WIDTH},{height}")
        shots[kind] = {"report": report, "dom": dom, "shot": Image.open(shot).convert("RGB")}
    return shots


def _colour_share(image: Image.Image) -> float:
    rgb = np.asarray(image.convert("RGB"), dtype=np.int16)
    return float(((rgb.max(axis=-1) - rgb.min(axis=-1)) > SATURATED).mean())


def _images(dom: str) -> list[tuple[str, str, list[float]]]:
    """(alt, src, probe figures) of every <img> in the DOM, in page order."""
    out = []
    for tag in re.findall(r"<img\b[^>]*>", dom):
        alt = re.search(r'alt="([^"]*)"', tag)
        src = re.search(r'src="([^"]*)"', tag)
        probe = re.search(r'data-probe="([^"]*)"', tag)
        assert alt and src and probe, tag[:200]
        complete, *numbers = probe.group(1).split()
        assert complete == "true", f"{alt.group(1)}: the browser had not finished loading it"
        out.append((alt.group(1), src.group(1), [float(x) for x in numbers]))
    return out


@pytest.mark.parametrize("kind", list(EXPECTED))
def test_every_plot_is_on_the_page_decoded_and_drawn(pages, kind):
    page = pages[kind]
    images = _images(page["dom"])
    assert [alt for alt, _, _ in images] == EXPECTED[kind]
    for alt, src, (natural_w, natural_h, _, _, shown_w, shown_h) in images:
        # Chromium decoded it and laid it out at its own size, not as a broken-image icon
        assert natural_w >= 300 and natural_h >= 200, (alt, natural_w, natural_h)
        assert (shown_w, shown_h) == (natural_w, natural_h), alt
        assert src.startswith("data:image/png;base64,"), alt
        png = Image.open(io.BytesIO(base64.b64decode(src.split(",", 1)[1])))
        assert png.size == (natural_w, natural_h), alt
        colours = len(np.unique(np.asarray(png.convert("RGB")).reshape(-1, 3), axis=0))
        assert colours > 50, f"{alt}: {colours} colours, a flat image"
        assert _colour_share(png) > DRAWN, f"{alt}: nothing drawn on its axes"


@pytest.mark.parametrize("kind", list(EXPECTED))
def test_the_screenshot_shows_each_plot_where_the_page_put_it(pages, kind):
    shot: Image.Image = pages[kind]["shot"]
    grey = np.asarray(shot.convert("L"))
    assert (grey < 250).mean() > 0.01, "the screenshot is blank"
    for alt, _, (_, _, left, top, w, h) in _images(pages[kind]["dom"]):
        box = (int(left), int(top), int(left + w), int(top + h))
        assert box[2] <= shot.width and box[3] <= shot.height, (alt, box, shot.size)
        assert _colour_share(shot.crop(box)) > DRAWN, f"{alt}: blank in the screenshot at {box}"



def test_a_long_tail_gets_log_bins_and_a_uniform_spread_keeps_even_ones():
    """Latency histograms: a long tail on even bins put ~95 % of requests in the first bar."""
    from harness.report.plots import histogram_bins

    rng = np.random.default_rng(0)
    tail = rng.lognormal(mean=1.0, sigma=1.5, size=5000)  # ms
    edges, log = histogram_bins(tail)
    counts, _ = np.histogram(np.clip(tail, edges[0], edges[-1]), edges)
    assert log and counts.max() < 0.1 * len(tail)
    even, _ = np.histogram(tail, np.linspace(tail.min(), edges[-1], len(edges)))
    assert even.max() > 0.4 * len(tail)  # what the even bins would have drawn
    # Offline: every sample issued at once, latency spread evenly up to the run's length
    offline = np.linspace(2.0, 800.0, 400)
    edges, log = histogram_bins(offline)
    assert not log and edges[0] == 2.0 and len(edges) == 41


def test_an_accuracy_runs_scores_are_on_the_page_right_after_its_speed(tmp_path):
    """An LLM accuracy run (answers scored by ROUGE): Chromium's DOM has the answers' headline
    line and the table of every score with its interval and count, placed right after the
    throughput section (in Markdown and the terminal too), and the screenshot of that table
    is not blank."""
    from tests.results.test_text_accuracy import _answers, _gguf, write_cnn_eval

    data = write_cnn_eval(tmp_path / "cnn_eval.json")
    with ServerThread(openai_app(Timing(), answers=_answers())) as srv:  # 3 of 6 right: every ROUGE is 50
        run_dir = runner.run(RunConfig(
            backend="http", scenario="Offline", mode="AccuracyOnly", dataset=f"mlperf:llama3.1-8b:{data}",
            backend_options={"protocol": "openai-completions", "url": srv.url + "/v1", "tokenizer": _gguf()},
        ), tmp_path / "results").run_dir
    report = tmp_path / "accuracy.html"
    assert CliRunner().invoke(main, ["report", str(run_dir), "--format", "html", "-o", str(report)]).exit_code == 0
    browser = chromium()
    dom = _browse(browser, report, tmp_path / "profile", "--dump-dom", f"--window-size={WIDTH},2000").stdout
    assert "answers: ROUGE-1 50.00 (95% CI " in dom
    sections = re.findall(r"<h2>([^<]*)</h2>", dom)
    assert sections[:2] == ["throughput", "answers' accuracy"], sections
    table = dom.split("answers' accuracy</h2>", 1)[1].split("</table>", 1)[0]
    cells = [re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<td[^>]*>.*?</td>", table)]
    for name in ("ROUGE-1", "ROUGE-2", "ROUGE-L", "ROUGE-Lsum"):
        i = cells.index(name)
        assert cells[i + 1] == "50.0000" and cells[i + 3] == "6", cells[i:i + 4]
    # Markdown and the terminal follow the same list of sections (harness.report.sections)
    md = write_report(run_dir, "md")
    assert [line for line in md.splitlines() if line.startswith("### ")][:2] == ["### Throughput", "### Answers' accuracy"]
    assert "| ROUGE-1 | 50.0000 | " in md and "- scored: the answers in mlperf_log_accuracy.json" in md
    res = CliRunner().invoke(main, ["report", str(run_dir)], env={"COLUMNS": "80"})
    lines = [line.strip() for line in res.stdout.splitlines()]
    assert res.exit_code == 0 and lines.index("throughput") < lines.index("answers' accuracy") < min(
        i for i, line in enumerate(lines) if line.startswith("where the time went")), res.stdout
    shot = tmp_path / "accuracy.png"
    _browse(browser, report, tmp_path / "profile", f"--screenshot={shot}", f"--window-size={WIDTH},900")
    grey = np.asarray(Image.open(shot).convert("L"))
    assert (grey[300:700] < 200).mean() > 0.01, "nothing drawn where the throughput and answers' tables lie"
