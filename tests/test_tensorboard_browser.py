"""End to end in a real browser: TensorBoard's Graphs dashboard colours our clusters and shows the launch node.

Starts ``tensorboard --logdir L --host 127.0.0.1 --port <free port>`` on runs written by
``tfxla_plugin.tensorboard.write``, opens the Graphs dashboard in headless Chromium (Debian's ``chromium``
and ``chromium-driver``) through Selenium, selects "Color by XLA cluster" and checks the colours and the
``TfxlaLaunch`` node. The dashboard is Polymer (shadow DOM), so elements are found by a JS walk through
shadow roots; the element and property names (``tf-graph-controls``, ``colorBy``, ``colorByParams``,
``_selectedRunIndex``, ``tf-graph-board.graphHierarchy``, ``g.node[data-name]``, ``tf-node-info``) are
those TensorBoard 2.21 serves. Screenshots go to the test's tmp dir; set ``TFXLA_TB_SCREENSHOT_DIR=DIR`` to
also copy them there (``TFXLA_TB_SCREENSHOT_DIR=docs/images`` made ``docs/images/tensorboard_*.png``).

Without Chromium the test skips, or fails when the ``CI`` environment variable is set.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import tfxla_plugin
import tfxla_plugin.tensorboard as tb

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
BROWSER_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", "--disable-sync", "--disable-quic",
                 "--window-size=1400,900")
SERVER_TIMEOUT = 90.0  # seconds for TensorBoard to serve the runs
PAGE_TIMEOUT = 180.0  # seconds for any one thing to appear in the page (generous: CI machines can be busy)
UNCLUSTERED_FILL = "rgb(238, 238, 238)"  # the dashboard's colour for "unknown XLA cluster" (#eee)

# Finds elements matching a CSS selector in the document and every shadow root under it.
FIND = """
function find(sel) {
  const out = [];
  const walk = (root) => {
    root.querySelectorAll(sel).forEach(e => out.push(e));
    root.querySelectorAll('*').forEach(e => { if (e.shadowRoot) walk(e.shadowRoot); });
  };
  walk(document);
  return out;
}
"""

W = np.linspace(-1.0, 1.0, 8 * 16, dtype=np.float32).reshape(8, 16)


def two_clusters(x):
    """Two clusters (each with two branches) split by string ops that stay in TensorFlow."""
    h = tf.tanh(tf.matmul(x, tf.constant(W)) + 0.5) * tf.nn.relu(tf.matmul(x, tf.constant(-W)) - 0.5)
    s = tf.strings.as_string(h)
    n = tf.strings.to_number(s)
    return tf.reduce_sum(tf.exp(n * 3.0 - 1.0) * tf.sigmoid(n), axis=1), s


def _require_browser():
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not os.path.exists(p)]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("the selenium package (pip install -e '.[test]')")
    if missing:
        message = (f"browser test needs {', '.join(missing)} (apt-get install -y chromium chromium-driver)")
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tensorboard_command() -> list[str]:
    exe = Path(sys.executable).with_name("tensorboard")
    if exe.exists():
        return [str(exe)]
    found = shutil.which("tensorboard")
    return [found] if found else [sys.executable, "-m", "tensorboard.main"]


@pytest.fixture
def server(tmp_path, request):
    """(base url, logdir, written runs): TensorBoard serving runs of ``two_clusters``."""
    _require_browser()
    logdir = tmp_path / "logs"
    f = tfxla_plugin.function(two_clusters, jit_compile="auto")
    x = tf.constant(np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32))
    written = tb.write(f, x, logdir=logdir)
    port = _free_port()
    log = open(tmp_path / "tensorboard.log", "w")
    proc = subprocess.Popen(_tensorboard_command() + ["--logdir", str(logdir), "--host", "127.0.0.1",
                                                      "--port", str(port)],
                            stdout=log, stderr=subprocess.STDOUT)

    def stop():
        proc.terminate()  # by its pid: only the process this fixture started
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)
        log.close()

    request.addfinalizer(stop)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + SERVER_TIMEOUT
    while True:
        if proc.poll() is not None:
            pytest.fail(f"tensorboard exited with {proc.returncode}: {(tmp_path / 'tensorboard.log').read_text()}")
        try:
            with urllib.request.urlopen(f"{url}/data/runs", timeout=5) as r:
                if set(written.runs) <= set(json.loads(r.read())):
                    break
        except OSError:
            pass
        if time.monotonic() > deadline:
            pytest.fail(f"tensorboard did not serve the runs within {SERVER_TIMEOUT:.0f} s: "
                        f"{(tmp_path / 'tensorboard.log').read_text()[-2000:]}")
        time.sleep(0.5)
    return url, logdir, f.compiled_graph(x)


@pytest.fixture
def browser(tmp_path, request):
    _require_browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in BROWSER_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tempfile.mkdtemp(prefix='chromium-', dir=tmp_path)}")
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER, log_output=str(tmp_path / "chromedriver.log")),
                              options=options)
    request.addfinalizer(driver.quit)
    driver.set_page_load_timeout(PAGE_TIMEOUT)
    driver.set_script_timeout(PAGE_TIMEOUT)
    return driver


def wait_for(driver, script: str, what: str, *args, timeout: float = PAGE_TIMEOUT):
    """Run ``script`` (with ``find`` defined) until it returns something truthy; fail naming ``what``."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = driver.execute_script(FIND + script, *args)
        except Exception as e:  # noqa: BLE001  (the page is still building: elements not there yet)
            last = e
        if last and not isinstance(last, Exception):
            return last
        time.sleep(0.25)
    pytest.fail(f"the Graphs dashboard never showed {what} within {timeout:.0f} s (last: {last!r})")


