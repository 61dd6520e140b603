#!/usr/bin/python3
"""Run every shell, config and C snippet of README.md and docs/*.md.

usage: run-snippets.py SRCDIR BUILDDIR [FILE.md...]

A snippet is a fenced code block tagged sh, bash, shell or console (run by
bash -e -o pipefail), ini or conf (an rrpcd configuration: checked by
`rrpcd --check`) or c (compiled against the public headers; a whole program,
one with main(), is also linked against the built libraries).  python blocks
are run by bindings/python/tests/test_docs.py; text, json, yaml and untagged
blocks are output or figures and are not run.

An HTML comment on the line just before the fence says how a snippet is
taken; without one it must run as it is:

  <!-- snippet: not run: REASON -->   cannot run here (an RDMA NIC, root,
                                       systemctl, a cluster); counted and
                                       listed with REASON.  Package names of
                                       an `apt-get install` in it are still
                                       checked with apt-cache where apt has
                                       its lists.
  <!-- snippet: fragment -->           C statements: compiled inside a
  <!-- snippet: fragment; given: DECLS -->   function, DECLS (declarations of
                                       what the text around it defines) above
  <!-- snippet: daemon -->             a shell snippet whose last command
                                       is an rrpcd serving until stopped: it
                                       must accept connections on its port
                                       (7700 in the docs) within 30 s; then
                                       it is stopped
  <!-- snippet: checked with the next -->   a configuration that the next
                                       one of the page continues

Shell snippets run in order, in one sandbox: the working directory holds the
source tree's entries (symlinks) with `build` the build tree; the build's
rrpcd, rrpc-doctor and rrpc-bench are on PATH as if installed.  Paths a
document names on a real host are moved into the sandbox: /etc/rrpcd (and
the build's own configuration directory, which the installed example names)
holds development certificates made by scripts/make-dev-certs.sh (rrpcd.crt,
rrpcd.key, ca.crt, ticket.pem) and the example configuration; the systemd
credentials directory /run/credentials/rrpcd.service is an empty directory
there; /tmp/ is a directory of the sandbox; rrpcd's port 7700 is a free
port.  The commented check command of the example configuration
(daemon/rrpcd.conf.example.in) runs too, after its "Copy to" step.

Exit status: 0 when every snippet that is run passed; 1 otherwise (each
failure is printed with its output).  The not-run list is printed either way.
"""
import glob
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

SHELL_TAGS = ("sh", "bash", "shell", "console")
CONFIG_TAGS = ("ini", "conf")
C_TAGS = ("c",)
SNIPPET_TIMEOUT = 60

# Commands that change the host or need what a test run does not have: a
# snippet that uses one is never run, marked or not (unmarked, it fails).
HOST_CHANGING = re.compile(
    r"(^|[;&|(]\s*|\$\(\s*)(sudo|apt-get|apt|dpkg|systemctl|journalctl|ldconfig|modprobe|"
    r"mount|umount|sysctl|mlnx_qos|dcb|tcpdump|tshark\s+-i|rping|ip\s+(link|addr|neigh|route)|"
    r"rdma\s+link\s+(add|delete)|scripts/bootstrap\.sh|tests/softroce/|meson\s+install|"
    r"meson\s+test|ulimit\s+-l\s+unlimited)\b"
    r"|>\s*/(etc|sys|proc|usr|opt)/|--prefix=/",
    re.M)

MARKER = re.compile(r"^\s*<!--\s*snippet:\s*(.*?)\s*-->\s*$")
FENCE = re.compile(r"^(\s*)```(\S*)\s*$")


class Snippet:
    def __init__(self, path, line, tag, text, marker):
        self.path, self.line, self.tag, self.text, self.marker = path, line, tag, text, marker
        self.kind = None
        self.arg = ""
        if marker is not None:
            m = re.match(r"(not run|fragment|daemon|checked with the next)\s*(?:[:;]\s*(.*))?$",
                         marker, flags=re.S)
            if not m:
                raise SystemExit("%s: unknown snippet marker <!-- snippet: %s --> (known: not "
                                 "run: REASON, fragment[; given: DECLS], daemon, checked with "
                                 "the next)" % (self.where(), marker))
            self.kind, self.arg = m.group(1), (m.group(2) or "").strip()
            if self.kind == "not run" and not self.arg:
                raise SystemExit("%s: <!-- snippet: not run: REASON --> needs its reason"
                                 % self.where())

    def where(self):
        return "%s:%d" % (self.path, self.line)


