#!/usr/bin/env python3
"""Runs the CUDA cases of Horizon's GoogleTest binaries on a GPU machine so that one kernel fault
costs one group of cases, not the rest of the suite, and every case is counted once.

A CUDA fault (an illegal address, a trap, a misaligned access) leaves the process's CUDA context
unusable: every later case in that process fails too. So the cases run one gtest test suite at a
time (large suites in chunks of --chunk cases), each group in a process of its own, watched:

- a case whose failure names a sticky CUDA error is a **fault**: the cases the same process ran
  after it are not counted, the faulting case is rerun alone with CUDA_LAUNCH_BLOCKING=1 (so the
  error names the failing launch) and under compute-sanitizer memcheck, and the group goes on
  from the case after it in a fresh process;
- a process that dies inside a case (a signal, an abort) marks that case **crashed**; one that
  prints nothing for --idle seconds marks the running case **hung** (killed); both are rerun the
  same way, and the group goes on without them;
- a binary that does not load (a missing shared library) or lists no case gets a row that says why;
- nothing starts after the deadline; what it cut off is counted as "not run", never as passed.

Every case ends in exactly one of: passed, failed, skipped, fault, crashed, hung, not run.
Prints a markdown report (stdout) and writes the per-case results as JSON (--json).

  scripts/gpu/gpu_tests.py --build build-gpu --suites core,attention --filter '*Cuda*' \\
      --deadline EPOCH --logs /tmp/logs [--json results.json] [--chunk 150] [--idle 90]
"""
import argparse
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time

RUN = re.compile(r"^\[ RUN      \] (\S+)\s*$")
END = re.compile(r"^\[ +(OK|FAILED|SKIPPED) +\] (\S+) \(\d+ ms\)\s*$")
DONE = re.compile(r"^\[==========\] \d+ tests? from \d+ test suites? ran\.")
# errors after which the CUDA context of the process is unusable (cudaGetErrorName's names)
STICKY = re.compile(r"cudaError(IllegalAddress|LaunchFailure|MisalignedAddress|IllegalInstruction|"
                    r"HardwareStackError|InvalidAddressSpace|InvalidPc|Assert|LaunchTimeout|"
                    r"ECCUncorrectable|Unknown)\b|an illegal memory access|unspecified launch failure")
STATUS = {"OK": "passed", "FAILED": "failed", "SKIPPED": "skipped"}
ORDER = ["passed", "failed", "skipped", "fault", "crashed", "hung", "not run"]


def now():
    return time.monotonic()


class Clock:
    def __init__(self, deadline_epoch):
        # the deadline is given in epoch seconds (the shell's date +%s); kept as a monotonic instant
        self.end = now() + (deadline_epoch - time.time())

    def left(self):
        return self.end - now()


def run_watched(cmd, log, idle, hard, env=None):
    """Runs cmd (output to the log and returned as lines). Killed, with its process group, after
    `idle` seconds without output or `hard` seconds in all. Returns (rc, lines, why) with why one
    of 'exit', 'idle', 'hard'."""
    with open(log, "ab") as f:
        line = " ".join(cmd)
        f.write(("$ " + (line if len(line) < 400 else line[:400] + f" ... ({len(line)} characters)") + "\n").encode())
    try:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                             start_new_session=True)
    except OSError as e:
        with open(log, "ab") as f:
            f.write(f"cannot start: {e}\n".encode())
        return 127, [f"cannot start: {e}"], "exit"
    t0 = last = now()
    buf = b""
    why = "exit"
    fd = p.stdout.fileno()
    with open(log, "ab") as f:
        while True:
            t = now()
            # the time limit first: an idle limit capped at the time left (the deadline) ends at the
            # same moment, and a case cut by the deadline is "not run", not hung
            if t - t0 > hard:
                why = "hard"
                break
            if t - last > idle:
                why = "idle"
                break
            r, _, _ = select.select([fd], [], [], min(1.0, max(0.05, hard - (t - t0))))
            if r:
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                f.write(chunk)
                f.flush()
                buf += chunk
                last = now()
        if why != "exit":
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            f.write(f"\n[gpu_tests] killed: {why} ({'no output for %d s' % idle if why == 'idle' else 'time limit %d s' % hard})\n".encode())
        rc = p.wait()
    return rc, buf.decode("utf-8", "replace").splitlines(), why