def select_run(driver, run: str, node: str) -> None:
    """Pick ``run`` in the dashboard's Run menu and wait until ``node`` is drawn (selecting it again
    while it is not: on a busy machine the dashboard may still be loading the first time)."""
    wait_for(driver, """
        const c = find('tf-graph-controls')[0];
        if (!c || !c.datasets || !c.datasets.length) return false;
        const i = c.datasets.findIndex(d => d.name === arguments[0]);
        if (i < 0) return false;
        if (c._selectedRunIndex !== i) c.set('_selectedRunIndex', i);
        return find('g.node').some(e => e.getAttribute('data-name') === arguments[1]);""",
             f"node {node} of run {run}", run, node)


def color_by_xla_cluster(driver) -> dict[str, str]:
    """Click "XLA cluster" under "Color by"; returns the legend: cluster name -> colour."""
    wait_for(driver, """
        const b = find('paper-radio-button').filter(e => e.textContent.trim() === 'XLA cluster')[0];
        if (!b) return false;
        b.click();
        return find('tf-graph-controls')[0].colorBy === 'xla_cluster';""", "the XLA cluster colouring")
    legend = wait_for(driver, """
        const p = find('tf-graph-controls')[0].colorByParams;
        return p && p.xla_cluster && p.xla_cluster.length ? p.xla_cluster : null;""", "the XLA cluster legend")
    return {entry["xla_cluster"]: entry["color"] for entry in legend}


def node_fills(driver) -> dict[str, str]:
    """Drawn node name -> the fill of its shape."""
    return driver.execute_script(FIND + """
        const out = {};
        find('g.node').forEach(e => {
          const shape = e.querySelector('.nodeshape > *');
          if (shape) out[e.getAttribute('data-name')] = getComputedStyle(shape).fill;
        });
        return out;""")


def gradient_colors(driver, node: str) -> list[str]:
    """The stop colours of the gradient that fills ``node`` in the XLA cluster colouring."""
    return driver.execute_script(FIND + """
        const g = find('linearGradient').filter(e => e.id === 'xla-' + arguments[0])[0];
        return g ? Array.from(g.querySelectorAll('stop')).map(s => getComputedStyle(s).stopColor) : [];""", node)