def extract(path, rel):
    """Fenced blocks of one markdown file, with the marker just above each."""
    lines = open(path, encoding="utf-8").read().split("\n")
    out = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, tag, start = m.group(1), m.group(2).lower(), i
        body = []
        i += 1
        while i < len(lines) and not re.match(r"^\s*```\s*$", lines[i]):
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
            i += 1
        i += 1
        mk = MARKER.match(lines[start - 1]) if start > 0 else None
        out.append(Snippet(rel, start + 1, tag, "\n".join(body) + "\n",
                           mk.group(1) if mk else None))
    return out


class Sandbox:
    def __init__(self, src, build):
        self.src, self.build = src, build
        self.dir = tempfile.mkdtemp(prefix="rrpc-docs-")
        self.work = os.path.join(self.dir, "src")
        self.etc = os.path.join(self.dir, "etc", "rrpcd")
        self.creds = os.path.join(self.dir, "run", "credentials", "rrpcd.service")
        self.tmp = os.path.join(self.dir, "tmp")
        self.home = os.path.join(self.dir, "home")
        for d in (self.work, self.etc, self.creds, self.tmp, self.home):
            os.makedirs(d)
        for name in os.listdir(src):
            if name == "build" or name.startswith("build-") or name == ".git":
                continue
            os.symlink(os.path.join(src, name), os.path.join(self.work, name))
        os.symlink(build, os.path.join(self.work, "build"))
        self.port = free_port()
        # The configuration directory the build's unit and example name.
        self.confdir = "/usr/local/etc/rrpcd"
        unit = os.path.join(build, "daemon", "rrpcd.service")
        if os.path.exists(unit):
            m = re.search(r"-c (\S+)/rrpcd\.conf", open(unit).read())
            if m:
                self.confdir = m.group(1)
        self.rewrite_re = re.compile("(%s|/etc/rrpcd(?![\\w.-])|/run/credentials/rrpcd\\.service"
                                     "|/tmp(?=/)|:7700\\b)" % re.escape(self.confdir))
        self.env = dict(os.environ)
        self.env.update(
            HOME=self.home, TMPDIR=self.tmp, LC_ALL="C.UTF-8",
            PATH=os.pathsep.join([os.path.join(build, "daemon"),
                                  os.path.join(build, "tools", "doctor"),
                                  os.path.join(build, "bench"),
                                  self.env.get("PATH", "/usr/bin:/bin")]))
        self.env.pop("MAKEFLAGS", None)
        self.procs = []

    def rewrite(self, text):
        def one(m):
            s = m.group(1)
            if s == self.confdir or s == "/etc/rrpcd":
                return self.etc
            if s == "/run/credentials/rrpcd.service":
                return self.creds
            if s == "/tmp":
                return self.tmp
            return ":%d" % self.port
        return self.rewrite_re.sub(one, text)

    def setup_credentials(self):
        """What an operator has in /etc/rrpcd before following the docs:
        a certificate, its key, the client CA and a ticket key (development
        ones here), and the installed example configuration."""
        certs = os.path.join(self.dir, "dev-certs")
        r = subprocess.run([os.path.join(self.src, "scripts", "make-dev-certs.sh"), certs,
                            "kv-server", "kv-client"], env=self.env, capture_output=True,
                           text=True, timeout=120)
        if r.returncode:
            raise SystemExit("make-dev-certs.sh failed:\n" + r.stdout + r.stderr)
        for name in ("rrpcd.crt", "rrpcd.key", "ca.crt", "ticket.pem"):
            shutil.copy(os.path.join(certs, name), os.path.join(self.etc, name))
            os.chmod(os.path.join(self.etc, name), 0o600 if name.endswith((".key", ".pem"))
                     else 0o644)
        self.dev_certs = certs
        ex = os.path.join(self.build, "daemon", "rrpcd.conf.example")
        if os.path.exists(ex):
            with open(os.path.join(self.etc, "rrpcd.conf.example"), "w") as f:
                f.write(self.rewrite(open(ex).read()))

    def credential_for(self, path):
        """A development file standing in for the one a configuration names."""
        base = os.path.basename(path)
        if base.endswith(".crt"):
            return "ca.crt" if re.search(r"(^|[-_.])ca([-_.]|$)", base) else "rrpcd.crt"
        if base.endswith(".key"):
            return "rrpcd.key"
        if base.endswith(".pem"):
            return "ticket.pem"
        return None

    def stop_all(self):
        """Stops each snippet's process group, and waits until every process
        of it is gone (a server still closing would hold its port)."""
        for p in self.procs:
            for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
                try:
                    os.killpg(p.pid, sig)
                except ProcessLookupError:
                    break
                end = time.monotonic() + wait
                while time.monotonic() < end:
                    p.poll()
                    try:
                        os.killpg(p.pid, 0)
                    except ProcessLookupError:
                        break
                    time.sleep(0.05)
                else:
                    continue
                break
            p.wait()
        self.procs = []


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def run_shell(sb, sn):
    text = sn.text
    # On the text with the sandbox's paths in: writing /etc/rrpcd/tokens is
    # writing into the sandbox.
    m = HOST_CHANGING.search(re.sub(r"(^|\s)#.*", "", sb.rewrite(text)))
    if m:
        return ("not run: %r would change this host or needs what the test run has not; "
                "mark the snippet <!-- snippet: not run: REASON --> (or split off the lines "
                "that can run)" % m.group(0).strip())
    if sn.tag == "console":
        text = "\n".join(l[2:] for l in text.split("\n") if l.startswith("$ ")) + "\n"
    script = os.path.join(sb.dir, "snippet-%s-%d.sh" % (os.path.basename(sn.path), sn.line))
    with open(script, "w") as f:
        f.write("set -e -o pipefail\n" + sb.rewrite(text))
    if sn.kind != "daemon":
        p = subprocess.Popen(["bash", script], cwd=sb.work, env=sb.env, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, start_new_session=True)
        sb.procs.append(p)
        try:
            out = p.communicate(timeout=SNIPPET_TIMEOUT)[0]
        except subprocess.TimeoutExpired:
            sb.stop_all()
            return ("did not finish within %d s (a server? mark it <!-- snippet: daemon -->)"
                    % SNIPPET_TIMEOUT)
        sb.stop_all()
        if p.returncode:
            return "exit %d\n%s" % (p.returncode, out)
        return None
    log = open(script + ".log", "w+")
    p = subprocess.Popen(["bash", script], cwd=sb.work, env=sb.env, stdout=log,
                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                         start_new_session=True)
    sb.procs.append(p)
    # rrpcd's port, 7700 in the docs (in the snippet or in the sandbox's
    # configuration it starts with), must accept connections.
    deadline = time.monotonic() + 30
    ok = False
    while time.monotonic() < deadline and p.poll() is None:
        time.sleep(0.2)
        try:
            socket.create_connection(("127.0.0.1", sb.port), 0.5).close()
            ok = True
            break
        except OSError:
            continue
    err = None
    if not ok:
        log.seek(0)
        err = ("exit %s before serving" % p.poll() if p.poll() is not None
               else "not listening on port 7700 (here %d) after 30 s" % sb.port) + \
            "\n" + log.read()
    log.close()
    sb.stop_all()
    return err


