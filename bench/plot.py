#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Draws rrpc-bench's results as PNGs (Debian's python3-matplotlib).

    /usr/bin/python3 bench/plot.py RESULTS.json OUTDIR

rrpc-bench --plot DIR runs it.  Writes, where the results hold the data:
  latency-cdf.png  64 B round trips per transport and variant: latency on a
                   log axis against the fraction of calls on a logit axis, so
                   p50, p99 and p99.9 are as far apart as they matter (marked);
                   peers without a per-call distribution are drawn as points
                   at the percentiles they report
  size-sweep.png   round trip and bandwidth (RPC sink and one-sided WRITE)
                   against payload size, a tick on every size measured
  qos.png          the 64 B probe's p50/p99, unloaded and under each load, with
                   the isolation targets (p50 <= 3x, p99 <= 10x unloaded), and
                   beside it the bulk load's throughput against the same
                   stream alone, with its target (>= 0.8x)
  scale.png        the scale test, log-log against the connection count: memory
                   and fds per idle connection on each side (with the issue's
                   targets), connects per second, calls per second
Each plot names the commit, host and date of the run in its corner.  A plot
whose data is missing is skipped with a line saying so.  The make_* functions
return the figure (tests/bench/plot_test.py inspects them).
"""
import json
import os
import sys
import textwrap

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FixedLocator, NullLocator  # noqa: E402

COLOURS = plt.get_cmap("tab10").colors
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*", "<", ">"]
LINES = ["-", "--", ":", "-."]


def style(i):
    """A distinct (colour, marker) pair for series i < 100: colour i mod 10,
    the marker shifted by i // 10, the line style by i // 10 too."""
    return {"color": COLOURS[i % 10], "marker": MARKERS[(i + i // 10) % 10],
            "linestyle": LINES[(i // 10) % len(LINES)]}


def ok(r):
    return "error" not in r and "skipped" not in r


def label(r, width=60):
    v = r.get("variant") or ""
    text = f'{r["transport"]} {r["test"]}' + (f" ({v})" if v else "")
    return textwrap.fill(text, width, break_on_hyphens=False, break_long_words=False)


def size_label(b):
    if b >= 1 << 20 and b % (1 << 20) == 0:
        return f"{b >> 20} MiB"
    if b >= 1024 and b % 1024 == 0:
        return f"{b >> 10} KiB"
    return f"{b} B"


def stamp(fig, doc):
    """The run's commit, host and date in the figure's lower right corner."""
    fig.text(0.995, 0.005, f'commit {doc.get("commit", "unknown")} \u00b7 {doc.get("host", "?")} '
             f'\u00b7 {doc.get("date", "?")}', ha="right", va="bottom", fontsize=7, color="0.35")


def legend_outside(ax, **kw):
    """The whole legend to the right of the axes (saved with bbox_inches="tight")."""
    return ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7, borderaxespad=0,
                     **kw)


QUANTILES = [(0.5, "p50"), (0.9, "p90"), (0.99, "p99"), (0.999, "p99.9"), (0.9999, "p99.99")]


def make_latency_cdf(doc):
    res = doc["results"]
    small = [r for r in res if ok(r) and r.get("size") == 64 and r.get("rtt_us")
             and not r["test"].startswith(("qos", "sweep"))]
    rows = [r for r in small if r.get("rtt_cdf_us")]
    peers = [r for r in small if not r.get("rtt_cdf_us")]
    if not rows and not peers:
        return None, "no 64 B latency rows"
    fig, ax = plt.subplots(figsize=(9, 5.5))
    i = 0
    for r in rows:
        pts = [(u, q / 100) for q, u in r["rtt_cdf_us"] if 0 < q < 100 and u > 0]
        st = style(i)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], markersize=3, markevery=4,
                label=label(r), **st)
        # the percentiles themselves, large markers on the line
        marks = [(r["rtt_us"].get(k), q) for k, q in (("p50", 0.5), ("p99", 0.99),
                                                     ("p99.9", 0.999))]
        marks = [(u, q) for u, q in marks if u and u > 0]
        ax.scatter([m[0] for m in marks], [m[1] for m in marks], s=36, color=st["color"],
                   marker=st["marker"], edgecolors="black", linewidths=0.5, zorder=3)
        i += 1
    for r in peers:
        t = r["rtt_us"]
        marks = [(t.get(k), q) for k, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99),
                                            ("p99.9", 0.999)) if t.get(k)]
        if not marks:
            continue
        st = dict(style(i), linestyle=":")
        ax.plot([m[0] for m in marks], [m[1] for m in marks], markersize=6,
                label=label(r) + "\n(reported percentiles only)", **st)
        i += 1
    ax.set_xscale("log")
    ax.set_yscale("logit")
    ax.set_ylim(0.3, 0.9999)
    ax.yaxis.set_major_locator(FixedLocator([q for q, _ in QUANTILES]))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.set_yticklabels([n for _, n in QUANTILES])
    for q, name in QUANTILES[:4]:
        if name in ("p50", "p99", "p99.9"):
            ax.axhline(q, color="0.5", linewidth=0.8, linestyle="--", zorder=1)
    ax.set_xlabel("round trip, \u00b5s (log)")
    ax.set_ylabel("fraction of calls at or below (logit)")
    ax.set_title("64 B round trip: distribution, p50 / p99 / p99.9 marked")
    ax.grid(True, which="both", axis="x", alpha=0.3)
    legend_outside(ax)
    stamp(fig, doc)
    return fig, None