def test_graphs_dashboard_colours_clusters_and_shows_the_launch_node(server, browser, tmp_path) -> None:
    url, _, cg = server
    analysis = cg.analysis
    top_level = {n.name for n in analysis.graph_def.node if "/" not in n.name}
    cluster_of = {n: analysis.cluster_of(n) for n in top_level}
    browser.get(f"{url}/#graphs")

    # --- the original graph, coloured by cluster -------------------------------------------------
    ops = {n.name: n.op for n in analysis.graph_def.node}
    # constants are drawn inside their consumers, not as nodes of their own
    clustered = sorted(n for n, c in cluster_of.items() if c and ops[n] != "Const")
    select_run(browser, "two_clusters/original", "MatMul")
    legend = color_by_xla_cluster(browser)
    assert set(legend) == {"cluster_0", "cluster_1"}
    assert len(set(legend.values())) == 2, legend  # one colour per cluster
    fills = wait_for(browser, "return arguments[0].every(n => find('g.node').some(e => e.getAttribute('data-name') "
                              "=== n && getComputedStyle(e.querySelector('.nodeshape > *')).fill.startsWith('url')));",
                     "the clustered nodes filled with their cluster colour", clustered) and node_fills(browser)
    for name in top_level & set(fills):
        if cluster_of[name]:
            assert fills[name] == f'url("#xla-{name}")', (name, fills[name])
            assert legend[cluster_of[name]] in gradient_colors(browser, name), name
        else:
            assert fills[name] == UNCLUSTERED_FILL, (name, fills[name])
    assert fills.get("AsString") == UNCLUSTERED_FILL
    shot = tmp_path / "tensorboard_clusters.png"
    assert browser.save_screenshot(str(shot)) and shot.stat().st_size > 10_000

    # --- the rewritten graph: one TfxlaLaunch node per cluster --------------------------------------
    launch = cg.rewritten.launch_nodes["cluster_0"]
    select_run(browser, "two_clusters/rewritten", launch)
    op = wait_for(browser, "const b = find('tf-graph-board')[0]; const n = b && b.graphHierarchy && "
                           "b.graphHierarchy.node(arguments[0]); return n ? n.op : null;",
                  f"the launch node {launch} in the graph hierarchy", launch)
    assert op == "TfxlaLaunch"
    assert color_by_xla_cluster(browser) == legend  # the launch nodes take their clusters' colours
    wait_for(browser, "return find('g.node').some(e => e.getAttribute('data-name') === arguments[0] && "
                      "getComputedStyle(e.querySelector('.nodeshape > *')).fill === arguments[1]);",
             f"the launch node {launch} coloured as its cluster", launch, f'url("#xla-{launch}")')
    card = wait_for(browser, """
        const info = find('tf-node-info')[0];
        if (!info || !info.shadowRoot) {  // no card yet: click the node (again every 3 s, if the page was busy)
          if (!window.tfxlaClicked || Date.now() - window.tfxlaClicked > 3000) {
            window.tfxlaClicked = Date.now();
            const n = find('g.node').filter(e => e.getAttribute('data-name') === arguments[0])[0];
            n.querySelector('.nodeshape').dispatchEvent(new MouseEvent('click', {bubbles: true}));
          }
          return null;
        }
        const texts = [];
        const walk = (root) => root.querySelectorAll('*').forEach(e => {
          const text = e.textContent.trim();
          if (e.tagName !== 'STYLE' && e.childElementCount === 0 && text) texts.push(text);
          if (e.shadowRoot) walk(e.shadowRoot);
        });
        walk(info.shadowRoot);
        return texts.includes('TfxlaLaunch') && texts.includes('kernel_hash') ? texts : null;""",
                    "the launch node's info card with its attributes", launch)
    assert card[card.index("kernel_hash") + 1] == f'{{"s":"{cg.clusters[0].kernel_hash}"}}'
    assert "op_count" in card and "backend" in card and "cluster_graph" not in card
    launch_shot = tmp_path / "tensorboard_launch.png"
    assert browser.save_screenshot(str(launch_shot))
    if os.environ.get("TFXLA_TB_SCREENSHOT_DIR"):  # how docs/images/ was made
        for path in (shot, launch_shot):
            shutil.copyfile(path, Path(os.environ["TFXLA_TB_SCREENSHOT_DIR"]) / path.name)


def test_without_chromium_the_test_skips_or_fails_under_ci(monkeypatch) -> None:
    monkeypatch.setattr(sys.modules[__name__], "CHROMIUM", "/nonexistent/chromium")
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="/nonexistent/chromium .*apt-get install -y chromium"):
        _require_browser()
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="/nonexistent/chromium"):
        _require_browser()