def run_config(sb, sn, prefix):
    text = sb.rewrite(prefix + sn.text)
    for m in re.finditer(r"^\s*[\w.]+\s*=\s*(%s/\S+)" % re.escape(sb.dir), text, flags=re.M):
        path = m.group(1)
        if not os.path.exists(path):
            stand_in = sb.credential_for(path)
            if stand_in:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                shutil.copy(os.path.join(sb.dev_certs, stand_in), path)
                os.chmod(path, 0o600)
    conf = os.path.join(sb.dir, "snippet-%s-%d.conf" % (os.path.basename(sn.path), sn.line))
    with open(conf, "w") as f:
        f.write(text)
    r = subprocess.run([os.path.join(sb.build, "daemon", "rrpcd"), "-c", conf, "--check"],
                       env=sb.env, capture_output=True, text=True, timeout=SNIPPET_TIMEOUT)
    if r.returncode:
        return "rrpcd --check: exit %d\n%s%s" % (r.returncode, r.stdout, r.stderr)
    return None


def cc_flags(src):
    return ["-std=gnu11", "-Wall", "-Wextra", "-Werror", "-I", os.path.join(src, "include")]


def run_c(sb, sn):
    cc = os.environ.get("CC", "cc")
    d = os.path.join(sb.dir, "c-%s-%d" % (os.path.basename(sn.path), sn.line))
    os.makedirs(d)
    whole = re.search(r"\bint\s+main\s*\(", sn.text) is not None
    if whole:
        if sn.kind == "fragment":
            return "marked a fragment but has main()"
        source = sn.text
    else:
        if sn.kind != "fragment":
            return ("C without main(): mark it <!-- snippet: fragment --> (with `; given: "
                    "DECLS` for what the page defines around it) or make it a program")
        incl = [l for l in sn.text.split("\n") if l.startswith("#include")]
        body = [("    /* ... */" if l.strip() == "..." else "    " + l)
                for l in sn.text.split("\n") if not l.startswith("#include")]
        given = sn.arg[len("given:"):].strip() if sn.arg.startswith("given:") else ""
        if sn.arg and not given:
            return "unknown fragment option %r (known: given: DECLS)" % sn.arg
        source = ("#include <errno.h>\n#include <stdio.h>\n#include <stdlib.h>\n"
                  "#include <string.h>\n#include <roce_rpc/rrpc.h>\n#include <roce_rpc/broker.h>\n"
                  + "\n".join(incl) + "\n" + given + "\n"
                  "void docs_snippet(void);\nvoid docs_snippet(void)\n{\n"
                  + "\n".join(body) + "\n}\n")
    cfile = os.path.join(d, "snippet.c")
    with open(cfile, "w") as f:
        f.write('#line 1 "%s:%d"\n' % (sn.path, sn.line + 1) if whole else "")
        f.write(source)
    flags = cc_flags(sb.src)
    if whole:
        libs = []
        for sub in ("libroce_rpc", os.path.join("libroce_rpc", "broker")):
            libdir = os.path.join(sb.build, sub)
            libs += ["-L" + libdir, "-Wl,-rpath," + libdir]
        cmd = [cc] + flags + [cfile, "-o", os.path.join(d, "a.out")] + libs + \
            ["-lroce_rpc_broker", "-lroce_rpc"]
    else:
        cmd = [cc] + flags + ["-Wno-unused-variable", "-Wno-unused-but-set-variable",
                              "-c", cfile, "-o", os.path.join(d, "snippet.o")]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=SNIPPET_TIMEOUT)
    if r.returncode:
        return "%s\n%s%s\n--- compiled as ---\n%s" % (" ".join(cmd), r.stdout, r.stderr, source)
    return None


