#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""tests/bench/plot_test.py PLOT_PY FIXTURE_JSON

Renders bench/plot.py's figures from a saved result file (the made-up
figures of tests/bench/plot-fixture.json: 12 latency distributions and 2
peers, a size sweep with WRITE, the QoS loads, the scale test) and checks
the figure elements through matplotlib's objects: the axis scales, every
legend entry there and whole, a distinct colour and marker per series, the
percentiles and targets marked, ticks on the sizes measured, the commit,
host and date in each figure, and the PNGs written by the script itself.
"""
import importlib.util
import json
import os
import subprocess
import sys
import tempfile

try:
    import matplotlib
except ImportError:
    print("skipped: python3-matplotlib is not installed (apt-get install python3-matplotlib)")
    sys.exit(77)

matplotlib.use("Agg")
from matplotlib.collections import LineCollection  # noqa: E402

FAILS = 0


def check(ok, what, detail=""):
    global FAILS
    print(("ok   - " if ok else "FAIL - ") + what + ("" if ok else f": {detail}"))
    FAILS += not ok


def flat(text):
    return " ".join(text.split())


def stamped(fig, doc):
    texts = [t.get_text() for t in fig.texts]
    return any(doc["commit"] in t and doc["host"] in t and doc["date"] in t for t in texts), texts


def main():
    plot_py, fixture = sys.argv[1], sys.argv[2]
    spec = importlib.util.spec_from_file_location("rrpc_plot", plot_py)
    plot = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plot)
    with open(fixture) as f:
        doc = json.load(f)
    res = doc["results"]

    # ---- latency distribution
    fig, why = plot.make_latency_cdf(doc)
    check(fig is not None, "the latency plot is drawn", why)
    if fig is not None:
        ax = fig.axes[0]
        check(ax.get_xscale() == "log", "latency axis is logarithmic", ax.get_xscale())
        check(ax.get_yscale() == "logit", "the fraction axis spreads the tail (logit)",
              ax.get_yscale())
        ticks = [t.get_text() for t in ax.get_yticklabels()]
        check(all(p in ticks for p in ("p50", "p99", "p99.9")), "p50, p99, p99.9 are named",
              ticks)
        hl = sorted(round(l.get_ydata()[0], 4) for l in ax.get_lines()
                    if len(set(l.get_ydata())) == 1 and l.get_linestyle() == "--")
        check(all(q in hl for q in (0.5, 0.99, 0.999)), "and marked with lines", hl)
        want = [r for r in res if "error" not in r and r.get("size") == 64 and r.get("rtt_us")
                and not r["test"].startswith(("qos", "sweep"))]
        leg = ax.get_legend()
        entries = [flat(t.get_text()) for t in leg.get_texts()]
        check(len(entries) == len(want) and len(want) >= 11,
              f"one legend entry per series ({len(want)})", f"{len(entries)} entries")
        full = [flat(f'{r["transport"]} {r["test"]} ({r["variant"]})') for r in want]
        check(all(any(e.startswith(w) for e in entries) for w in full),
              "legend labels are whole (not cut)",
              [w for w in full if not any(e.startswith(w) for e in entries)])
        handles = leg.legend_handles if hasattr(leg, "legend_handles") else leg.legendHandles
        looks = [(matplotlib.colors.to_hex(h.get_color()), h.get_marker()) for h in handles]
        check(len(set(looks)) == len(looks), "every series has its own colour and marker",
              looks)
        fig.canvas.draw()
        r = fig.canvas.get_renderer()
        lb, fb = leg.get_window_extent(r), fig.get_tightbbox(r)
        dpi = fig.dpi
        check(lb.x0 >= fb.x0 * dpi - 1 and lb.x1 <= fb.x1 * dpi + 1 and lb.y0 >= fb.y0 * dpi - 1
              and lb.y1 <= fb.y1 * dpi + 1, "the legend lies inside the saved area",
              f"legend {lb}, saved {fb} (in) at {dpi} dpi")
        ok, texts = stamped(fig, doc)
        check(ok, "latency plot names commit, host and date", texts)

    # ---- size sweep
    fig, why = plot.make_size_sweep(doc)
    check(fig is not None, "the size sweep is drawn", why)
    if fig is not None:
        sizes = sorted({r["size"] for r in res if r["test"].startswith("sweep_")})
        for ax in fig.axes:
            ticks = sorted(round(t) for t in ax.get_xticks())
            check(ticks == sizes, f"'{ax.get_title()}': a tick on every size measured",
                  f"{ticks} vs {sizes}")
        bw = [flat(t.get_text()) for t in fig.axes[1].get_legend().get_texts()]
        trs = sorted({r["transport"] for r in res if r["test"] == "sweep_write_bw"})
        check(all(f"{t} one-sided WRITE" in bw for t in trs), "the WRITE sweep is drawn", bw)
        check(stamped(fig, doc)[0], "size sweep names commit, host and date")

    # ---- QoS
    fig, why = plot.make_qos(doc)
    check(fig is not None, "the QoS plot is drawn", why)
    if fig is not None:
        check(len(fig.axes) == 2, "the bulk load has a panel beside the probe", len(fig.axes))
        probe = [flat(t.get_text()) for t in fig.axes[0].get_legend().get_texts()]
        check("target p50 <= 3x unloaded" in probe and "target p99 <= 10x unloaded" in probe,
              "the probe's target lines", probe)
        if len(fig.axes) == 2:
            b = fig.axes[1]
            lines = [c for c in b.collections if isinstance(c, LineCollection)]
            labels = [flat(t.get_text()) for t in b.get_legend().get_texts()]
            check(len(b.patches) > 0 and lines and "target >= 0.8x bulk alone" in labels,
                  "the bulk panel has its bars and target line", labels)
        check(fig.axes[0].get_yscale() == "log", "probe latency axis is logarithmic")
        check(stamped(fig, doc)[0], "QoS plot names commit, host and date")

    # ---- scale
    fig, why = plot.make_scale(doc)
    check(fig is not None, "the scale plot is drawn", why)
    if fig is not None:
        check(len(fig.axes) == 4 and all(a.get_xscale() == "log" and a.get_yscale() == "log"
                                         for a in fig.axes),
              "four log-log panels", [(a.get_xscale(), a.get_yscale()) for a in fig.axes])
        mem = fig.axes[0]
        hl = [round(l.get_ydata()[0], 3) for l in mem.get_lines() if len(set(l.get_ydata())) == 1
              and l.get_linestyle() == "--" and len(l.get_xdata()) == 2]
        check(4.0 in hl and 64.0 in hl, "the memory targets (4 KiB tcp, 64 KiB verbs) drawn", hl)
        ents = [flat(t.get_text()) for t in mem.get_legend().get_texts()]
        check("tcp client RSS" in ents and "tcp server RSS" in ents and
              "verbs client VmPin" in ents, "both sides and VmPin in the legend", ents)
        check(stamped(fig, doc)[0], "scale plot names commit, host and date")

    # ---- the script itself
    with tempfile.TemporaryDirectory() as out:
        p = subprocess.run([sys.executable, plot_py, fixture, out], capture_output=True, text=True)
        names = sorted(os.listdir(out))
        check(p.returncode == 0 and names == ["latency-cdf.png", "qos.png", "scale.png",
                                              "size-sweep.png"],
              "plot.py writes the four PNGs", f"rc {p.returncode}, {names}, {p.stderr[-500:]}")
    print("all checks passed" if not FAILS else f"{FAILS} check(s) failed")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
