#!/usr/bin/env python3
"""A stand-in for a GoogleTest binary with CUDA cases, for testing scripts/gpu/gpu_check.sh and
scripts/gpu/gpu_tests.py without a GPU. Installed as <build>/hz_test_<name> (a copy of this file);
its cases come from the file <build>/hz_test_<name>.cases, one per line: `Suite.Case behaviour`
where behaviour is
  pass | fail | skip        what gtest prints for those;
  fault                     fails naming cudaErrorIllegalAddress, and every later case of the
                            same process fails the same way (a poisoned CUDA context);
  crash                     the process dies with SIGSEGV inside the case;
  hang                      the case never ends;
It understands --gtest_list_tests, --gtest_filter (exact names and Suite.* patterns, ':'-joined,
with '-' negatives) and ignores the other --gtest_ flags. Every case it runs is appended to
<build>/hz_test_<name>.ran (with " blocking" when CUDA_LAUNCH_BLOCKING=1), so a test can count how
often and how each case ran."""
import fnmatch
import os
import signal
import sys
import time

me = os.path.abspath(sys.argv[0])
cases = []
with open(me + ".cases") as f:
    for line in f:
        if line.strip() and not line.startswith("#"):
            name, what = line.split()
            cases.append((name, what))
if os.path.exists(me + ".noload"):  # a binary whose shared library is missing
    sys.stderr.write(f"{me}: error while loading shared libraries: libcublasLt.so.13: cannot open shared object file: No such file or directory\n")
    sys.exit(127)

gfilter = "*"
listing = False
for a in sys.argv[1:]:
    if a.startswith("--gtest_filter="):
        gfilter = a.split("=", 1)[1]
    elif a == "--gtest_list_tests":
        listing = True
pos, _, neg = gfilter.partition("-")
pos = [p for p in pos.split(":") if p] or ["*"]
neg = [p for p in neg.split(":") if p]
chosen = [(n, w) for n, w in cases
          if any(fnmatch.fnmatchcase(n, p) for p in pos) and not any(fnmatch.fnmatchcase(n, p) for p in neg)]

if listing:
    suite = None
    for n, _ in chosen:
        s, c = n.split(".", 1)
        if s != suite:
            print(s + ".")
            suite = s
        print("  " + c)
    sys.exit(0)

print(f"[==========] Running {len(chosen)} tests from 1 test suite.", flush=True)
poisoned = False
failed = 0
with open(me + ".ran", "a") as ran:
    for n, w in chosen:
        print(f"[ RUN      ] {n}", flush=True)
        ran.write(n + (" blocking" if os.environ.get("CUDA_LAUNCH_BLOCKING") == "1" else "") + "\n")
        ran.flush()
        if poisoned or w == "fault":
            poisoned = True
            print("unknown file: Failure\nC++ exception with description \"cudaDeviceSynchronize() failed: "
                  "cudaErrorIllegalAddress (an illegal memory access was encountered)\" thrown in the test body.")
            print(f"[  FAILED  ] {n} (3 ms)", flush=True)
            failed += 1
        elif w == "pass":
            print(f"[       OK ] {n} (1 ms)", flush=True)
        elif w == "fail":
            print("fake_test.cpp:10: Failure\nExpected equality of these values:\n  1\n  2")
            print(f"[  FAILED  ] {n} (1 ms)", flush=True)
            failed += 1
        elif w == "skip":
            print("fake_test.cpp:5: Skipped\nno usable CUDA device (stand-in)")
            print(f"[  SKIPPED ] {n} (0 ms)", flush=True)
        elif w == "crash":
            sys.stdout.flush()
            os.kill(os.getpid(), signal.SIGSEGV)
        elif w == "hang":
            time.sleep(100000)
print(f"[==========] {len(chosen)} tests from 1 test suite ran. (5 ms total)", flush=True)
sys.exit(1 if failed else 0)