def list_cases(binary, gfilter, log):
    """[(suite, full name)] in gtest's order, or raises RuntimeError with why the binary cannot list."""
    rc, lines, why = run_watched([binary, "--gtest_list_tests", "--gtest_filter=" + gfilter], log, 60, 60)
    if rc != 0 or why != "exit":
        tail = [l for l in lines if l.strip() and not l.startswith("$ ")]
        raise RuntimeError(f"exit {rc}{' (' + why + ')' if why != 'exit' else ''}: " + (" | ".join(tail[-3:]) or "no output"))
    cases, suite = [], None
    for line in lines:
        if line.startswith("$ ") or not line.strip():
            continue
        if line.startswith("  "):
            if suite is not None:
                cases.append((suite, suite + "." + line.split("#")[0].strip()))
        else:
            suite = line.split("#")[0].strip().rstrip(".")
    return cases


def missing_libraries(binary):
    if not shutil.which("ldd"):
        return []
    try:
        out = subprocess.run(["ldd", binary], capture_output=True, text=True, timeout=30).stdout
    except (subprocess.SubprocessError, OSError):
        return []
    return [l.split("=>")[0].strip() for l in out.splitlines() if "not found" in l]


def parse(lines):
    """Per case of one process's output: [(name, status or None, its lines)] in order; status None
    for a case that started and did not end. Also whether gtest reached its final summary."""
    cases, cur, body, done = [], None, [], False
    for line in lines:
        m = RUN.match(line)
        if m:
            if cur is not None:  # a RUN without an end: cannot happen in one process, keep it honest
                cases.append((cur, None, body))
            cur, body = m.group(1), []
            continue
        m = END.match(line)
        if m and cur is not None and m.group(2) == cur:
            cases.append((cur, STATUS[m.group(1)], body))
            cur, body = None, []
            continue
        if DONE.match(line):
            done = True
        if cur is not None:
            body.append(line)
    if cur is not None:
        cases.append((cur, None, body))
    return cases, done


def first_errors(lines, n=6):
    keep = [l.strip() for l in lines if re.search(r"Failure|error|Error|exception|what\(\)|Expected|Which is|terminate|Assert", l)]
    seen, out = set(), []
    for l in keep:
        if l not in seen:
            seen.add(l)
            out.append(l[:300])
    return out[:n]


def skip_reason(body):
    """gtest prints "file:line: Skipped" and then the message"""
    for i, l in enumerate(body):
        if l.rstrip().endswith(": Skipped"):
            return " ".join(x.strip() for x in body[i + 1:i + 3] if x.strip())[:200]
    return ""


