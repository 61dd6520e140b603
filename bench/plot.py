#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Draws rrpc-bench's results as PNGs (Debian's python3-matplotlib).

    /usr/bin/python3 bench/plot.py RESULTS.json OUTDIR

rrpc-bench --plot DIR runs it.  Writes, where the results hold the data:
  latency-cdf.png    round-trip CDF of the 64 B RPC per transport and variant
                     (peers' rows have no per-sample CDF and are left out)
  size-sweep.png     round trip and bandwidth against payload size
  qos-probe.png      the low-latency probe's p50/p99 unloaded and under bulk,
                     per class of the probe
A plot whose data is missing is skipped with a line saying so.
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def label(r):
    v = r.get("variant") or ""
    return f'{r["transport"]} {r["test"]}' + (f" ({v[:40]})" if v else "")


def ok(r):
    return "error" not in r and "skipped" not in r


def latency_cdf(results, out):
    rows = [r for r in results if ok(r) and r.get("rtt_cdf_us") and r.get("size") == 64
            and not r["test"].startswith(("qos", "sweep"))]
    if not rows:
        return "no 64 B latency rows with a CDF"
    fig, ax = plt.subplots(figsize=(8, 5))
    for r in rows:
        qs = [q for q, _ in r["rtt_cdf_us"]]
        us = [u for _, u in r["rtt_cdf_us"]]
        ax.plot(us, qs, marker=".", label=label(r))
    ax.set_xscale("log")
    ax.set_xlabel("round trip, us (log)")
    ax.set_ylabel("fraction of calls")
    ax.set_title("64 B round trip, CDF")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "latency-cdf.png"), dpi=110)
    plt.close(fig)
    return None


def size_sweep(results, out):
    lat = [r for r in results if ok(r) and r["test"] == "sweep_rtt" and r.get("rtt_us")]
    bw = [r for r in results if ok(r) and r["test"] == "sweep_bw" and r.get("mib_per_s")]
    if not lat and not bw:
        return "no sweep rows (--tests sweep)"
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.5))
    for tr in sorted({r["transport"] for r in lat}):
        pts = sorted((r["size"], r["rtt_us"]["p50"]) for r in lat if r["transport"] == tr)
        a1.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=tr)
    for tr in sorted({r["transport"] for r in bw}):
        pts = sorted((r["size"], r["mib_per_s"]) for r in bw if r["transport"] == tr)
        a2.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=tr)
    for ax, y, t in ((a1, "round trip p50, us", "latency by size"),
                     (a2, "MiB/s", "bandwidth by size")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("payload, bytes (log2)")
        ax.set_ylabel(y)
        ax.set_title(t)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    a1.set_yscale("log")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "size-sweep.png"), dpi=110)
    plt.close(fig)
    return None


def qos_probe(results, out):
    qos = [r for r in results if ok(r) and r["test"].startswith("qos") and r.get("rtt_us")]
    if not qos:
        return "no qos rows (--tests qos)"
    bars = []
    for tr in sorted({r["transport"] for r in qos}):
        base = next((r for r in results if ok(r) and r["transport"] == tr
                     and r["test"] == "rpc_rtt" and r.get("rtt_us")), None)
        if base:
            bars.append((f"{tr}\nunloaded", base["rtt_us"]))
        for r in qos:
            if r["transport"] == tr:
                label = {"qos_one_class": "probe in bulk\nunder bulk",
                         "qos_work_loop": "under 1 ms\nhandlers\non the loop",
                         "qos_work_worker": "under 1 ms\nhandlers\non workers"}.get(
                             r["test"], "probe in low_latency\nunder bulk")
                bars.append((f"{tr}\n{label}", r["rtt_us"]))
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(bars)), 4.5))
    xs = range(len(bars))
    ax.bar([x - 0.2 for x in xs], [b[1]["p50"] for b in bars], width=0.4, label="p50")
    ax.bar([x + 0.2 for x in xs], [b[1]["p99"] for b in bars], width=0.4, label="p99")
    ax.set_xticks(list(xs))
    ax.set_xticklabels([b[0] for b in bars], fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("probe round trip, us (log)")
    ax.set_title("64 B probe: unloaded, under 8 x 1 MiB bulk, under busy bulk handlers")
    ax.grid(True, axis="y", which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out, "qos-probe.png"), dpi=110)
    plt.close(fig)
    return None


def main():
    if len(sys.argv) != 3:
        print("usage: plot.py RESULTS.json OUTDIR", file=sys.stderr)
        return 2
    with open(sys.argv[1]) as f:
        results = json.load(f)["results"]
    os.makedirs(sys.argv[2], exist_ok=True)
    for name, fn in (("latency-cdf.png", latency_cdf), ("size-sweep.png", size_sweep),
                     ("qos-probe.png", qos_probe)):
        why = fn(results, sys.argv[2])
        print(f"plot: {name}: " + (f"skipped, {why}" if why else "written"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