def make_size_sweep(doc):
    res = doc["results"]
    lat = [r for r in res if ok(r) and r["test"] == "sweep_rtt" and r.get("rtt_us")]
    bw = [r for r in res if ok(r) and r["test"] in ("sweep_bw", "sweep_write_bw")
          and r.get("mib_per_s")]
    if not lat and not bw:
        return None, "no sweep rows (--tests sweep)"
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4.8))
    i = 0
    for tr in sorted({r["transport"] for r in lat}):
        pts = sorted((r["size"], r["rtt_us"]["p50"]) for r in lat if r["transport"] == tr)
        a1.plot([p[0] for p in pts], [p[1] for p in pts], label=f"{tr} RPC echo", **style(i))
        i += 1
    i = 0
    for test, what in (("sweep_bw", "RPC sink"), ("sweep_write_bw", "one-sided WRITE")):
        for tr in sorted({r["transport"] for r in bw if r["test"] == test}):
            pts = sorted((r["size"], r["mib_per_s"]) for r in bw
                         if r["transport"] == tr and r["test"] == test)
            a2.plot([p[0] for p in pts], [p[1] for p in pts], label=f"{tr} {what}", **style(i))
            i += 1
    sizes = sorted({r["size"] for r in lat + bw})
    for ax, y, t in ((a1, "round trip p50, \u00b5s (log)", "latency by size, 1 in flight"),
                     (a2, "MiB/s (log)", "bandwidth by size")):
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_locator(FixedLocator(sizes))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xticklabels([size_label(s) for s in sizes], rotation=45, ha="right", fontsize=8)
        ax.set_xlabel("payload")
        ax.set_ylabel(y)
        ax.set_yscale("log")
        ax.set_title(t)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    stamp(fig, doc)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    return fig, None


QOS_NAMES = {"qos_separated": "probe in low_latency,\nbulk sink load",
             "qos_one_class": "probe in bulk,\nbulk sink load",
             "qos_work_loop": "1 ms handlers\non the loop",
             "qos_work_worker": "1 ms handlers\non workers"}