class Runner:
    def __init__(self, args):
        self.a = args
        self.clock = Clock(args.deadline)
        self.results = {}   # name -> {"status", "binary", "detail"}
        self.rows = []      # per binary
        self.culprits = []  # per fault / crash / hang
        self.nproc = 0
        self.exit_notes = set()
        os.makedirs(args.logs, exist_ok=True)

    def log(self, binary, what):
        return os.path.join(self.a.logs, f"{self.a.tag}_{os.path.basename(binary)}_{what}.log")

    def investigate(self, binary, name, status):
        """Reruns a faulting, crashing or hanging case alone: CUDA_LAUNCH_BLOCKING=1, then memcheck."""
        c = {"case": name, "binary": os.path.basename(binary), "status": status}
        safe = re.sub(r"[^A-Za-z0-9_.]", "_", name)
        left = self.clock.left() - 15
        if left < 20:
            c["blocking"] = "not rerun: deadline"
            self.culprits.append(c)
            return
        env = dict(os.environ, CUDA_LAUNCH_BLOCKING="1")
        log = self.log(binary, f"culprit_{safe}_blocking")
        # a hang already cost --idle seconds: its rerun gets at most 30 more, and no memcheck
        idle = min(self.a.idle, 30) if status == "hung" else self.a.idle
        rc, lines, why = run_watched([binary, "--gtest_color=no", "--gtest_filter=" + name], log,
                                     min(idle, left), min(120, left), env)
        self.nproc += 1
        got, _ = parse(lines)
        st = got[0][1] if got and got[0][1] else ("hung" if why != "exit" else f"died (exit {rc})")
        c["blocking"] = f"{st}; " + " | ".join(first_errors(lines, 4))
        sanitizer = shutil.which(self.a.sanitizer) if self.a.sanitizer else None
        left = self.clock.left() - 15
        if status == "hung":
            c["memcheck"] = "not run: a hang"
        elif sanitizer and left >= 60:
            log = self.log(binary, f"culprit_{safe}_memcheck")
            rc, lines, why = run_watched([sanitizer, "--tool", "memcheck", "--print-limit", "10", "--error-exitcode", "99",
                                          binary, "--gtest_color=no", "--gtest_filter=" + name], log,
                                         min(3 * self.a.idle, left), min(240, left))
            self.nproc += 1
            errs = [l.strip() for l in lines if re.match(r"^========= (Invalid|Out-of-range|Misaligned|Program hit|Uninitialized|Barrier|Malformed|Warp|ERROR SUMMARY)", l)]
            c["memcheck"] = (f"exit {rc}{' (' + why + ')' if why != 'exit' else ''}: " + " | ".join(errs[:6])) if errs else f"exit {rc}, no report line"
        else:
            c["memcheck"] = "not run: " + ("no compute-sanitizer" if not sanitizer else "deadline")
        self.culprits.append(c)

    def run_group(self, binary, names):
        pending = list(names)
        restarts = 0
        while pending:
            left = self.clock.left() - 10
            if left < self.a.min_group:
                for n in pending:
                    self.results[n] = {"status": "not run", "binary": os.path.basename(binary), "detail": "deadline"}
                return
            log = self.log(binary, "groups")
            rc, lines, why = run_watched([binary, "--gtest_color=no", "--gtest_filter=" + ":".join(pending)], log,
                                         min(self.a.idle, left), left)
            self.nproc += 1
            cases, done = parse(lines)
            if done and rc < 0:
                self.exit_notes.add(f"a process was ended by signal {-rc} after its cases")
            culprit = None
            for name, status, body in cases:
                if name not in pending:
                    continue
                if status is None:  # started, never ended: the process died or was killed in it
                    if why == "hard":
                        culprit = (name, "not run", "deadline")
                    elif why == "idle":
                        culprit = (name, "hung", f"no output for {self.a.idle} s")
                    else:
                        culprit = (name, "crashed", f"exit {rc}; " + " | ".join(first_errors(body, 3)))
                    break
                if status == "failed" and any(STICKY.search(l) for l in body):
                    culprit = (name, "fault", " | ".join(first_errors(body, 3)))
                    break  # what this process ran after it is not counted
                self.results[name] = {"status": status, "binary": os.path.basename(binary),
                                      "detail": skip_reason(body) if status == "skipped" else
                                      " | ".join(first_errors(body, 4)) if status == "failed" else ""}
            if culprit:
                name, status, detail = culprit
                self.results[name] = {"status": status, "binary": os.path.basename(binary), "detail": detail}
                if status != "not run":
                    self.investigate(binary, name, status)
                restarts += 1
            pending = [n for n in pending if n not in self.results]
            if not pending:
                return
            if culprit is None and (done or not cases):
                # the process ran nothing more of this group (it died before any case, or gtest
                # left cases out): say so instead of looping
                tail = [l for l in lines if l.strip() and not l.startswith("$ ")][-2:]
                why_txt = (f"deadline" if why == "hard" else
                           f"the process ended (exit {rc}{', ' + why if why != 'exit' else ''}) without running them: " + " | ".join(tail))
                for n in pending:
                    self.results[n] = {"status": "not run", "binary": os.path.basename(binary), "detail": why_txt}
                return
            if restarts > self.a.max_restarts:
                for n in pending:
                    self.results[n] = {"status": "not run", "binary": os.path.basename(binary),
                                       "detail": f"{restarts} faults/crashes in this group: stopped"}
                return

    def run_binary(self, suite):
        binary = os.path.join(self.a.build, f"hz_test_{suite}")
        name = os.path.basename(binary)
        t0 = now()
        row = {"binary": name, "counts": {k: 0 for k in ORDER}, "note": "", "processes": 0}
        if not os.path.exists(binary):
            row["note"] = "not built"
            self.rows.append(row)
            return
        missing = missing_libraries(binary)
        try:
            cases = list_cases(binary, self.a.filter, self.log(binary, "list"))
        except RuntimeError as e:
            row["note"] = "does not load: " + (f"missing {', '.join(missing)}; " if missing else "") + str(e)
            self.rows.append(row)
            return
        if not cases:
            row["note"] = "no case matches the filter"
            self.rows.append(row)
            return
        groups = {}
        for s, n in cases:
            groups.setdefault(s, []).append(n)
        p0 = self.nproc
        self.exit_notes = set()
        for s, names in groups.items():
            # cases an earlier call on this machine finished (--resume) are not run again
            names = [n for n in names if n not in self.results]
            for i in range(0, len(names), self.a.chunk):
                self.run_group(binary, names[i:i + self.a.chunk])
                self.save()  # a call killed at its limit keeps every finished group
        for s, n in cases:
            row["counts"][self.results[n]["status"]] += 1
        row["note"] = "; ".join(sorted(self.exit_notes))
        row["groups"] = len(groups)
        row["processes"] = self.nproc - p0
        row["seconds"] = round(now() - t0, 1)
        self.rows.append(row)

    def save(self, total=None):
        if not self.a.json:
            return
        with open(self.a.json + ".part", "w") as f:
            json.dump({"rows": self.rows, "cases": self.results, "culprits": self.culprits, "total": total}, f, indent=1)
        os.replace(self.a.json + ".part", self.a.json)

    def report(self):
        out = []
        out.append("| suite | cases | " + " | ".join(ORDER) + " | processes | seconds | notes |")
        out.append("|---|---|" + "---|" * len(ORDER) + "---|---|---|")
        total = {k: 0 for k in ORDER}
        for r in self.rows:
            n = sum(r["counts"].values())
            for k in ORDER:
                total[k] += r["counts"][k]
            out.append(f"| {r['binary']} | {n} | " + " | ".join(str(r["counts"][k]) for k in ORDER) +
                       f" | {r.get('processes', 0)} | {r.get('seconds', 0)} | {r['note']} |")
        out.append(f"| **all** | {sum(total.values())} | " + " | ".join(str(total[k]) for k in ORDER) + " | | | |")
        bad = {k: [(n, v) for n, v in self.results.items() if v["status"] == k] for k in ("fault", "crashed", "hung", "failed", "not run")}
        if self.culprits:
            out += ["", "Faults, crashes and hangs (each rerun alone):", "```"]
            for c in self.culprits:
                out.append(f"{c['status']}: {c['binary']} {c['case']}")
                out.append(f"    detail: {self.results[c['case']]['detail']}")
                out.append(f"    CUDA_LAUNCH_BLOCKING=1: {c.get('blocking', '')}")
                out.append(f"    memcheck: {c.get('memcheck', '')}")
            out.append("```")
        if bad["failed"]:
            out += ["", f"Failed ({len(bad['failed'])}; the first lines of each):", "```"]
            for n, v in bad["failed"][:60]:
                out.append(f"{v['binary']} {n}")
                if v["detail"]:
                    out.append("    " + v["detail"][:400])
            out.append("```")
        if bad["not run"]:
            why = {}
            for n, v in bad["not run"]:
                why.setdefault(v["detail"], []).append(n)
            out += ["", "Not run:", "```"]
            for w, ns in why.items():
                out.append(f"{len(ns)} cases: {w} (first: {ns[0]})")
            out.append("```")
        skips = {}
        for n, v in self.results.items():
            if v["status"] == "skipped":
                skips.setdefault((v["binary"], v["detail"]), 0)
                skips[(v["binary"], v["detail"])] += 1
        if skips:
            out += ["", "Skip reasons (count, suite: reason):", "```"]
            for (b, d), k in sorted(skips.items(), key=lambda x: -x[1])[:30]:
                out.append(f"{k:6d} {b}: {d}")
            out.append("```")
        return "\n".join(out), total


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", required=True)
    ap.add_argument("--suites", required=True, help="comma-separated: core,attention,... (hz_test_<suite>)")
    ap.add_argument("--filter", required=True, help="gtest filter selecting the CUDA cases")
    ap.add_argument("--deadline", type=float, required=True, help="epoch seconds; nothing starts after it")
    ap.add_argument("--logs", required=True)
    ap.add_argument("--tag", default="gpu")
    ap.add_argument("--json")
    ap.add_argument("--resume", help="a --json file of an earlier call: its finished cases are kept, not rerun")
    ap.add_argument("--chunk", type=int, default=150, help="cases per process at most")
    ap.add_argument("--idle", type=int, default=60, help="seconds without output that make a case hung")
    ap.add_argument("--min-group", type=int, default=15, help="seconds a group needs to start")
    ap.add_argument("--max-restarts", type=int, default=4, help="faults/crashes/hangs per group before it stops")
    ap.add_argument("--sanitizer", default="compute-sanitizer", help="'' to skip the memcheck rerun")
    a = ap.parse_args()
    r = Runner(a)
    if a.resume and os.path.exists(a.resume):
        try:
            with open(a.resume) as f:
                old = json.load(f)
            r.results = {n: v for n, v in old.get("cases", {}).items() if v.get("status") != "not run"}
            r.culprits = [c for c in old.get("culprits", []) if c.get("case") in r.results]
            print(f"({len(r.results)} cases finished by an earlier call on this machine are not run again)\n")
        except (OSError, ValueError) as e:
            print(f"(--resume {a.resume} not read: {e})\n")
    for s in a.suites.split(","):
        if s:
            r.run_binary(s)
    text, total = r.report()
    print(text)
    r.save(total)
    bad = sum(total[k] for k in ("failed", "fault", "crashed", "hung"))
    unloaded = any(row["note"].startswith("does not load") for row in r.rows)
    return 1 if bad or unloaded else 0


if __name__ == "__main__":
    sys.exit(main())
