#!/usr/bin/python3
"""The section-3 man pages (made by docs/api/gen-api.py --man) cover the API.

    check-man3.py BUILD_MAN_DIR

Every RRPC_API function of include/roce_rpc/*.h (found here by its own
pattern, not by the generator's parser) must head a subsection (.SS) of
exactly one roce_rpc_*.3 page, and `man --warnings -l` must render every
page without a word on stderr.
"""
import glob
import os
import re
import subprocess
import sys

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    outdir = sys.argv[1]
    want = set()
    for h in glob.glob(os.path.join(TOP, "include", "roce_rpc", "*.h")):
        text = re.sub(r"/\*.*?\*/", " ", open(h).read(), flags=re.S)
        text = "\n".join(ln for ln in text.split("\n") if not ln.lstrip().startswith("#"))
        want |= set(re.findall(r"^RRPC_API\s[^;(]*?\b(\w+)\s*\(", text, flags=re.M))
    pages = sorted(glob.glob(os.path.join(outdir, "roce_rpc_*.3")))
    if not pages:
        print("no roce_rpc_*.3 pages in %s" % outdir)
        return 1
    seen = {}
    bad = []
    for p in pages:
        for line in open(p):
            if line.startswith(".SS "):
                for fn in (x.strip() for x in line[4:].split(",")):
                    if fn in seen:
                        bad.append("%s documented in %s and %s" % (fn, seen[fn], p))
                    seen[fn] = os.path.basename(p)
        r = subprocess.run(["man", "--warnings", "-l", p], capture_output=True, text=True,
                           env=dict(os.environ, MANWIDTH="80", MAN_KEEP_FORMATTING="0"))
        if r.returncode != 0 or r.stderr.strip():
            bad.append("man -l %s: exit %d: %s" % (p, r.returncode, r.stderr.strip()[:300]))
    missing = sorted(want - set(seen))
    if missing:
        bad.append("functions without a man page: " + ", ".join(missing))
    for b in bad:
        print(b)
    if bad:
        return 1
    print("%d functions on %d pages; man renders each without a warning"
          % (len(want), len(pages)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