def apt_packages(text):
    joined = re.sub(r"\\\n", " ", text)
    pkgs = []
    for m in re.finditer(r"apt-get install([^\n;&|#]*)", joined):
        pkgs += [w for w in m.group(1).split() if not w.startswith("-")]
    return pkgs


def check_apt(pkgs):
    """Package names apt does not know, or None when apt has no lists here."""
    if not glob.glob("/var/lib/apt/lists/*Packages*") or not shutil.which("apt-cache"):
        return None
    # One apt-cache run for all (each costs about a second): it prints the
    # records of the names it knows and fails when it misses one.
    r = subprocess.run(["apt-cache", "show", "--no-all-versions"] + pkgs,
                       capture_output=True, text=True)
    known = set(re.findall(r"^Package: (\S+)", r.stdout, flags=re.M))
    return [p for p in pkgs if p not in known]


def example_config_snippet(build):
    """The check command the example configuration's comment gives, after
    the copy it asks for first."""
    ex = os.path.join(build, "daemon", "rrpcd.conf.example")
    if not os.path.exists(ex):
        return None
    text = open(ex).read()
    m = re.search(r"^# Copy to (\S+?)/rrpcd\.conf,", text, flags=re.M)
    cmd = re.findall(r"^#   (.*)$", text, flags=re.M)
    if not m or not cmd:
        raise SystemExit("daemon/rrpcd.conf.example lost its \"Copy to\" and check command")
    body = "cp %s/rrpcd.conf.example %s/rrpcd.conf\n" % (m.group(1), m.group(1))
    body += "\n".join(l.strip() for l in cmd) + "\n"
    return Snippet("daemon/rrpcd.conf.example.in", 0, "sh", body, None)


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    src, build = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    files = sys.argv[3:] or (["README.md"] + sorted(
        os.path.relpath(p, src) for p in glob.glob(os.path.join(src, "docs", "*.md"))))
    snippets = []
    for rel in files:
        snippets += extract(os.path.join(src, rel), rel)
    ex = example_config_snippet(build)
    if ex:
        snippets.append(ex)
    sb = Sandbox(src, build)
    failures, not_run, ran, t0 = [], [], 0, time.monotonic()
    try:
        sb.setup_credentials()
        pending_config = {}
        for sn in snippets:
            if sn.tag in SHELL_TAGS:
                kind = "shell"
            elif sn.tag in CONFIG_TAGS:
                kind = "config"
            elif sn.tag in C_TAGS:
                kind = "c"
            else:
                if sn.marker is not None:
                    failures.append((sn, "a snippet marker on a %r block, which is never run"
                                     % sn.tag))
                continue
            if sn.kind == "not run":
                note = ""
                pkgs = apt_packages(sn.text)
                if pkgs:
                    missing = check_apt(pkgs)
                    if missing is None:
                        note = " (apt has no lists here: package names not checked)"
                    elif missing:
                        failures.append((sn, "apt-get install names packages apt does not "
                                         "know: %s" % " ".join(missing)))
                    else:
                        note = " (package names checked with apt-cache: %s)" % " ".join(pkgs)
                not_run.append((sn, sn.arg + note))
                continue
            if (sn.kind == "daemon" and kind != "shell") or \
                    (sn.kind == "fragment" and kind != "c") or \
                    (sn.kind == "checked with the next" and kind != "config"):
                failures.append((sn, "marker %r does not apply to a %s snippet"
                                 % (sn.kind, sn.tag)))
                continue
            t = time.monotonic()
            if kind == "shell":
                err = run_shell(sb, sn)
            elif kind == "config":
                prefix = pending_config.pop(sn.path, "")
                if sn.kind == "checked with the next":
                    pending_config[sn.path] = prefix + sn.text
                    ran += 1
                    continue
                err = run_config(sb, sn, prefix)
            else:
                err = run_c(sb, sn)
            ran += 1
            status = "FAIL" if err else "ok"
            print("%-4s %-40s %-6s %.1f s" % (status, sn.where(), sn.tag, time.monotonic() - t),
                  flush=True)
            if err:
                failures.append((sn, err))
        for path in pending_config:
            failures.append((Snippet(path, 0, "ini", "", None),
                             "a configuration \"checked with the next\" has no next"))
    finally:
        sb.stop_all()
        if not failures and not os.environ.get("RRPC_DOCS_KEEP"):
            shutil.rmtree(sb.dir, ignore_errors=True)
    print("\nnot run (%d), each marked in its document:" % len(not_run))
    for sn, why in not_run:
        print("  %-40s %s" % (sn.where(), why))
    for sn, err in failures:
        print("\nFAILED %s (%s):\n%s\n--- the snippet ---\n%s" % (sn.where(), sn.tag,
                                                                  err.rstrip(), sn.text.rstrip()))
    print("\nsnippets: %d run, %d failed, %d not run (marked); %.1f s%s"
          % (ran, len(failures), len(not_run), time.monotonic() - t0,
             "; sandbox kept in " + sb.dir if failures else ""))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