def make_qos(doc):
    res = doc["results"]
    qos = [r for r in res if ok(r) and r["test"].startswith("qos") and r.get("rtt_us")]
    if not qos:
        return None, "no qos rows (--tests qos)"
    probe, bulk = [], []  # (x label, values, transport)
    unloaded = {}
    for tr in sorted({r["transport"] for r in qos}):
        base = next((r for r in res if ok(r) and r["transport"] == tr and r["test"] == "rpc_rtt"
                     and r.get("rtt_us")), None)
        alone = next((r for r in res if ok(r) and r["transport"] == tr
                      and r["test"] == "rpc_large_bw" and r.get("mib_per_s")), None)
        unloaded[tr] = (base, alone)
        if base:
            probe.append((f"{tr}\nunloaded", base["rtt_us"], tr))
        if alone:
            bulk.append((f"{tr}\nbulk alone", alone["mib_per_s"], tr))
        for r in qos:
            if r["transport"] != tr:
                continue
            probe.append((f'{tr}\n{QOS_NAMES.get(r["test"], r["test"])}', r["rtt_us"], tr))
            if r.get("load_mib_per_s"):
                bulk.append((f'{tr}\n{QOS_NAMES.get(r["test"], r["test"])}',
                             r["load_mib_per_s"], tr))
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(min(18, max(11, 0.9 * (len(probe) + len(bulk)))), 5.5),
                                 gridspec_kw={"width_ratios": [max(1, len(probe)),
                                                               max(1, len(bulk))]})
    xs = list(range(len(probe)))
    a1.bar([x - 0.2 for x in xs], [p[1]["p50"] for p in probe], width=0.4, label="p50",
           color=COLOURS[0])
    a1.bar([x + 0.2 for x in xs], [p[1]["p99"] for p in probe], width=0.4, label="p99",
           color=COLOURS[1])
    drew = set()
    for tr, (base, _) in unloaded.items():
        idx = [x for x, p in zip(xs, probe) if p[2] == tr]
        if not base or not idx:
            continue
        lo, hi = min(idx) - 0.45, max(idx) + 0.45
        for mult, key, c, name in ((3, "p50", COLOURS[0], "target p50 <= 3x unloaded"),
                                   (10, "p99", COLOURS[1], "target p99 <= 10x unloaded")):
            a1.hlines(mult * base["rtt_us"][key], lo, hi, colors=c, linestyles="--",
                      label=None if name in drew else name)
            drew.add(name)
    a1.set_xticks(xs)
    a1.set_xticklabels([p[0] for p in probe], fontsize=7)
    a1.set_yscale("log")
    a1.set_ylabel("probe round trip, \u00b5s (log)")
    a1.set_title("64 B probe, one in flight")
    a1.grid(True, axis="y", which="both", alpha=0.3)
    a1.legend(fontsize=7)
    bx = list(range(len(bulk)))
    a2.bar(bx, [b[1] for b in bulk], width=0.6, color=COLOURS[2], label="bulk load")
    drew = False
    for tr, (_, alone) in unloaded.items():
        idx = [x for x, b in zip(bx, bulk) if b[2] == tr]
        if not alone or not idx:
            continue
        a2.hlines(0.8 * alone["mib_per_s"], min(idx) - 0.45, max(idx) + 0.45, colors="black",
                  linestyles="--", label=None if drew else "target >= 0.8x bulk alone")
        drew = True
    a2.set_xticks(bx)
    a2.set_xticklabels([b[0] for b in bulk], fontsize=7)
    a2.set_ylabel("bulk load, MiB/s")
    a2.set_title("the bulk load beside it")
    a2.grid(True, axis="y", alpha=0.3)
    a2.legend(fontsize=7)
    stamp(fig, doc)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    return fig, None


SCALE_TARGETS = {"tcp": 4.0, "verbs": 64.0}


def make_scale(doc):
    rows = [r for r in doc["results"] if r["test"] == "scale" and r.get("scale")
            and r["scale"].get("connections", 0) > 0]
    if not rows:
        return None, "no scale rows (--tests scale)"
    fig, axs = plt.subplots(2, 2, figsize=(12, 8.5))
    (am, af), (ac, ar) = axs
    # one colour per transport in every panel; the marker and line tell the side
    for t, tr in enumerate(sorted({r["transport"] for r in rows})):
        pts = sorted((r for r in rows if r["transport"] == tr),
                     key=lambda r: r["scale"]["connections"])
        n = [r["scale"]["connections"] for r in pts]
        colour = COLOURS[t % 10]
        for side, marker, line in (("client", "o", "-"), ("server", "s", "--")):
            if not all(r["scale"].get(side) for r in pts):
                continue
            who = "both sides, one process" if pts[0]["scale"].get("one_process") else side
            st = {"color": colour, "marker": marker, "linestyle": line}
            am.plot(n, [max(r["scale"][side]["rss_kib_per_conn"], 0.01) for r in pts],
                    label=f"{tr} {who} RSS", **st)
            if any(r["scale"][side]["vmpin_kib_per_conn"] > 0 for r in pts):
                am.plot(n, [max(r["scale"][side]["vmpin_kib_per_conn"], 0.01) for r in pts],
                        label=f"{tr} {who} VmPin", **dict(st, linestyle=":", marker="x"))
            fd = [(k, r["scale"][side]["fds_per_conn"]) for k, r in zip(n, pts)]
            fd = [p for p in fd if p[1] > 0]  # no fd (inproc) has no place on a log axis
            if fd:
                af.plot([p[0] for p in fd], [p[1] for p in fd], label=f"{tr} {who}", **st)
            else:
                af.plot([], [], label=f"{tr} {who}: no fds", **st)
        st = {"color": colour, "marker": "^", "linestyle": "-"}
        ac.plot(n, [max(r["scale"]["connects_per_s"], 0.01) for r in pts], label=tr, **st)
        ar.plot(n, [max(r["scale"]["calls_per_s"], 0.01) for r in pts], label=tr, **st)
        if tr in SCALE_TARGETS:
            am.axhline(SCALE_TARGETS[tr], color="black", linestyle="--", linewidth=0.9)
            am.annotate(f"{tr} target {SCALE_TARGETS[tr]:g} KiB", (1, SCALE_TARGETS[tr]),
                        xycoords=("axes fraction", "data"), ha="right", va="bottom", fontsize=7)
        if tr == "tcp":
            af.axhline(1.2, color="black", linestyle="--", linewidth=0.9)
            af.annotate("tcp target 1.2 fds", (1, 1.2), xycoords=("axes fraction", "data"),
                        ha="right", va="bottom", fontsize=7)
    stops = [r for r in rows if r["scale"].get("stopped")]
    for r in stops:
        ac.annotate("stopped", (r["scale"]["connections"], max(r["scale"]["connects_per_s"], 0.01)),
                    fontsize=7, color="red")
    idle = rows[0]["scale"].get("idle_ms")
    for ax, y, t in ((am, "KiB per connection", f"memory per idle connection ({idle} ms idle)"),
                     (af, "fds per connection", "file descriptors per connection"),
                     (ac, "connections / s", "connect rate (the step's new connections)"),
                     (ar, "calls / s", "64 B echo, one in flight on every connection")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("connections (log)")
        ax.set_ylabel(y + " (log)")
        ax.set_title(t, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    stamp(fig, doc)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    return fig, None


PLOTS = (("latency-cdf.png", make_latency_cdf), ("size-sweep.png", make_size_sweep),
         ("qos.png", make_qos), ("scale.png", make_scale))


def main():
    if len(sys.argv) != 3:
        print("usage: plot.py RESULTS.json OUTDIR", file=sys.stderr)
        return 2
    with open(sys.argv[1]) as f:
        doc = json.load(f)
    os.makedirs(sys.argv[2], exist_ok=True)
    for name, fn in PLOTS:
        fig, why = fn(doc)
        if fig is None:
            print(f"plot: {name}: skipped, {why}")
            continue
        fig.savefig(os.path.join(sys.argv[2], name), dpi=110, bbox_inches="tight")
        plt.close(fig)
        print(f"plot: {name}: written")
    return 0


if __name__ == "__main__":
    sys.exit(main())
